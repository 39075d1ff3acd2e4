"""The event logs of :class:`~agent_sync.stores.SQLiteRunStore` (the
:class:`~agent_sync.stores.RunEventLog` role), in the store's file.

A run's event log is rows of ``events`` (run, number, JSON text) and one row of
``event_logs`` (its last number, and once complete the time it is dropped). An append is
one ``BEGIN IMMEDIATE`` transaction: it checks the last number (compare-and-set) and the
complete mark, inserts the rows and moves the last number. A complete log past its time
reads as empty; ``prune`` (or the next append to it) deletes it. A database file written
before event logs existed gains their tables when a store opens it (:mod:`._sqlite_schema`).

Waiting (``read_events`` with a timeout) is :mod:`._sqlite_waits`'s: one reader thread per
store object and process looks at the file every few milliseconds (``PRAGMA data_version``)
and, when it changed, reads every waited-for log in one query and hands each waiting reader
the events it lacks. An append of this store object hands its events to the readers waiting
right after it at once. The thread holds the waits, never the store: a store dropped without
``close()`` ends it and frees its connections (a finalizer).
"""

from __future__ import annotations

import sqlite3
import time
import weakref
from collections.abc import Sequence
from typing import Any

from .._signal_safe import Event
from ._event_log import RunEvent
from ._rules import decode_event, encode_events, events_complete, events_moved_on, storable_id
from ._sqlite_pool import Connections
from ._sqlite_waits import LogWaits

__all__ = ["SQLiteEventLog"]


class SQLiteEventLog:
    """The event logs in one store file, through the store's connections: the
    :class:`~agent_sync.stores.RunEventLog` half of :class:`~agent_sync.stores.SQLiteRunStore`,
    which inherits it. Thread-safe."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self._waits = LogWaits(connections)
        weakref.finalize(self, self._waits.close).atexit = False  # see the module docstring

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        texts = encode_events(events, after, keep_s)
        now = time.time()
        with self._connections.transaction(write=True) as db:
            last = self._event_log_end(db, run_id, now)
            if last != after:
                raise events_moved_on(run_id, last, after)
            if texts:
                db.executemany(
                    "INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)",
                    [(run_id, after + n, text) for n, text in enumerate(texts, start=1)],
                )
            if texts or keep_s is not None:
                db.execute(
                    "INSERT INTO event_logs (run_id, last_seq, expires_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq,"
                    " expires_at = excluded.expires_at",
                    (run_id, after + len(texts), None if keep_s is None else now + keep_s),
                )
        self._waits.appended(run_id, after, texts)
        return after + len(texts)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        if not storable_id(run_id):
            return []
        if timeout <= 0:
            return self._events_after(run_id, after)
        while True:
            events = self._waits.wait(run_id, after, deadline - time.monotonic(), Event())
            if events is None:  # woken without them: read here
                events = self._events_after(run_id, after)
            if events or time.monotonic() >= deadline:
                return events

    def _read_events_woken(
        self, run_id: str, *, after: int, timeout: float, wake: Event
    ) -> list[RunEvent]:
        """See :class:`._event_log.WokenReads`."""
        if not storable_id(run_id):
            return []
        if timeout <= 0:
            return self._events_after(run_id, after)
        events = self._waits.wait(run_id, after, timeout, wake)
        return self._events_after(run_id, after) if events is None else events

    def _drop_event_log(self, db: sqlite3.Connection, run_id: str) -> None:
        """Delete a run's log (inside the caller's write transaction)."""
        db.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
        db.execute("DELETE FROM event_logs WHERE run_id = ?", (run_id,))

    def _drop_expired_event_logs(self, db: sqlite3.Connection, now: float) -> None:
        """Delete the complete logs past their time (inside the caller's write transaction)."""
        dropped = db.execute("SELECT run_id FROM event_logs WHERE expires_at <= ?", (now,))
        for (run_id,) in dropped.fetchall():
            self._drop_event_log(db, run_id)

    def _events_after(self, run_id: str, after: int) -> list[RunEvent]:
        """The live log's events above ``after``: one read (WAL: no lock a writer waits
        for), which a complete log past its time answers with nothing."""
        rows = self._connections.rows(
            "SELECT e.seq, e.data FROM event_logs AS l JOIN events AS e"
            " ON e.run_id = l.run_id AND e.seq > ?"
            " WHERE l.run_id = ? AND l.last_seq > ?"
            " AND (l.expires_at IS NULL OR l.expires_at > ?) ORDER BY e.seq",
            (after, run_id, after, time.time()),
        )
        return [RunEvent(seq=seq, data=decode_event(data)) for seq, data in rows]

    def _event_log_end(self, db: sqlite3.Connection, run_id: str, now: float) -> int:
        """The live log's last number (0: no log; one past its time is dropped first).

        Raises:
            RunConflictError: The log is complete.
        """
        row = db.execute(
            "SELECT last_seq, expires_at FROM event_logs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return 0
        last, expires_at = row
        if expires_at is None:
            return int(last)
        if expires_at <= now:
            self._drop_event_log(db, run_id)
            return 0
        raise events_complete(run_id)
