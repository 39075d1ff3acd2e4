"""The event logs of :class:`~agent_sync.stores.MemoryRunStore` (the
:class:`~agent_sync.stores.RunEventLog` role): a list of JSON texts per run, under the
store's one lock; a condition on it wakes the readers that wait (``read_events`` with a
timeout) at each append. A complete log past its keep time reads as empty and is dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._event_log import RunEvent
from ._rules import decode_event, encode_events, events_complete, events_moved_on

__all__ = ["MemoryEventLog"]


@dataclass
class _EventLog:
    events: list[str] = field(default_factory=list)  # JSON texts; events[i] is number i + 1
    expires_at: float | None = None  # set once complete


class MemoryEventLog:
    """The event-log half of the memory store; it owns the store's lock and clock.

    Args:
        clock: Epoch seconds (the store's: tests pass their own).
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._appended = threading.Condition(self._lock)
        self._event_logs: dict[str, _EventLog] = {}

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        texts = encode_events(events, after, keep_s)
        with self._lock:
            log = self._live_log(run_id)
            if log is None:
                log = self._event_logs[run_id] = _EventLog()
            if log.expires_at is not None:
                raise events_complete(run_id)
            if len(log.events) != after:
                raise events_moved_on(run_id, len(log.events), after)
            log.events.extend(texts)
            if keep_s is not None:
                log.expires_at = self._now() + keep_s
            if texts:
                self._appended.notify_all()
            return len(log.events)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            while True:
                log = self._live_log(run_id)
                if log is not None and len(log.events) > after:
                    start = max(0, after)
                    return [
                        RunEvent(seq=start + offset + 1, data=decode_event(text))
                        for offset, text in enumerate(log.events[start:])
                    ]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._appended.wait(remaining)

    # -- inside the lock --

    def _now(self) -> float:
        return float(self._clock())

    def _live_log(self, run_id: str) -> _EventLog | None:
        """The run's event log, dropped first if it is complete and past its keep time."""
        log = self._event_logs.get(run_id)
        if log is not None and log.expires_at is not None and log.expires_at <= self._now():
            del self._event_logs[run_id]
            return None
        return log

    def _drop_expired_event_logs(self, now: float) -> None:
        """Drop the complete logs past their keep time (``prune``)."""
        for run_id, log in list(self._event_logs.items()):
            if log.expires_at is not None and log.expires_at <= now:
                del self._event_logs[run_id]
