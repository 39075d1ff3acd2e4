"""The records a run published in this process, kept in memory for the streams that follow
it here: they get each record as soon as it is stored, without reading it back.

A :class:`~agent_sync._run_log._publish.Publisher` adds each batch once ``store.append_events``
has taken it (a record is never sent before it is stored) and ends the log when its run is
over or paused; the log is then forgotten. A follower asks :func:`read` first and the store
when it answers ``None`` (the run is published by another process, or has moved on here
past what the follower needs). The records are the very dicts that were appended, so a
stream encodes them to the same bytes as a replay read back from the store.

A log holds the last :data:`HELD` to ``2 * HELD`` records, not the run's whole answer: a
follower further behind reads the store (whose log is the buffer).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from ..stores import RunEvent

__all__ = ["HELD", "LocalLog", "local_log", "open_local_log"]

HELD: Final = 1024
"""Records a log keeps at least (the newest)."""


class LocalLog:
    """One run's records published by this process (thread-safe)."""

    def __init__(self, run_id: str, after: int) -> None:
        self.run_id = run_id
        self._start = after + 1  # the number of the first record held
        self._events: list[RunEvent] = []
        self._changed = threading.Condition()
        self._ended = False

    def add(self, first_seq: int, records: list[dict[str, Any]]) -> None:
        """Records the store has taken, numbered from ``first_seq``."""
        with self._changed:
            self._events.extend(
                RunEvent(seq=first_seq + n, data=record) for n, record in enumerate(records)
            )
            excess = len(self._events) - HELD
            if excess >= HELD:  # by halves: trimming the front is a copy
                del self._events[:excess]
                self._start += excess
            self._changed.notify_all()

    def end(self) -> None:
        """The publisher is done: nothing more comes through here."""
        with self._changed:
            self._ended = True
            self._changed.notify_all()
        with _lock:
            if _logs.get(self.run_id) is self:
                del _logs[self.run_id]

    def read(
        self, after: int, timeout: float, woken: Callable[[], bool] | None = None
    ) -> list[RunEvent] | None:
        """The records after ``after``, waiting up to ``timeout`` s for one (or until
        ``woken()`` holds, after a :meth:`poke`); ``None`` when the store must answer
        (``after`` is before this log, or the log ended)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if after + 1 < self._start:
                return None
            while True:
                held = after + 1 - self._start
                if held < len(self._events):
                    return self._events[held:]
                if self._ended:
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0 or woken is not None and woken():
                    return []
                self._changed.wait(remaining)

    def poke(self) -> None:
        """Wake the readers, for those whose ``woken()`` now holds."""
        with self._changed:
            self._changed.notify_all()


_logs: dict[str, LocalLog] = {}
_lock = threading.Lock()


def open_local_log(run_id: str, after: int) -> LocalLog:
    """Start holding a run's records published here, from number ``after + 1``."""
    log = LocalLog(run_id, after)
    with _lock:
        _logs[run_id] = log
    return log


def local_log(run_id: str) -> LocalLog | None:
    """The run's log if this process publishes it now."""
    with _lock:
        return _logs.get(run_id)


def _forget_logs() -> None:
    """In a forked child: the parent's publishers do not run here."""
    global _lock
    _logs.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_logs)
