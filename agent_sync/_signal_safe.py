"""Signal safety: what a caller's thread may do with state that other threads share.

The rule
--------
A signal handler (Ctrl-C: ``KeyboardInterrupt``) runs in the main thread between two
bytecodes of whatever Python code runs there, after any call returns. Code that acquires a
lock and *then* runs Python code before the ``try``/``with`` that releases it leaks the lock
when the handler raises there, and every thread that waits for that lock afterwards hangs.
``threading.Condition.__enter__``/``__exit__``, ``Condition.wait``/``notify``,
``threading.Event.wait``/``set`` and ``queue.Queue`` are such code. So, for state shared
beyond one run (process-wide, or with the deadline thread, or by several runs):

* no caller-side code takes a lock through Python-level code: callers use operations that
  are one C call (``queue.SimpleQueue.put``/``get``, ``deque.append``/``popleft``,
  ``list.append``, ``dict.pop``), which a signal cannot split;
* ``with lock:`` on a plain ``threading.Lock``/``RLock`` is fine: its ``__enter__`` is C
  code, and from the first bytecode of the body on, the statement releases the lock whatever
  is raised;
* a thread that no signal reaches (a worker thread) may use any primitive, unless it shares
  it with a caller's thread.

A section that must run to its end (a run's release: give the agent back, close the turn)
cannot be made safe that way: a ``KeyboardInterrupt`` at its entry, or between two of its
steps, leaves it half done, and running it again only narrows the window. So it is
*protected* (:func:`ki_protected`): while a protected function's frame is on the main
thread's stack, the package's SIGINT handler does not raise; it notes the Ctrl-C, and the
outermost protected function raises it as it returns (as trio's ``enable_ki_protection``).
The handler is installed when the process's SIGINT handler is Python's default (at import,
and again on entering a protected function from the main thread), never over a handler of
the application's own; such a handler keeps the protection by calling the one it replaced
(``signal.getsignal`` before installing it), the handler that was there sees the frame. A
Ctrl-C in a protected section is handled when the section ends, so a protected section
never waits without a bound.

A wait in the main thread is also where a Ctrl-C can be lost for as long as the wait lasts:
CPython runs a signal's handler when the blocking C call returns, and a signal that arrives
just before the call blocks (or in another thread) does not end it. So the main thread never
blocks in one C call for longer than :data:`MAIN_THREAD_SLICE`: :func:`sliced` cuts its
waits, and the waiter loops.

:class:`Event` is a ``threading.Event`` built that way: the cancel scopes' and tokens' events
are set by the deadline thread and waited on by the runs' threads. ``_deadlines`` follows
the rule with its own queues; ``tests/test_signal_safety.py`` raises ``KeyboardInterrupt`` at
every point of these paths and checks that nothing is left held.
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue
from types import FrameType
from typing import ParamSpec, TypeVar

__all__ = ["MAIN_THREAD_SLICE", "Event", "ki_protected", "sliced"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

MAIN_THREAD_SLICE = 0.1
"""Seconds the main thread blocks in one C call at most, so a Ctrl-C that a blocking call
did not see is handled within this."""

_MAIN_THREAD = threading.main_thread().ident


def sliced(timeout: float | None) -> float | None:
    """The timeout to block with now for a wait of ``timeout`` seconds (``None``: no
    limit): at most :data:`MAIN_THREAD_SLICE` in the main thread, ``timeout`` elsewhere.
    The caller loops until its condition holds or its own time is up."""
    if threading.get_ident() != _MAIN_THREAD:
        return timeout
    if timeout is None or timeout > MAIN_THREAD_SLICE:
        return MAIN_THREAD_SLICE
    return timeout


class Event(threading.Event):
    """A ``threading.Event`` whose methods take no lock, so a signal never leaves one held.

    ``set()`` sets the flag, then wakes each waiter through the waiter's own
    ``SimpleQueue``; ``wait()`` registers its queue, then looks at the flag again (a ``set()``
    in between is seen), then blocks in ``SimpleQueue.get``. A ``wait()`` interrupted by a
    signal holds nothing; at worst its queue stays registered until the next ``set()``.
    """

    def __init__(self) -> None:  # no super().__init__(): its Condition would go unused
        self._flag = False
        self._waiters: deque[SimpleQueue[None]] = deque()

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._flag

    def set(self) -> None:
        """Set the flag and wake every thread waiting for it."""
        self._flag = True
        waiters = self._waiters
        while waiters:
            try:
                waiter = waiters.popleft()
            except IndexError:  # another set() took the last one
                break
            waiter.put(None)

    def clear(self) -> None:
        """Reset the flag: ``wait()`` blocks again until the next ``set()``."""
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set, or ``timeout`` seconds have passed.

        Returns:
            The flag on return: ``False`` only if the wait timed out.
        """
        if self._flag:
            return True
        waiter: SimpleQueue[None] = SimpleQueue()
        self._waiters.append(waiter)
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        try:
            while not self._flag:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                try:
                    waiter.get(timeout=_capped(sliced(left)))
                    break  # set() woke us
                except Empty:
                    continue  # a slice ended (a pending signal ran) or the time is up
        finally:
            try:
                self._waiters.remove(waiter)
            except ValueError:  # set() took it
                pass
        return self._flag

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {'set' if self._flag else 'unset'}>"


def _capped(timeout: float | None) -> float | None:
    return None if timeout is None else min(timeout, threading.TIMEOUT_MAX)


# -- Ctrl-C protection (module docstring) ---------------------------------------------------

_deferred = False  # a Ctrl-C landed in a protected section of the main thread


def ki_protected(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function``, run with Ctrl-C deferred: a ``KeyboardInterrupt`` that the SIGINT
    handler would raise anywhere inside it (its entry included) is raised as it returns,
    by the outermost protected function of the main thread (module docstring)."""

    @functools.wraps(function)
    def protected(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        # This frame is the marker (_protected_frame: its code object): from its first
        # bytecode on, the handler defers. No call between the check of _deferred and the
        # return, so a Ctrl-C is never deferred past the check.
        if _handler_missing():
            _install()
        try:
            return function(*args, **kwargs)
        finally:
            if _deferred:
                _deliver()

    return protected


_PROTECTED_CODE = ki_protected(len).__code__  # the one code object of every protected frame


def _protected_frame(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _PROTECTED_CODE:
            return True
        frame = frame.f_back
    return False


def _deliver() -> None:
    """Raise the deferred Ctrl-C, unless an outer protected frame will (or this is not the
    main thread, whose Ctrl-C it is)."""
    global _deferred
    if threading.get_ident() != _MAIN_THREAD or _protected_frame(sys._getframe(2)):
        return
    _deferred = False  # no call from here to the raise: nothing can be deferred in between
    raise KeyboardInterrupt


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """The package's SIGINT handler: Python's default, except in a protected section."""
    global _deferred
    if _protected_frame(frame):
        _deferred = True
        return
    signal.default_int_handler(signum, frame)


def _handler_missing() -> bool:
    return threading.get_ident() == _MAIN_THREAD and (
        _raw_handler(_SIGINT) is signal.default_int_handler
    )


# signal.getsignal turns the handler into a Handlers enum member when it can, trying and
# failing for a function: 2.4 us, twice per invoke(). The C function it wraps answers the
# question asked here (which function is installed) in 0.03 us.
_raw_handler: Callable[[int], object] = getattr(
    getattr(signal, "_signal", None), "getsignal", signal.getsignal
)
_SIGINT = int(signal.SIGINT)


def _install() -> None:
    """Put the package's SIGINT handler in place of Python's default (main thread only)."""
    try:
        signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread of the main interpreter
        pass


if _handler_missing():
    _install()
