"""The event logs of :class:`~agent_sync.stores.SQLiteRunStore` (the
:class:`~agent_sync.stores.RunEventLog` role), in the store's file.

A run's event log is rows of ``events`` (run, number, JSON text) and one row of
``event_logs`` (its last number, and once complete the time it is dropped). An append is
one ``BEGIN IMMEDIATE`` transaction: it checks the last number (compare-and-set) and the
complete mark, inserts the rows and moves the last number. A complete log past its time
reads as empty; ``prune`` (or the next append to it) deletes it. A database file written
before event logs existed gains their tables when a store opens it (:mod:`._sqlite_schema`).

Waiting (``read_events`` with a timeout): each waiting reader registers (its run, the number
it read up to, and its own lock-free event) and sleeps on its event. An append of this log
object wakes the readers of that run at once. Other processes' appends (and other store
objects' on the same file) are found by one poller thread per log object and process, while
readers wait: every :data:`_EVENT_POLL_S` it asks the writer connection for SQLite's
``PRAGMA data_version`` (no table read, no lock), and only when another connection committed
something does it read the last numbers of all the waited-for logs in one query and wake the
readers whose log moved. So 100 idle followers cost one pragma per poll, not 100 reads. The
poll is every :data:`_EVENT_POLL_S` (10 ms) for :data:`_BUSY_S` after the file last changed,
then every :data:`_QUIET_POLL_S` (25 ms): a streaming run's records reach a follower in
another process within about 10 ms, the first record after a quiet spell within about 25 ms,
and a process whose followers all wait costs about 40 wake-ups a second. A poller that fails
wakes every reader (each reads again and meets the error itself: fail closed).

Fork: a forked child forgets the parent's waiting readers and poller (none is the child's).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from .._signal_safe import Event
from ._event_log import RunEvent
from ._rules import decode_event, encode_events, events_complete, events_moved_on, storable_id
from ._sqlite_pool import Connections

__all__ = ["SQLiteEventLog"]

logger = logging.getLogger(__name__)

_EVENT_POLL_S = 0.01  # the poller's pause while the file changes
_QUIET_POLL_S = 0.025  # ... once it has not changed for _BUSY_S
_BUSY_S = 2.0
_LINGER_S = 1.0  # the poller ends after this long without a waiting reader
_IN_CHUNK = 500  # run ids per "IN (...)" (SQLite's limit on parameters may be 999)


class SQLiteEventLog:
    """The event logs in one store file, through the store's connections: the
    :class:`~agent_sync.stores.RunEventLog` half of :class:`~agent_sync.stores.SQLiteRunStore`,
    which inherits it. Thread-safe."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self._forget_waiting()
        _LOGS.add(self)

    def _forget_waiting(self) -> None:
        # The waiting readers: token -> (run id, number read up to, its event). Changed only
        # by one-C-call dict operations (signal-safe: see agent_sync._signal_safe).
        self._waiting: dict[int, tuple[str, int, Event]] = {}
        self._poller_lock = threading.Lock()  # _poller; only ever `with`
        self._poller: threading.Thread | None = None

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
        if texts:
            for waiting_for, _, wake in list(self._waiting.values()):
                if waiting_for == run_id:
                    wake.set()
        return after + len(texts)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        if not storable_id(run_id):
            return []
        while True:
            wake = Event()
            token = id(wake)  # unique while it waits
            try:
                self._waiting[token] = (run_id, after, wake)  # before the read: none missed
                events = self._events_after(run_id, after)
                remaining = deadline - time.monotonic()
                if events or remaining <= 0:
                    return events
                self._start_poller()
                wake.wait(remaining)
            finally:
                self._waiting.pop(token, None)

    def _read_events_woken(
        self, run_id: str, *, after: int, timeout: float, wake: Event
    ) -> list[RunEvent]:
        """See :class:`._event_log.WokenReads`."""
        if not storable_id(run_id):
            return []
        token = id(wake)
        try:
            self._waiting[token] = (run_id, after, wake)  # before the read: none missed
            events = self._events_after(run_id, after)
            if events or timeout <= 0:
                return events
            self._start_poller()
            if not wake.wait(timeout):
                return []
            return self._events_after(run_id, after)
        finally:
            self._waiting.pop(token, None)

    def _start_poller(self) -> None:
        with self._poller_lock:
            if self._poller is None or not self._poller.is_alive():  # (a start cut short)
                self._poller = threading.Thread(
                    target=self._poll, name="agent_sync-sqlite-events", daemon=True
                )
                self._poller.start()

    def _poll(self) -> None:
        """The poller thread: see the module docstring."""
        version: int | None = None
        idle_since = changed_at = time.monotonic()
        pause = threading.Event()
        while True:
            if not self._waiting:  # nothing to poll for (nor a connection to reopen)
                if time.monotonic() - idle_since >= _LINGER_S:
                    with self._poller_lock:
                        if not self._waiting:  # a reader that registers next starts another
                            self._poller = None
                            return
                pause.wait(_EVENT_POLL_S)
                continue
            idle_since = time.monotonic()
            try:
                with self._connections.writer() as db:  # the same connection at every poll
                    (now,) = db.execute("PRAGMA data_version").fetchone()
                if now != version:
                    version, changed_at = now, time.monotonic()
                    self._wake_moved(list(self._waiting.values()))
            except Exception:  # a store that fails: the readers meet it themselves
                logger.debug("the event log poller failed", exc_info=True)
                version = None
                for _, _, wake in list(self._waiting.values()):
                    wake.set()
            busy = time.monotonic() - changed_at < _BUSY_S
            pause.wait(_EVENT_POLL_S if busy else _QUIET_POLL_S)

    def _wake_moved(self, waiting: list[tuple[str, int, Event]]) -> None:
        """Wake the waiting readers whose log has moved past what they read."""
        run_ids = sorted({run_id for run_id, _, _ in waiting})
        last: dict[str, int] = {}
        for n in range(0, len(run_ids), _IN_CHUNK):
            chunk = run_ids[n : n + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._connections.rows(
                f"SELECT run_id, last_seq FROM event_logs WHERE run_id IN ({marks})",  # noqa: S608
                chunk,
            )
            last.update((run_id, int(seq)) for run_id, seq in rows)
        for run_id, after, wake in waiting:
            if last.get(run_id, 0) > after:
                wake.set()

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


_LOGS: weakref.WeakSet[SQLiteEventLog] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for log in list(_LOGS):  # no waiter nor poller of the parent's threads is the child's
        log._forget_waiting()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
