""":class:`MemoryRunStore`: the run store of one process (tests, single-process apps).

The reference implementation of :mod:`agent_sync.stores._protocol`: one lock guards every
structure, one condition wakes ``wait_signals`` (the event logs: :mod:`._memory_events`,
the conversations' values: :mod:`._memory_values`).
States and messages are kept as their JSON text (the shared codec of :mod:`._rules`), so a
caller's later changes to what it committed never reach the store, exactly as with the
stores that serialise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from .._prompt import content_blocks
from .._run_state import RunSnapshot, RunState, RunStatus
from ..cancel import CancelMode, check_mode
from ..messages import ContentBlock, Message
from ._memory_events import MemoryEventLog
from ._memory_values import MemoryValues
from ._protocol import ConversationRecord, RunSignal, StoredRun
from ._recoverable import Recoverable
from ._rules import (
    FINAL_STATUSES,
    abandoned,
    acknowledged_injects,
    bad_conversation_id,
    cancelled_while_lost,
    cancelled_while_paused,
    check_limit,
    check_reason,
    claimable,
    conversation_busy,
    conversation_paused,
    conversation_recovering,
    decode_messages,
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

__all__ = ["MemoryRunStore"]


@dataclass
class _Run:
    conversation_id: str
    state: str  # encode_state(...)
    version: int
    owner: str | None
    lease_expires_at: float | None
    lease_s: float
    started_at: float
    updated_at: float
    ended_at: float | None = None
    signals: list[RunSignal] = field(default_factory=list)  # queued, not yet acknowledged
    taken: int = 0  # how many of ``signals`` its current owner has taken
    injects: int = 0  # injects counted for its current owner (queued at its claim, or since)
    resumable: bool = False  # its state's on_owner_lost is "resume" (the lost rule)


@dataclass
class _Conversation:
    log: list[str] = field(default_factory=list)  # encode_messages(...)
    current: str | None = None  # run id of the running or paused run
    generation: int = 0  # bumped by replace_log


class MemoryRunStore(MemoryEventLog, MemoryValues, Recoverable):
    """A :class:`~agent_sync.stores.RunStore` in this process's memory. Thread-safe.

    Args:
        clock: Epoch seconds (``time.time``); tests pass their own to expire leases.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        super().__init__(clock or time.time)  # the lock, the clock and the event logs
        self._signalled = threading.Condition(self._lock)
        self._wake_pending = False  # _wake_watcher was called: wait_signals returns
        self._conversations: dict[str, _Conversation] = {}
        self._runs: dict[str, _Run] = {}
        self._resumable: set[str] = set()  # running runs left for a recoverer if lost
        self._values: dict[str, dict[str, str]] = {}  # MemoryValues'

    # -- conversations and runs --

    def load(self, conversation_id: str, *, since: int = 0) -> ConversationRecord:
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            if conversation is None:
                return ConversationRecord(
                    conversation_id=conversation_id, messages=(), run=None, length=0
                )
            self._expire(conversation_id)
            run_id = conversation.current
            stored = self._stored(run_id) if run_id is not None else None
            length = len(conversation.log)
            start = min(max(0, since), length)
            messages = tuple(decode_messages(conversation.log[start:]))
            generation = conversation.generation
        return ConversationRecord(
            conversation_id=conversation_id,
            messages=messages,
            run=stored,
            start=start,
            length=length,
            generation=generation,
        )

    def replace_log(self, conversation_id: str, messages: Sequence[Message]) -> int:
        texts = encode_messages(messages)  # before the lock: a message that cannot be encoded
        with self._lock:  # changes nothing
            self._refuse_unless_free(conversation_id)
            conversation = self._conversations.setdefault(conversation_id, _Conversation())
            conversation.log = texts
            conversation.generation += 1
            return conversation.generation

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
        now = self._now()
        with self._lock:
            self._refuse_unless_free(conversation_id)
            conversation = self._conversations.setdefault(conversation_id, _Conversation())
            if len(conversation.log) != expected_length:
                raise log_moved_on(conversation_id, len(conversation.log), expected_length)
            if state.run_id in self._runs:
                raise run_exists(state.run_id)
            self._runs[state.run_id] = _Run(
                conversation_id=conversation_id,
                state=encode_state(state),
                version=1,
                owner=owner,
                lease_expires_at=now + lease_s,
                lease_s=lease_s,
                started_at=now,
                updated_at=now,
                resumable=resumable(state),
            )
            self._index(state.run_id)
            conversation.current = state.run_id
            return 1

    def commit(
        self,
        state: RunState,
        *,
        owner: str,
        version: int,
        injects_received: int | None = None,
    ) -> int:
        now = self._now()
        with self._lock:
            run = self._runs.get(state.run_id)
            if run is None:
                raise stale_write(state.run_id, "unknown run")
            current = decode_state(run.state)
            if current.status in FINAL_STATUSES:
                raise stale_write(state.run_id, f"the run is over ({current.status})")
            if run.version != version or run.owner != owner:
                raise stale_write(state.run_id, moved_on(run.version, version))
            if (
                state.status != "running"  # the run's last look at its input: end or pause
                and injects_received is not None
                and run.injects > injects_received
            ):
                raise input_pending(state.run_id, run.injects, injects_received)
            self._consume(run, state.status, injects_received)
            self._write(run, state, now)
            if state.status == "running":
                run.lease_expires_at = now + run.lease_s  # a commit is a sign of life
            return run.version

    def claim(self, run_id: str, *, owner: str, lease_s: float, version: int) -> int:
        now = self._now()
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.version != version:
                raise stale_write(run_id, f"not at version {version}")
            state = decode_state(run.state)
            claimable(run_id, state.status, resumable=run.resumable, expired=self._past_lease(run))
            run.version += 1
            run.owner = owner
            run.taken = 0  # the new owner takes every signal still queued
            run.injects = sum(1 for signal in run.signals if signal.kind == "inject")
            run.lease_s = lease_s
            run.lease_expires_at = now + lease_s
            run.updated_at = now
            running = _with_status(state, "running")
            run.state = encode_state(running)
            run.resumable = resumable(running)
            self._index(run_id)
            return run.version

    def lost_runs(self, *, limit: int | None = None) -> list[StoredRun]:
        """The runs whose owner died and that wait for a recoverer (see ``RunStore``):
        a look at the running resumable runs only."""
        limit = check_limit(limit)
        with self._lock:
            now = self._now()
            expiries = {run_id: self._runs[run_id].lease_expires_at for run_id in self._resumable}
            lost = sorted(
                (expires, run_id)
                for run_id, expires in expiries.items()
                if expires is not None and expires <= now
            )
            return [self._stored(run_id) for _, run_id in lost[:limit]]

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        now = self._now()
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.owner != owner or run.ended_at is not None:
                return False
            if decode_state(run.state).status != "running":
                return False
            run.lease_s = lease_s
            run.lease_expires_at = now + lease_s
            return True

    def get(self, run_id: str) -> RunSnapshot | None:
        if not storable_id(run_id):
            return None
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            self._expire(run.conversation_id)
            return snapshot_of(
                decode_state(run.state), started_at=run.started_at, updated_at=run.updated_at
            )

    # -- signals --

    def cancel(self, run_id: str, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        mode, reason = check_mode(mode), check_reason(reason)
        if not storable_id(run_id):
            return False
        now = self._now()
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return False
            self._expire(run.conversation_id)
            state = decode_state(run.state)
            if state.status == "running" and self._past_lease(run):  # no owner to signal
                self._write(run, cancelled_while_lost(state, reason), now)
                return True
            if state.status == "running":
                signal = RunSignal(run_id=run_id, kind="cancel", reason=reason, mode=mode)
                run.signals.append(signal)
                self._signalled.notify_all()
                return True
            if state.status != "paused":
                return False
            self._write(run, cancelled_while_paused(state, reason), now)
        for child in subrun_ids(state):  # the paused children it waited on
            self.cancel(child, reason)
        return True

    def inject(self, run_id: str, content: Sequence[ContentBlock] | str) -> None:
        blocks = tuple(content_blocks(content, what="injected input"))  # checked at the edge
        if not storable_id(run_id):
            raise not_running(run_id)
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or decode_state(run.state).status != "running":
                raise not_running(run_id)
            run.injects += 1
            run.signals.append(RunSignal(run_id=run_id, kind="inject", content=blocks))
            self._signalled.notify_all()

    def wait_signals(self, run_ids: Collection[str], timeout: float) -> list[RunSignal]:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            while True:
                taken: list[RunSignal] = []
                for run_id in run_ids:
                    run = self._runs.get(run_id)
                    if run is not None and len(run.signals) > run.taken:
                        taken.extend(run.signals[run.taken :])  # kept until consumed
                        run.taken = len(run.signals)
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0 or self._wake_pending:
                    self._wake_pending = False
                    return taken
                self._signalled.wait(remaining)

    def _wake_watcher(self) -> None:
        """End the running (or next) ``wait_signals`` early (this process's store watcher:
        a run registered, whose signals and lease it must look at now)."""
        with self._lock:
            self._wake_pending = True  # also ends a wait that has not begun yet
            self._signalled.notify_all()

    def prune(self, *, older_than: float) -> int:
        now = self._now()
        cutoff = now - older_than
        with self._lock:
            old = [
                run_id
                for run_id, run in self._runs.items()
                if run.ended_at is not None and run.ended_at <= cutoff
            ]
            for run_id in old:
                del self._runs[run_id]
                self._resumable.discard(run_id)
                self._event_logs.pop(run_id, None)
            self._drop_expired_event_logs(now)
            return len(old)

    # -- inside the lock --

    def _stored(self, run_id: str) -> StoredRun:
        run = self._runs[run_id]
        return StoredRun(
            state=decode_state(run.state),
            version=run.version,
            owner=run.owner,
            lease_expires_at=run.lease_expires_at,
            conversation_id=run.conversation_id,
        )

    def _write(self, run: _Run, state: RunState, now: float) -> None:
        """Store ``state`` (bump the version); a final state goes into the log."""
        run.version += 1
        run.updated_at = now
        run.state = encode_state(state)
        run.resumable = resumable(state)
        if state.status == "paused":
            run.owner = None
            run.lease_expires_at = None
        elif state.status in FINAL_STATUSES:
            conversation = self._conversations[run.conversation_id]
            del conversation.log[state.history_start :]
            conversation.log.extend(encode_messages(state.messages))
            conversation.current = None
            run.owner = None
            run.lease_expires_at = None
            run.ended_at = now
            run.signals.clear()
            run.taken = 0
        self._index(state.run_id)

    def _consume(self, run: _Run, status: RunStatus, received: int | None) -> None:
        """Drop the signals the owner's commit consumes (the signal rule of
        :mod:`._protocol`): a running commit, the injects its state holds; a pause, every
        signal the owner took (a final commit drops them all, in :meth:`_write`)."""
        if status == "paused":
            del run.signals[: run.taken]
            run.taken = 0
            return
        if status != "running" or received is None:
            return
        queued = [n for n, signal in enumerate(run.signals) if signal.kind == "inject"]
        dropped = set(queued[: acknowledged_injects(run.injects, len(queued), received)])
        if dropped:
            run.taken -= sum(1 for n in dropped if n < run.taken)
            run.signals = [s for n, s in enumerate(run.signals) if n not in dropped]

    def _index(self, run_id: str) -> None:
        """Keep ``_resumable`` (what ``lost_runs`` looks at) in step with the run."""
        run = self._runs[run_id]
        if run.resumable and run.ended_at is None and run.lease_expires_at is not None:
            self._resumable.add(run_id)
        else:
            self._resumable.discard(run_id)

    def _past_lease(self, run: _Run) -> bool:
        """Whether the run is running past its lease (lost or, unless resumable, failing)."""
        return (
            run.ended_at is None
            and run.lease_expires_at is not None
            and run.lease_expires_at <= self._now()
        )

    def _refuse_unless_free(self, conversation_id: str) -> None:
        """Fail the conversation's run if its owner died (the fail rule); then refuse a
        conversation that still has a run (``begin``, ``replace_log``)."""
        self._expire(conversation_id)
        conversation = self._conversations.get(conversation_id)
        if conversation is None or conversation.current is None:
            return
        current = self._runs[conversation.current]
        status = decode_state(current.state).status
        if status == "paused":
            raise conversation_paused(conversation_id)
        if self._past_lease(current):
            raise conversation_recovering(conversation_id, conversation.current)
        raise conversation_busy(conversation_id)

    def _expire(self, conversation_id: str) -> None:
        """Fail the conversation's running run if its owner's lease ran out, unless it is
        left for a recoverer (``on_owner_lost="resume"``)."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None or conversation.current is None:
            return
        run = self._runs[conversation.current]
        if run.resumable or not self._past_lease(run):
            return
        state = decode_state(run.state)
        if state.status == "running":
            self._write(run, abandoned(state), self._now())


def _with_status(state: RunState, status: RunStatus) -> RunState:
    return replace(state, status=status)
