"""Deadlines: one process-wide scheduler thread serves every ``timeout=``.

Design
------
``threading.Timer`` starts a thread per call, so 1,000 concurrent runs with a timeout would
hold 1,000 sleeping threads. Instead :func:`schedule` pushes an entry onto one heap, ordered
by its due time on the monotonic clock (ties in scheduling order), and a single daemon
thread named ``agent_sync-deadlines`` sleeps on a :class:`threading.Condition` until the
earliest entry is due, then runs its callback. The thread is started lazily by the first
:func:`schedule` and lives as long as the process; idle, it waits without a timeout.

* :func:`schedule` is O(log n) and only wakes the thread when the new entry becomes the
  earliest (a run's deadline is usually later than the ones already queued).
* :meth:`Deadline.cancel` is O(1) amortised: it marks the entry dead (and drops its
  callback, so whatever the callback references can be freed at once) and leaves it in the
  heap (lazy deletion). Dead entries at the top are popped at once; when dead entries are
  more than half of a heap of a few hundred, the heap is rebuilt without them. The heap
  therefore stays under about twice the live entries, however many schedule/cancel pairs
  go through it.
* Callbacks run one at a time in the scheduler thread, so a slow callback delays every
  deadline due after it. Ours is :meth:`~agent_sync.cancel.CancelScope.cancel`, which sets
  an event and runs the providers' abort callbacks (a socket shutdown): fast. An exception
  from a callback is logged (warning, with the traceback) and the thread carries on.
* ``os.fork()``: the child has no scheduler thread, and may have been forked while another
  thread held the lock. A fork hook gives the child a fresh lock and an empty heap; its
  first :func:`schedule` starts its own thread. Deadlines inherited from the parent never
  fire in the child, and cancelling them there is a no-op.

Guarantees, and known races
---------------------------
* A callback runs at most once, and never before its due time.
* When :meth:`Deadline.cancel` returns, the callback has either *finished* or will never
  start: cancel racing the firing waits for the callback to return. The exception is a
  cancel from the scheduler thread itself (from inside a callback, or a ``__del__`` that the
  garbage collector happens to run there): waiting would deadlock, so it returns at once.
  Hence: do not call ``cancel()`` while holding a lock that a callback may take. The run
  driver calls it from ``finally`` with no lock held, after closing its scope.
* A deadline is due when the clock passes it; the callback may run later by as much as the
  callbacks queued ahead of it take (and the OS's wake-up latency).
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["Deadline", "pending_count", "schedule", "scheduler_thread"]

logger = logging.getLogger(__name__)

THREAD_NAME = "agent_sync-deadlines"

# Rebuild the heap once dead entries pass this many *and* half of it: small heaps never pay
# for a rebuild, and each rebuild is paid for by at least as many cancels as it keeps.
_COMPACT_MIN = 256

_PENDING, _FIRING, _DONE, _CANCELLED = range(4)
_STATE_NAMES = ("pending", "firing", "fired", "cancelled")

_Entry = tuple[float, int, "Deadline"]


class Deadline:
    """One scheduled callback, returned by :func:`schedule`. Thread-safe.

    Attributes:
        when: The due time, on the :func:`time.monotonic` clock.
    """

    __slots__ = ("_callback", "_generation", "_scheduler", "_state", "when")

    def __init__(
        self, scheduler: _Scheduler, when: float, callback: Callable[[], None], generation: int
    ) -> None:
        self.when = when
        self._callback: Callable[[], None] | None = callback
        self._scheduler = scheduler
        self._generation = generation
        self._state = _PENDING

    def cancel(self) -> None:
        """Make sure the callback will not run (again). Idempotent; any thread; cheap.

        If the callback is running in the scheduler thread at this moment, waits for it to
        return (unless called from the scheduler thread itself), so that afterwards the
        callback has either finished or will never start.
        """
        self._scheduler.cancel(self)

    def remaining(self) -> float:
        """Seconds until the deadline is due (0.0 once it is), whether or not cancelled."""
        return max(0.0, self.when - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` stopped the callback before it started."""
        return self._state == _CANCELLED

    @property
    def fired(self) -> bool:
        """Whether the callback has run (it has returned or raised)."""
        return self._state == _DONE

    def __repr__(self) -> str:
        state = _STATE_NAMES[self._state]
        return f"<Deadline {state} remaining={self.remaining():.3f}s>"


class _Scheduler:
    """The heap, its lock and its thread. One per process (see :data:`_SCHEDULER`)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        lock = threading.Lock()
        # Two conditions on one lock: schedule() wakes only the scheduler thread, and the end
        # of a callback wakes only cancel() calls waiting for it.
        self._wakeup = threading.Condition(lock)
        self._fired = threading.Condition(lock)
        self._heap: list[_Entry] = []
        self._dead = 0  # cancelled entries still in the heap
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._generation = getattr(self, "_generation", 0) + 1

    def after_fork_in_child(self) -> None:
        """Forget the parent's entries, lock and thread (``os.register_at_fork``)."""
        self._reset()

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Deadline:
        when = time.monotonic() + max(0.0, delay_s)
        with self._wakeup:
            deadline = Deadline(self, when, callback, self._generation)
            heap = self._heap
            self._seq += 1
            heapq.heappush(heap, (when, self._seq, deadline))
            if self._thread is None:
                # Started under the lock so that two first calls cannot start two threads;
                # the new thread blocks on the lock until we release it.
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()
            elif heap[0][2] is deadline:
                self._wakeup.notify()
        return deadline

    def cancel(self, deadline: Deadline) -> None:
        with self._wakeup:
            state = deadline._state
            if deadline._generation != self._generation:
                # Inherited across fork: not in our heap, and its callback cannot be running.
                if state in (_PENDING, _FIRING):
                    deadline._state = _CANCELLED
                    deadline._callback = None
                return
            if state == _PENDING:
                deadline._state = _CANCELLED
                deadline._callback = None
                self._dead += 1
                self._drop_dead()
            elif state == _FIRING and threading.current_thread() is not self._thread:
                while deadline._state == _FIRING:
                    self._fired.wait()

    def _drop_dead(self) -> None:
        """Pop dead entries off the top; rebuild the heap if they are most of it. Locked."""
        heap = self._heap
        while heap and heap[0][2]._state == _CANCELLED:
            heapq.heappop(heap)
            self._dead -= 1
        if self._dead > _COMPACT_MIN and self._dead * 2 > len(heap):
            # In place: the scheduler thread reads self._heap only under the lock anyway.
            heap[:] = [entry for entry in heap if entry[2]._state != _CANCELLED]
            heapq.heapify(heap)
            self._dead = 0

    def pending_count(self) -> int:
        with self._wakeup:
            return len(self._heap) - self._dead

    def thread(self) -> threading.Thread | None:
        return self._thread

    def _run(self) -> None:
        wakeup = self._wakeup
        while True:
            with wakeup:
                while True:
                    self._drop_dead()
                    heap = self._heap
                    if not heap:
                        wakeup.wait()
                        continue
                    delay = heap[0][0] - time.monotonic()
                    if delay <= 0:
                        break
                    wakeup.wait(delay)
                deadline = heapq.heappop(heap)[2]
                callback = deadline._callback
                deadline._callback = None
                deadline._state = _FIRING
            try:
                if callback is not None:
                    callback()
            except BaseException:  # a callback must never stop every later deadline
                # The name only: a repr could carry anything the callback's object holds.
                name = getattr(callback, "__qualname__", type(callback).__name__)
                logger.warning("callback=<%s> | deadline callback failed", name, exc_info=True)
            finally:
                del callback  # do not keep the last callback's referents alive while idle
                with wakeup:
                    deadline._state = _DONE
                    self._fired.notify_all()


_SCHEDULER = _Scheduler()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SCHEDULER.after_fork_in_child)


def schedule(delay_s: float, callback: Callable[[], None]) -> Deadline:
    """Run ``callback()`` in the scheduler thread once ``delay_s`` seconds have passed.

    Args:
        delay_s: Seconds from now (monotonic clock); zero or negative means "as soon as
            possible".
        callback: Called with no arguments, in the scheduler thread. It should be quick (it
            delays every deadline due after it); exceptions are logged and ignored.

    Returns:
        A :class:`Deadline`; :meth:`Deadline.cancel` disarms it.

    Thread-safe; starts the scheduler thread on first use (in each process).
    """
    return _SCHEDULER.schedule(delay_s, callback)


def scheduler_thread() -> threading.Thread | None:
    """The scheduler thread of this process, or ``None`` before the first :func:`schedule`."""
    return _SCHEDULER.thread()


def pending_count() -> int:
    """How many deadlines are scheduled and neither fired, firing nor cancelled."""
    return _SCHEDULER.pending_count()
