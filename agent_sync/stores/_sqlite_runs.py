"""The rows of runs, conversations and signals of :class:`~agent_sync.stores.SQLiteRunStore`,
read and written inside a transaction the store holds (each function takes its connection).

* The log is a table of (conversation, position, message JSON): a final state
  (:func:`write_state`) deletes the positions from ``history_start`` on and inserts the
  run's messages, so its cost does not grow with the conversation.
* Leases use the database's clock (:data:`._sqlite_schema.NOW`): :func:`lease_ran_out`
  compares in SQL; :func:`expire` fails the run of an owner that died (the shared rule
  :func:`._rules.abandoned`) unless the run is left for a recoverer (``resumable``, the
  lost rule); :func:`lost_runs` lists those; :func:`past_lease`: a run past its lease.
"""

from __future__ import annotations

import sqlite3
import time

from .._run_state import RunState
from ._protocol import ConversationRecord, RunSignal, StoredRun
from ._rules import (
    FINAL_STATUSES,
    abandoned,
    acknowledged_injects,
    conversation_busy,
    conversation_paused,
    conversation_recovering,
    decode_messages,
    decode_state,
    encode_messages,
    encode_state,
    resumable,
)
from ._sqlite_schema import NOW

__all__ = [
    "UNTAKEN",
    "consume_signals",
    "conversation_record",
    "current_run",
    "expire",
    "refuse_unless_free",
    "take_signals",
    "lease_ran_out",
    "log_length",
    "past_lease",
    "LOST_RUNS",
    "lost_runs",
    "stored_run",
    "write_state",
]


def conversation_record(
    db: sqlite3.Connection, conversation_id: str, since: int
) -> ConversationRecord:
    """What ``load`` returns: the log from ``since`` on, the current run, the generation."""
    length = log_length(db, conversation_id)
    start = min(max(0, since), length)
    rows = db.execute(
        "SELECT message FROM log WHERE conversation_id = ? AND position >= ? ORDER BY position",
        (conversation_id, start),
    ).fetchall()
    current = current_run(db, conversation_id)
    stored = stored_run(db, current) if current is not None else None
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


def current_run(db: sqlite3.Connection, conversation_id: str) -> str | None:
    """The id of the conversation's running or paused run, if any."""
    row = db.execute(
        "SELECT current_run FROM conversations WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    return row[0] if row is not None else None


def log_length(db: sqlite3.Connection, conversation_id: str) -> int:
    """How many messages the conversation's log holds."""
    row = db.execute(  # the primary key's index: no scan of the conversation
        "SELECT MAX(position) FROM log WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    return 0 if row[0] is None else int(row[0]) + 1


def stored_run(db: sqlite3.Connection, run_id: str) -> StoredRun:
    """The run as the store holds it."""
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


def write_state(db: sqlite3.Connection, state: RunState, now: float) -> None:
    """Store ``state`` (bump the version); a final state goes into the log."""
    db.execute(
        "UPDATE runs SET state = ?, status = ?, version = version + 1, updated_at = ?,"
        " resumable = ? WHERE run_id = ?",
        (encode_state(state), state.status, now, resumable(state), state.run_id),
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
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL, ended_at = ? WHERE run_id = ?",
            (now, state.run_id),
        )
        db.execute("DELETE FROM signals WHERE run_id = ?", (state.run_id,))


def lease_ran_out(db: sqlite3.Connection, conversation_id: str) -> bool:
    """Whether the conversation's running run is past its lease (database time) and
    fails for it (``on_owner_lost="fail"``: a resumable one is lost, left running)."""
    row = db.execute(
        "SELECT r.lease_expires_at <= " + NOW + " FROM conversations AS c"  # noqa: S608
        " JOIN runs AS r ON r.run_id = c.current_run"
        " WHERE c.conversation_id = ? AND r.status = 'running' AND r.resumable = 0",
        (conversation_id,),
    ).fetchone()
    return row is not None and bool(row[0])


def past_lease(db: sqlite3.Connection, run_id: str) -> bool:
    """Whether the run is running past its lease (database time), whatever its policy."""
    row = db.execute(
        "SELECT lease_expires_at <= " + NOW + " FROM runs"  # noqa: S608 - a constant
        " WHERE run_id = ? AND status = 'running'",
        (run_id,),
    ).fetchone()
    return row is not None and bool(row[0])


LOST_RUNS = (
    "SELECT state, version, owner, lease_expires_at, conversation_id FROM runs"
    " WHERE resumable = 1 AND status = 'running' AND lease_expires_at <= "
    + NOW
    + " ORDER BY lease_expires_at, run_id LIMIT ?"
)
"""The lost runs, longest expired first (``LIMIT -1``: all), through the partial index
``runs_lost``: its cost is the running resumable runs', not the store's."""


def lost_runs(rows: list[tuple[str, int, str | None, float, str]]) -> list[StoredRun]:
    """The rows :data:`LOST_RUNS` read, as ``lost_runs`` returns them."""
    return [
        StoredRun(
            state=decode_state(state),
            version=version,
            owner=owner,
            lease_expires_at=expires,
            conversation_id=conversation_id,
        )
        for state, version, owner, expires, conversation_id in rows
    ]


def expire(db: sqlite3.Connection, conversation_id: str) -> None:
    """Fail the conversation's running run if its owner's lease ran out."""
    if lease_ran_out(db, conversation_id):
        current = current_run(db, conversation_id)
        (state,) = db.execute("SELECT state FROM runs WHERE run_id = ?", (current,)).fetchone()
        write_state(db, abandoned(decode_state(state)), time.time())


def refuse_unless_free(db: sqlite3.Connection, conversation_id: str) -> None:
    """Fail the conversation's run if its lease ran out; then refuse a conversation that
    still has a run (``begin``, ``replace_log``).

    Raises:
        PendingApprovalError: Its run is paused.
        ConcurrentInvocationError: Its run is running, or lost (waits for a recoverer).
    """
    expire(db, conversation_id)
    current = current_run(db, conversation_id)
    if current is not None:
        (status,) = db.execute("SELECT status FROM runs WHERE run_id = ?", (current,)).fetchone()
        if status == "paused":
            raise conversation_paused(conversation_id)
        if past_lease(db, current):  # left for a recoverer (a failing one was failed above)
            raise conversation_recovering(conversation_id, current)
        raise conversation_busy(conversation_id)


UNTAKEN = (
    "FROM runs AS r JOIN signals AS s ON s.run_id = r.run_id AND s.id > r.signals_taken"
    " WHERE r.run_id IN ({marks})"
)
"""The signals queued for some runs that their owners have not taken (``{marks}``: one
``?`` per run id), through the index of signals by run."""


def take_signals(db: sqlite3.Connection, run_ids: list[str]) -> list[RunSignal]:
    """Take the signals queued for these runs that their owners have not taken yet, in
    the order queued: marked taken, kept until the commit that consumes them."""
    marks = ",".join("?" * len(run_ids))
    rows = db.execute(
        "SELECT s.id, s.run_id, s.kind, s.reason, s.content "  # noqa: S608 - marks only
        + UNTAKEN.format(marks=marks)
        + " ORDER BY s.id",
        run_ids,
    ).fetchall()
    last: dict[str, int] = {}
    for signal_id, run_id, *_ in rows:
        last[run_id] = signal_id
    db.executemany(
        "UPDATE runs SET signals_taken = ? WHERE run_id = ?",
        [(signal_id, run_id) for run_id, signal_id in last.items()],
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


def consume_signals(
    db: sqlite3.Connection, run_id: str, status: str, accepted: int, received: int | None
) -> None:
    """Delete the signals an owner's commit consumes (the signal rule of
    :mod:`._protocol`): a running commit, the injects its state holds; a pause, every
    signal the owner took (a final commit deletes them all, in :func:`write_state`)."""
    if status == "paused":
        db.execute(
            "DELETE FROM signals WHERE run_id = ?"
            " AND id <= (SELECT signals_taken FROM runs WHERE run_id = ?)",
            (run_id, run_id),
        )
        return
    if status != "running" or received is None or accepted == 0:
        return  # (no inject accepted for this owner: none is queued, nothing to count)
    (queued,) = db.execute(
        "SELECT COUNT(*) FROM signals WHERE run_id = ? AND kind = 'inject'", (run_id,)
    ).fetchone()
    count = acknowledged_injects(accepted, queued, received)
    if count:
        db.execute(
            "DELETE FROM signals WHERE id IN (SELECT id FROM signals"
            " WHERE run_id = ? AND kind = 'inject' ORDER BY id LIMIT ?)",
            (run_id, count),
        )
