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
  grow with the conversation (:mod:`._sqlite_runs`, the rows read and written inside a
  transaction).
* Signals are rows (autoincrement id = order); ``wait_signals`` takes those its owner has
  not taken (after the run's ``signals_taken`` id, which it moves on) in one transaction,
  polling every few milliseconds until its timeout; a commit deletes the ones it consumes
  (:func:`._sqlite_runs.consume_signals`). Polling is what SQLite offers across processes;
  a poll is one indexed read, and only a poll that finds rows takes the write lock.
* A run's event log (the :class:`~agent_sync.stores.RunEventLog` role) is
  :mod:`._sqlite_events`, the conversations' values :mod:`._sqlite_values`; the schema and
  the opening of a file are :mod:`._sqlite_schema`, the connections and fork safety
  :mod:`._sqlite_pool`.
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
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from .._prompt import content_blocks
from .._run_state import RunSnapshot, RunState
from ..cancel import CancelMode, check_mode
from ..messages import ContentBlock, Message
from ._protocol import ConversationRecord, RunSignal, StoredRun
from ._recoverable import Recoverable
from ._rules import (
    FINAL_STATUSES,
    bad_conversation_id,
    cancelled_while_lost,
    cancelled_while_paused,
    check_limit,
    check_reason,
    claimable,
    decode_state,
    encode_messages,
    encode_state,
    input_pending,
    log_moved_on,
    moved_on,
    not_running,
    resumable,
    run_exists,
    snapshot_of,
    stale_write,
    storable_id,
    subrun_ids,
)
from ._sqlite_events import SQLiteEventLog
from ._sqlite_runs import (
    LOST_RUNS,
    UNTAKEN,
    consume_signals,
    conversation_record,
    expire,
    lease_ran_out,
    log_length,
    lost_runs,
    past_lease,
    refuse_unless_free,
    take_signals,
    write_state,
)
from ._sqlite_schema import NOW, open_database
from ._sqlite_values import SQLiteValues

__all__ = ["SQLiteRunStore"]

_POLL_S = 0.005  # wait_signals: one indexed read per poll


class SQLiteRunStore(SQLiteEventLog, SQLiteValues, Recoverable):
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
        super().__init__(open_database(self.path, busy_timeout_s))  # and its event log

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
            expired = lease_ran_out(db, conversation_id)
            if not expired:
                return conversation_record(db, conversation_id, since)
        with self._write() as db:  # a lease ran out: fail that run first (a write)
            expire(db, conversation_id)
            return conversation_record(db, conversation_id, since)

    def replace_log(self, conversation_id: str, messages: Sequence[Message]) -> int:
        if not storable_id(conversation_id):
            raise bad_conversation_id(conversation_id)
        texts = encode_messages(messages)
        with self._write() as db:
            refuse_unless_free(db, conversation_id)
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
            refuse_unless_free(db, conversation_id)
            length = log_length(db, conversation_id)
            if length != expected_length:
                raise log_moved_on(conversation_id, length, expected_length)
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (state.run_id,)).fetchone():
                raise run_exists(state.run_id)
            db.execute(
                "INSERT INTO runs (run_id, conversation_id, state, status, version, owner,"
                " lease_s, lease_expires_at, started_at, updated_at, resumable)"
                f" VALUES (?, ?, ?, ?, 1, ?, ?, {NOW} + ?, ?, ?, ?)",  # noqa: S608 - constant
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
                    resumable(state),
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
            consume_signals(db, state.run_id, state.status, injects, injects_received)
            write_state(db, state, now)
            if state.status == "running":  # a commit is a sign of life
                db.execute(
                    f"UPDATE runs SET lease_expires_at = {NOW} + lease_s"  # noqa: S608
                    " WHERE run_id = ?",
                    (state.run_id,),
                )
            return version + 1

    def claim(self, run_id: str, *, owner: str, lease_s: float, version: int) -> int:
        now = time.time()
        with self._write() as db:
            row = db.execute(
                "SELECT state, version, status, resumable FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None or row[1] != version:
                raise stale_write(run_id, f"not at version {version}")
            claimable(run_id, row[2], resumable=bool(row[3]), expired=past_lease(db, run_id))
            running = replace(decode_state(row[0]), status="running")  # a lost one: as it was
            db.execute(
                "UPDATE runs SET state = ?, status = 'running', version = ?, owner = ?,"
                f" lease_s = ?, lease_expires_at = {NOW} + ?, updated_at = ?,"  # noqa: S608
                " resumable = ?, signals_taken = 0, injects = (SELECT COUNT(*) FROM signals"
                " WHERE run_id = runs.run_id AND kind = 'inject') WHERE run_id = ?",
                (
                    encode_state(running),
                    version + 1,
                    owner,
                    lease_s,
                    lease_s,
                    now,
                    resumable(running),
                    run_id,
                ),  # the new owner takes every signal still queued, and counts its injects
            )
            return version + 1

    def lost_runs(self, *, limit: int | None = None) -> list[StoredRun]:
        """The runs whose owner died and that wait for a recoverer (see ``RunStore``):
        one autocommit read through the partial index of running resumable runs."""
        limit = check_limit(limit)
        return lost_runs(self._connections.rows(LOST_RUNS, (-1 if limit is None else limit,)))

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        with self._write() as db:
            cursor = db.execute(
                f"UPDATE runs SET lease_s = ?, lease_expires_at = {NOW} + ?"  # noqa: S608
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
            expired = lease_ran_out(db, conversation_id)
        if expired:
            with self._write() as db:  # a lease ran out: fail that run first (a write)
                expire(db, conversation_id)
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
            expire(db, row[0])
            state = decode_state(
                db.execute("SELECT state FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
            )
            if state.status == "running" and past_lease(db, run_id):  # no owner to signal
                write_state(db, cancelled_while_lost(state, reason), time.time())
                return True
            if state.status == "running":
                db.execute(
                    "INSERT INTO signals (run_id, kind, reason, content) "
                    "VALUES (?, 'cancel', ?, ?)",
                    (run_id, reason, mode),  # a cancel's content column holds its mode
                )
                return True
            if state.status != "paused":
                return False
            write_state(db, cancelled_while_paused(state, reason), time.time())
        for child in subrun_ids(state):  # the paused children it waited on
            self.cancel(child, reason)
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
            self._drop_expired_event_logs(db, now)
            return len(old)

    # -- helpers --

    def _take_signals(self, run_ids: list[str]) -> list[RunSignal]:
        marks = ",".join("?" * len(run_ids))
        queued = self._connections.rows(  # a read first (WAL: no lock a writer waits for)
            "SELECT 1 " + UNTAKEN.format(marks=marks) + " LIMIT 1",
            run_ids,
        )
        if not queued:
            return []  # the usual poll: nothing queued, no write lock taken
        with self._write() as db:
            return take_signals(db, run_ids)

    # -- transactions --

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction on the writer connection; sqlite3 errors ->
        StoreUnavailableError (rolled back: nothing changed)."""
        return self._connections.transaction(write=True)

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """One deferred (read) transaction: a WAL snapshot that never waits for a writer."""
        return self._connections.transaction(write=False)
