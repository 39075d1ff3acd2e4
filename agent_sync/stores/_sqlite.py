""":class:`SQLiteRunStore`: the embedded run store (standard library ``sqlite3``), for many
processes on one host (gunicorn ``--workers N``, Celery workers beside a web app).

Design:

* One file, WAL journal, a busy timeout, created with mode 0600 (and its tables) before
  SQLite opens it. Per process, one writer connection and a few reader connections
  (:mod:`._sqlite_pool`): descriptors are bounded per store, not per thread, a forked child
  (gunicorn ``--preload``) opens its own, and a file deleted or replaced under the store
  fails closed with an error naming it.
* Every change is one ``BEGIN IMMEDIATE`` transaction: it reads the run's version, checks
  it (compare-and-set) and writes; the loser of a race sees the winner's version and gets
  ``RunConflictError``. Reads (``load``, ``get``, ``read_events``, a signal poll) are one
  deferred transaction on a reader connection: a WAL snapshot, so readers never wait for
  the writer; only a read that finds a lease to expire goes on as a write.
* Leases use one clock: SQLite's ``julianday('now')`` (the host's clock as SQLite reads it)
  inside the transaction that sets or checks them, never a process's ``time.time`` (which
  a process may patch or fake: a worker whose clock runs ahead must not fail another
  worker's live run). The other times (``started_at``, end times, event log expiry) are the
  process's ``time.time``.
* The log is a table of (conversation, position, message JSON): a final commit deletes the
  positions from ``history_start`` on and inserts the run's messages, so its cost does not
  grow with the conversation.
* Signals are rows (autoincrement id = order); ``wait_signals`` takes (selects and deletes)
  them in one transaction, polling every few milliseconds until its timeout. Polling is what
  SQLite offers across processes; a poll is one indexed read, and only a poll that finds
  rows takes the write lock.
* A run's event log is rows of ``events`` (run, number, JSON text) and one row of
  ``event_logs`` (its last number, and once complete the time it is dropped). An append is
  one ``BEGIN IMMEDIATE`` transaction: it checks the last number (compare-and-set) and the
  complete mark, inserts the rows and moves the last number. ``read_events`` waits on a
  event this store object sets after each of its appends (a reader in the same
  process wakes at once), and polls every ``_EVENT_POLL_S`` for other processes' appends:
  each poll is one indexed read, never the write lock. A complete log past its time reads
  as empty; ``prune`` (or the next append to it) deletes it. A database file written before
  event logs existed gains their tables when a store opens it.
* Every ``sqlite3`` failure (locked past the busy timeout, an unwritable file, disk I/O)
  becomes :class:`~agent_sync.errors.StoreUnavailableError`: the transaction is rolled back
  and nothing changed (fail closed).

The rules shared with every store come from :mod:`._rules`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from .._prompt import content_blocks
from .._run_state import RunSnapshot, RunState
from .._signal_safe import Event
from ..cancel import CancelMode, check_mode
from ..errors import StoreUnavailableError
from ..messages import ContentBlock, Message
from ._event_log import RunEvent
from ._protocol import ConversationRecord, RunSignal, StoredRun
from ._rules import (
    FINAL_STATUSES,
    abandoned,
    bad_conversation_id,
    cancelled_while_paused,
    check_reason,
    conversation_busy,
    conversation_paused,
    decode_event,
    decode_messages,
    decode_state,
    encode_events,
    encode_messages,
    encode_state,
    events_complete,
    events_moved_on,
    input_pending,
    log_moved_on,
    moved_on,
    not_paused,
    not_running,
    run_exists,
    snapshot_of,
    stale_write,
    storable_id,
)
from ._sqlite_pool import Connections, create_private

__all__ = ["SQLiteRunStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    version INTEGER NOT NULL,
    owner TEXT,
    lease_s REAL NOT NULL,
    lease_expires_at REAL, -- database time (_NOW), never a process's clock
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ended_at REAL,
    injects INTEGER NOT NULL DEFAULT 0 -- how many inputs store.inject accepted
);
CREATE TABLE IF NOT EXISTS conversations (
    conversation_id TEXT PRIMARY KEY,
    current_run TEXT
);
CREATE TABLE IF NOT EXISTS log (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
CREATE TABLE IF NOT EXISTS log_generations ( -- how many times replace_log replaced a log
    conversation_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS signals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT,
    content TEXT -- inject: the message JSON; cancel: the mode
);
CREATE INDEX IF NOT EXISTS signals_by_run ON signals (run_id, id);
CREATE INDEX IF NOT EXISTS runs_ended ON runs (ended_at);
CREATE TABLE IF NOT EXISTS event_logs (
    run_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    expires_at REAL -- set once the log is complete: epoch seconds it is dropped at
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX IF NOT EXISTS event_logs_expiring ON event_logs (expires_at);
"""

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""The database's time in epoch seconds: the one clock of leases (set and checked)."""

_POLL_S = 0.005  # wait_signals: one indexed read per poll
_EVENT_POLL_S = 0.01  # read_events, for other processes' appends: one indexed read per poll


class SQLiteRunStore:
    """A :class:`~agent_sync.stores.RunStore` in one SQLite file. Thread- and process-safe.

    Args:
        path: The database file (created 0600, with its tables, if missing).
        lease_s: The lease agents on this store use by default (seconds).
        busy_timeout_s: How long a write waits for another process's write.

    Raises:
        StoreUnavailableError: The file cannot be created or opened.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, lease_s: float = 30.0, busy_timeout_s: float = 30.0
    ) -> None:
        self.path = os.fspath(path)
        self.lease_s = lease_s
        self._connections = Connections(self.path, busy_timeout_s)
        self._appended = Event()  # set, and replaced, after each append of this object
        _STORES.add(self)
        create_private(self.path)
        with self._connections.writer() as db:
            try:
                db.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc
        with self._write() as db:
            _add_missing_columns(db)
        self._connections.opened()

    def __repr__(self) -> str:
        return f"<SQLiteRunStore {self.path!r}>"

    def close(self) -> None:
        """Close this process's idle connections (a later call opens new ones)."""
        self._connections.close()

    # -- conversations and runs --

    def load(self, conversation_id: str, *, since: int = 0) -> ConversationRecord:
        if not storable_id(conversation_id):
            return ConversationRecord(
                conversation_id=conversation_id, messages=(), run=None, length=0
            )
        with self._read() as db:
            expired = self._lease_ran_out(db, conversation_id)
            if not expired:
                return self._record(db, conversation_id, since)
        with self._write() as db:  # a lease ran out: fail that run first (a write)
            self._expire(db, conversation_id)
            return self._record(db, conversation_id, since)

    def replace_log(self, conversation_id: str, messages: Sequence[Message]) -> int:
        if not storable_id(conversation_id):
            raise bad_conversation_id(conversation_id)
        texts = encode_messages(messages)
        with self._write() as db:
            self._expire(db, conversation_id)
            current = self._current(db, conversation_id)
            if current is not None:
                status = db.execute(
                    "SELECT status FROM runs WHERE run_id = ?", (current,)
                ).fetchone()[0]
                if status == "paused":
                    raise conversation_paused(conversation_id)
                raise conversation_busy(conversation_id)
            db.execute("DELETE FROM log WHERE conversation_id = ?", (conversation_id,))
            db.executemany(
                "INSERT INTO log (conversation_id, position, message) VALUES (?, ?, ?)",
                [(conversation_id, n, text) for n, text in enumerate(texts)],
            )
            db.execute(
                "INSERT INTO log_generations (conversation_id, generation) VALUES (?, 1)"
                " ON CONFLICT (conversation_id) DO UPDATE SET generation = generation + 1",
                (conversation_id,),
            )
            (generation,) = db.execute(
                "SELECT generation FROM log_generations WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
        return int(generation)

    def begin(
        self,
        conversation_id: str,
        state: RunState,
        *,
        owner: str,
        lease_s: float,
        expected_length: int,
    ) -> int:
        if not storable_id(conversation_id):
            raise bad_conversation_id(conversation_id)
        now = time.time()
        with self._write() as db:
            self._expire(db, conversation_id)
            current = self._current(db, conversation_id)
            if current is not None:
                status = db.execute(
                    "SELECT status FROM runs WHERE run_id = ?", (current,)
                ).fetchone()[0]
                if status == "paused":
                    raise conversation_paused(conversation_id)
                raise conversation_busy(conversation_id)
            length = self._length(db, conversation_id)
            if length != expected_length:
                raise log_moved_on(conversation_id, length, expected_length)
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (state.run_id,)).fetchone():
                raise run_exists(state.run_id)
            db.execute(
                "INSERT INTO runs (run_id, conversation_id, state, status, version, owner,"
                " lease_s, lease_expires_at, started_at, updated_at)"
                f" VALUES (?, ?, ?, ?, 1, ?, ?, {_NOW} + ?, ?, ?)",  # noqa: S608 - constant
                (
                    state.run_id,
                    conversation_id,
                    encode_state(state),
                    state.status,
                    owner,
                    lease_s,
                    lease_s,
                    now,
                    now,
                ),
            )
            db.execute(
                "INSERT INTO conversations (conversation_id, current_run) VALUES (?, ?)"
                " ON CONFLICT (conversation_id) DO UPDATE SET current_run = excluded.current_run",
                (conversation_id, state.run_id),
            )
        return 1

    def commit(
        self,
        state: RunState,
        *,
        owner: str,
        version: int,
        injects_received: int | None = None,
    ) -> int:
        now = time.time()
        with self._write() as db:
            row = db.execute(
                "SELECT status, version, owner, injects FROM runs WHERE run_id = ?",
                (state.run_id,),
            ).fetchone()
            if row is None:
                raise stale_write(state.run_id, "unknown run")
            status, current_version, current_owner, injects = row
            if status in FINAL_STATUSES:
                raise stale_write(state.run_id, f"the run is over ({status})")
            if current_version != version or current_owner != owner:
                raise stale_write(state.run_id, moved_on(current_version, version))
            if (
                state.status != "running"  # the run's last look at its input: end or pause
                and injects_received is not None
                and injects > injects_received
            ):
                raise input_pending(state.run_id, injects, injects_received)
            self._write_state(db, state, now)
            if state.status == "running":  # a commit is a sign of life
                db.execute(
                    f"UPDATE runs SET lease_expires_at = {_NOW} + lease_s"  # noqa: S608
                    " WHERE run_id = ?",
                    (state.run_id,),
                )
            return version + 1

    def claim(self, run_id: str, *, owner: str, lease_s: float, version: int) -> int:
        now = time.time()
        with self._write() as db:
            row = db.execute(
                "SELECT state, version FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None or row[1] != version:
                raise stale_write(run_id, f"not at version {version}")
            state = decode_state(row[0])
            if state.status != "paused":
                raise not_paused(run_id, state.status)
            running = replace(state, status="running")
            db.execute(
                "UPDATE runs SET state = ?, status = 'running', version = ?, owner = ?,"
                f" lease_s = ?, lease_expires_at = {_NOW} + ?, updated_at = ?,"  # noqa: S608
                " injects = (SELECT COUNT(*) FROM signals WHERE run_id = runs.run_id"
                " AND kind = 'inject') WHERE run_id = ?",  # the new owner receives those
                (encode_state(running), version + 1, owner, lease_s, lease_s, now, run_id),
            )
            return version + 1

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        with self._write() as db:
            cursor = db.execute(
                f"UPDATE runs SET lease_s = ?, lease_expires_at = {_NOW} + ?"  # noqa: S608
                " WHERE run_id = ? AND owner = ? AND status = 'running'",
                (lease_s, lease_s, run_id, owner),
            )
            return cursor.rowcount == 1

    def get(self, run_id: str) -> RunSnapshot | None:
        if not storable_id(run_id):
            return None
        with self._read() as db:
            row = db.execute(
                "SELECT conversation_id, state, started_at, updated_at FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                return None
            conversation_id, state, started, updated = row
            expired = self._lease_ran_out(db, conversation_id)
        if expired:
            with self._write() as db:  # a lease ran out: fail that run first (a write)
                self._expire(db, conversation_id)
                state, started, updated = db.execute(
                    "SELECT state, started_at, updated_at FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
        return snapshot_of(decode_state(state), started_at=started, updated_at=updated)

    # -- signals --

    def cancel(self, run_id: str, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        check_mode(mode)
        reason = check_reason(reason)
        if not storable_id(run_id):
            return False
        with self._write() as db:
            row = db.execute(
                "SELECT conversation_id FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                return False
            self._expire(db, row[0])
            state = decode_state(
                db.execute("SELECT state FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
            )
            if state.status == "paused":
                self._write_state(db, cancelled_while_paused(state, reason), time.time())
                return True
            if state.status != "running":
                return False
            db.execute(
                "INSERT INTO signals (run_id, kind, reason, content) VALUES (?, 'cancel', ?, ?)",
                (run_id, reason, mode),  # a cancel's content column holds its mode
            )
            return True

    def inject(self, run_id: str, content: Sequence[ContentBlock] | str) -> None:
        blocks = content_blocks(content, what="injected input")  # checked at the edge
        (text,) = encode_messages([{"role": "user", "content": blocks}])
        if not storable_id(run_id):
            raise not_running(run_id)
        with self._write() as db:
            counted = db.execute(
                "UPDATE runs SET injects = injects + 1 WHERE run_id = ? AND status = 'running'",
                (run_id,),
            )
            if counted.rowcount != 1:
                raise not_running(run_id)
            db.execute(
                "INSERT INTO signals (run_id, kind, content) VALUES (?, 'inject', ?)",
                (run_id, text),
            )

    def wait_signals(self, run_ids: Collection[str], timeout: float) -> list[RunSignal]:
        deadline = time.monotonic() + max(0.0, timeout)
        pause = threading.Event()
        while True:
            wanted = list(run_ids)  # read again at each poll: it may have grown
            taken = self._take_signals(wanted) if wanted else []
            remaining = deadline - time.monotonic()
            if taken or remaining <= 0:
                return taken
            pause.wait(min(_POLL_S, remaining))  # polling is SQLite's only cross-process wake

    # -- event logs --

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
        with self._write() as db:
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
            appended, self._appended = self._appended, Event()  # lock-free (_signal_safe)
            appended.set()
        return after + len(texts)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        if not storable_id(run_id):
            return []
        while True:
            appended = self._appended  # before the read: an append after it sets this one
            events = self._events_after(run_id, after)
            remaining = deadline - time.monotonic()
            if events or remaining <= 0:
                return events
            appended.wait(min(_EVENT_POLL_S, remaining))  # polls: other processes' appends

    def prune(self, *, older_than: float) -> int:
        now = time.time()
        cutoff = now - older_than
        with self._write() as db:
            old = [
                row[0]
                for row in db.execute(
                    "SELECT run_id FROM runs WHERE ended_at IS NOT NULL AND ended_at <= ?",
                    (cutoff,),
                )
            ]
            for run_id in old:
                db.execute("DELETE FROM signals WHERE run_id = ?", (run_id,))
                db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                self._drop_event_log(db, run_id)
            dropped = db.execute(
                "SELECT run_id FROM event_logs WHERE expires_at <= ?", (now,)
            ).fetchall()
            for (run_id,) in dropped:
                self._drop_event_log(db, run_id)
            return len(old)

    # -- inside a transaction --

    def _record(
        self, db: sqlite3.Connection, conversation_id: str, since: int
    ) -> ConversationRecord:
        length = self._length(db, conversation_id)
        start = min(max(0, since), length)
        rows = db.execute(
            "SELECT message FROM log WHERE conversation_id = ? AND position >= ? ORDER BY position",
            (conversation_id, start),
        ).fetchall()
        current = self._current(db, conversation_id)
        stored = self._stored(db, current) if current is not None else None
        generation = db.execute(
            "SELECT generation FROM log_generations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        return ConversationRecord(
            conversation_id=conversation_id,
            messages=tuple(decode_messages([row[0] for row in rows])),
            run=stored,
            start=start,
            length=length,
            generation=generation[0] if generation is not None else 0,
        )

    def _take_signals(self, run_ids: list[str]) -> list[RunSignal]:
        marks = ",".join("?" * len(run_ids))
        queued = self._connections.rows(  # a read first (WAL: no lock a writer waits for)
            f"SELECT 1 FROM signals WHERE run_id IN ({marks}) LIMIT 1",  # noqa: S608
            run_ids,
        )
        if not queued:
            return []  # the usual poll: nothing queued, no write lock taken
        with self._write() as db:
            rows = db.execute(
                f"SELECT id, run_id, kind, reason, content FROM signals"  # noqa: S608 - marks only
                f" WHERE run_id IN ({marks}) ORDER BY id",
                run_ids,
            ).fetchall()
            if rows:
                db.execute(
                    f"DELETE FROM signals WHERE id IN ({','.join('?' * len(rows))})",  # noqa: S608
                    [row[0] for row in rows],
                )
        signals = []
        for _, run_id, kind, reason, content in rows:
            if kind == "cancel":  # its content column holds the mode (NULL: "now")
                signals.append(
                    RunSignal(run_id=run_id, kind="cancel", reason=reason, mode=content or "now")
                )
                continue
            blocks = tuple(decode_messages([content])[0]["content"])
            signals.append(RunSignal(run_id=run_id, kind="inject", content=blocks))
        return signals

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

    def _drop_event_log(self, db: sqlite3.Connection, run_id: str) -> None:
        db.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
        db.execute("DELETE FROM event_logs WHERE run_id = ?", (run_id,))

    def _current(self, db: sqlite3.Connection, conversation_id: str) -> str | None:
        row = db.execute(
            "SELECT current_run FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        return row[0] if row is not None else None

    def _length(self, db: sqlite3.Connection, conversation_id: str) -> int:
        row = db.execute(  # the primary key's index: no scan of the conversation
            "SELECT MAX(position) FROM log WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def _stored(self, db: sqlite3.Connection, run_id: str) -> StoredRun:
        state, version, owner, expires, conversation_id = db.execute(
            "SELECT state, version, owner, lease_expires_at, conversation_id FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        return StoredRun(
            state=decode_state(state),
            version=version,
            owner=owner,
            lease_expires_at=expires,
            conversation_id=conversation_id,
        )

    def _write_state(self, db: sqlite3.Connection, state: RunState, now: float) -> None:
        """Store ``state`` (bump the version); a final state goes into the log."""
        db.execute(
            "UPDATE runs SET state = ?, status = ?, version = version + 1, updated_at = ?"
            " WHERE run_id = ?",
            (encode_state(state), state.status, now, state.run_id),
        )
        if state.status == "paused":
            db.execute(
                "UPDATE runs SET owner = NULL, lease_expires_at = NULL WHERE run_id = ?",
                (state.run_id,),
            )
        elif state.status in FINAL_STATUSES:
            (conversation_id,) = db.execute(
                "SELECT conversation_id FROM runs WHERE run_id = ?", (state.run_id,)
            ).fetchone()
            db.execute(
                "DELETE FROM log WHERE conversation_id = ? AND position >= ?",
                (conversation_id, state.history_start),
            )
            db.executemany(
                "INSERT INTO log (conversation_id, position, message) VALUES (?, ?, ?)",
                [
                    (conversation_id, state.history_start + n, text)
                    for n, text in enumerate(encode_messages(state.messages))
                ],
            )
            db.execute(
                "UPDATE conversations SET current_run = NULL WHERE conversation_id = ?",
                (conversation_id,),
            )
            db.execute(
                "UPDATE runs SET owner = NULL, lease_expires_at = NULL, ended_at = ?"
                " WHERE run_id = ?",
                (now, state.run_id),
            )
            db.execute("DELETE FROM signals WHERE run_id = ?", (state.run_id,))

    def _lease_ran_out(self, db: sqlite3.Connection, conversation_id: str) -> bool:
        """Whether the conversation's running run is past its lease (database time)."""
        row = db.execute(
            "SELECT r.lease_expires_at <= " + _NOW + " FROM conversations AS c"  # noqa: S608
            " JOIN runs AS r ON r.run_id = c.current_run"
            " WHERE c.conversation_id = ? AND r.status = 'running'",
            (conversation_id,),
        ).fetchone()
        return row is not None and bool(row[0])

    def _expire(self, db: sqlite3.Connection, conversation_id: str) -> None:
        """Fail the conversation's running run if its owner's lease ran out."""
        if self._lease_ran_out(db, conversation_id):
            current = self._current(db, conversation_id)
            (state,) = db.execute("SELECT state FROM runs WHERE run_id = ?", (current,)).fetchone()
            self._write_state(db, abandoned(decode_state(state)), time.time())

    # -- transactions --

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction on the writer connection; sqlite3 errors ->
        StoreUnavailableError (rolled back: nothing changed)."""
        return self._connections.transaction(write=True)

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """One deferred (read) transaction: a WAL snapshot that never waits for a writer."""
        return self._connections.transaction(write=False)


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """A file written by an earlier version gains the columns added since (in the open's
    write transaction, so two processes opening it at once add each once)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    if "injects" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN injects INTEGER NOT NULL DEFAULT 0")


_STORES: weakref.WeakSet[SQLiteRunStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_STORES):  # no waiter of the parent's threads is the child's
        store._appended = Event()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
