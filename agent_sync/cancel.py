"""The cancel scope: one per invocation, the single source of truth for "stop now".

Design
------
An :class:`~agent_sync.Agent` creates a fresh :class:`CancelScope` for each invocation and
drops it when the invocation ends. ``Agent.cancel()`` forwards to the running scope, so a
cancel that arrives while the agent is idle cannot leak into the next call, and a tool
thread abandoned by an earlier invocation keeps seeing *its* scope as cancelled forever.

Everything that blocks inside an invocation waits on the scope, one way or another:

* waits (retry back-off, tool grace periods, ``ToolContext.wait``) are ``event.wait``;
* blocked I/O (a silent socket, headers that never come) cannot wait on an event, so the
  code that owns it registers an *abort callback* (for a provider: shut the socket down).
  ``cancel()`` runs the callbacks, outside the lock, in the cancelling thread.

Known races, and why they are harmless
--------------------------------------
* ``register_abort`` after ``cancel()``: the callback runs at once in the registering
  thread, so an abort is never missed.
* ``cancel()`` racing ``close()``: ``close()`` marks the scope finished under the lock;
  a cancel that loses the race returns ``False`` and runs no callbacks.
* A callback that is running while its owner unregisters: the owner must tolerate one late
  call (socket shutdown on a connection already released is a no-op for our providers).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .errors import AgentSyncError

__all__ = ["AbortCallback", "CancelScope", "CancelledError"]

logger = logging.getLogger(__name__)

AbortCallback = Callable[[], None]


class CancelledError(AgentSyncError):
    """Raised inside an invocation when its scope has been cancelled.

    The loop catches it and returns a result with ``stop_reason == "cancelled"``; user code
    only sees it from :meth:`CancelScope.raise_if_cancelled` (for example in a tool).
    """


class CancelScope:
    """Cancellation state of one invocation. Thread-safe.

    Attributes:
        event: Set once the scope is cancelled; pass it to anything that can wait on it.
    """

    __slots__ = ("_callbacks", "_closed", "_lock", "_next_key", "_reason", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._closed = False
        self._callbacks: dict[int, AbortCallback] = {}
        self._next_key = 0

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel()`` has been called on this scope."""
        return self.event.is_set()

    @property
    def closed(self) -> bool:
        """Whether the invocation has finished (:meth:`close`): its run is over."""
        return self._closed

    @property
    def reason(self) -> str | None:
        """The reason given to the first ``cancel()``, or ``None``."""
        return self._reason

    def cancel(self, reason: str | None = None) -> bool:
        """Signal cancellation and run the abort callbacks.

        Idempotent: the first reason wins; later calls return ``True`` without running the
        callbacks again.

        Returns:
            ``True`` if the scope is live (its invocation has not finished), else ``False``.
        """
        with self._lock:
            if self._closed:
                return False
            if self.event.is_set():
                return True
            self._reason = reason
            self.event.set()
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            self._run_callback(callback)
        return True

    def register_abort(self, callback: AbortCallback) -> Callable[[], None]:
        """Register ``callback`` to run once when the scope is cancelled.

        If the scope is already cancelled, ``callback`` runs immediately in this thread.

        Returns:
            A function that unregisters the callback (safe to call more than once).
        """
        with self._lock:
            if not self.event.is_set():
                key = self._next_key
                self._next_key += 1
                self._callbacks[key] = callback
                return lambda: self._unregister(key)
        self._run_callback(callback)
        return _noop

    def wait(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (``None``: until cancelled).

        Returns:
            ``True`` if the scope was cancelled (the wait was cut short or it already was).
        """
        return self.event.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`CancelledError` if the scope has been cancelled."""
        if self.event.is_set():
            raise CancelledError(self._reason or "cancelled")

    def close(self) -> None:
        """Mark the invocation finished: later ``cancel()`` calls return ``False``."""
        with self._lock:
            self._closed = True
            self._callbacks.clear()

    def _unregister(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    @staticmethod
    def _run_callback(callback: AbortCallback) -> None:
        try:
            callback()
        except Exception:  # an abort must never break cancel() for the other callbacks
            logger.warning("abort callback failed", exc_info=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "cancelled" if self.cancelled else "live"
        return f"<CancelScope {state} reason={self._reason!r}>"


def _noop() -> None:
    return None
