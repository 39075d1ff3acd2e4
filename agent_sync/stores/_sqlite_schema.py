"""The SQLite store's database: its schema, its clock, and opening a file.

* :data:`SCHEMA`: the tables of runs, conversations and their logs, signals, and event
  logs. A file written by an earlier version gains what was added since when a store opens
  it (:func:`open_database`, in one write transaction, so two processes opening it at once
  add each once), then the :data:`INDEXES` on those columns (``runs_lost``: the running
  runs left for a recoverer, by lease expiry, which ``lost_runs`` reads without a scan).
* :data:`VALUES`: the conversations' values (``get_value``/``set_value``), created by
  :func:`open_database` when missing; a file that kept summaries in the table
  ``context_summaries`` of the previous version has them copied in then, under
  :data:`~._value_rules.SUMMARY_KEY`, so no summary is lost (that table is left as it
  is for a process of the previous version still running on the file, and read no more).
* :data:`NOW`: the database's time in epoch seconds, the one clock of leases (set and
  checked inside the transaction that uses them), never a process's ``time.time``.
* The connections, their lock discipline and fork safety are :mod:`._sqlite_pool`'s.
"""

from __future__ import annotations

import sqlite3

from ..errors import StoreUnavailableError
from ._sqlite_pool import Connections, create_private
from ._value_rules import SUMMARY_KEY

__all__ = ["INDEXES", "NOW", "SCHEMA", "VALUES", "open_database"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    version INTEGER NOT NULL,
    owner TEXT,
    lease_s REAL NOT NULL,
    lease_expires_at REAL, -- database time (NOW), never a process's clock
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ended_at REAL,
    injects INTEGER NOT NULL DEFAULT 0, -- injects counted for its current owner
    resumable INTEGER NOT NULL DEFAULT 0, -- 1: its state's on_owner_lost is "resume"
    signals_taken INTEGER NOT NULL DEFAULT 0 -- the last signal id its current owner took
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

INDEXES = """
CREATE INDEX IF NOT EXISTS runs_lost ON runs (lease_expires_at, run_id)
    WHERE resumable = 1 AND status = 'running';
"""
"""The indexes on columns added since the first version (created once they exist)."""

VALUES = """
CREATE TABLE conversation_values (
    conversation_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (conversation_id, key)
) WITHOUT ROWID
"""
"""The conversations' values (added after the first version: see :func:`_add_values`)."""

NOW = "((julianday('now') - 2440587.5) * 86400.0)"
"""The database's time in epoch seconds: the one clock of leases (set and checked)."""


def open_database(path: str, busy_timeout_s: float) -> Connections:
    """This process's connections to the store file at ``path``: the file created (mode
    0600) if missing, its tables created or brought up to date.

    Raises:
        StoreUnavailableError: The file cannot be created, opened or written.
    """
    connections = Connections(path, busy_timeout_s)
    create_private(path)
    with connections.writer() as db:
        try:
            db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc
    with connections.transaction(write=True) as db:
        _add_missing_columns(db)
        _add_values(db)
    connections.opened()
    return connections


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """A file written by an earlier version gains the columns added since (in the open's
    write transaction, so two processes opening it at once add each once)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    if "injects" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN injects INTEGER NOT NULL DEFAULT 0")
    if "resumable" not in columns:  # runs begun before: on_owner_lost "fail" (the default)
        db.execute("ALTER TABLE runs ADD COLUMN resumable INTEGER NOT NULL DEFAULT 0")
    if "signals_taken" not in columns:  # signals were deleted when taken: none kept
        db.execute("ALTER TABLE runs ADD COLUMN signals_taken INTEGER NOT NULL DEFAULT 0")
    for statement in INDEXES.split(";"):
        if statement.strip():
            db.execute(statement)


def _add_values(db: sqlite3.Connection) -> None:
    """Create the values table if the file has none, with the summaries the previous
    version kept in its own table (in the open's write transaction: once per file)."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "conversation_values" in tables:
        return
    db.execute(VALUES)
    if "context_summaries" in tables:  # the previous version's summaries, one per conversation
        db.execute(
            "INSERT INTO conversation_values (conversation_id, key, value)"
            " SELECT conversation_id, ?, summary FROM context_summaries",
            (SUMMARY_KEY,),
        )
