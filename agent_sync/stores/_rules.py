"""The parts of the store rules that do not depend on the storage: written once, used by
every store (memory, SQLite, Redis) so that they cannot drift.

* :func:`abandoned`, :func:`cancelled_while_paused` and :func:`cancelled_while_lost`: the
  state a store writes when a run's owner died (lease expired, ``on_owner_lost="fail"``),
  or a paused or lost run is cancelled;
* :func:`resumable`: whether a run whose owner died is left for a recoverer (the lost rule);
  :func:`check_limit`: ``lost_runs``'s ``limit`` checked at the edge;
* :func:`encode_state` / :func:`decode_state` and :func:`encode_messages` /
  :func:`decode_messages`: the one JSON form of states and log messages (``bytes`` kept);
* :func:`snapshot_of`: what ``store.get`` returns;
* :func:`acknowledged_injects`: how many queued injects a running commit acknowledges
  (the signal rule of :mod:`._protocol`; the Redis store's ``write`` script mirrors it);
* :data:`FINAL_STATUSES`, :data:`WORKER_STOPPED_TEXT`;
* the errors every store raises for the same refusals (:func:`conversation_paused`,
  :func:`conversation_busy`, :func:`conversation_recovering`, :func:`log_moved_on`,
  :func:`run_exists`, :func:`stale_write`, :func:`claimable`,
  :func:`not_running`), worded once;
* the rules of event logs (:func:`encode_events`, :func:`decode_event`,
  :func:`events_moved_on`, :func:`events_complete`), from :mod:`._rules_events`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from .._encodable import clean_text, loads_stored
from .._history import add_user_blocks, answer_pending, close_cancelled_turn
from .._run_state import RunSnapshot, RunState, from_json_ready, json_ready
from ..errors import (
    ConcurrentInvocationError,
    PendingApprovalError,
    RunConflictError,
    UsageError,
)
from ..messages import CANCELLED_TEXT, ContentBlock, Message, ToolResult
from ._rules_events import decode_event, encode_events, events_complete, events_moved_on

__all__ = [
    "FINAL_STATUSES",
    "InputPending",
    "acknowledged_injects",
    "bad_conversation_id",
    "check_reason",
    "input_pending",
    "storable_id",
    "decode_event",
    "encode_events",
    "events_moved_on",
    "events_complete",
    "check_limit",
    "conversation_busy",
    "conversation_paused",
    "conversation_recovering",
    "log_moved_on",
    "moved_on",
    "claimable",
    "not_running",
    "run_exists",
    "stale_write",
    "WORKER_STOPPED_TEXT",
    "abandoned",
    "cancelled_while_lost",
    "cancelled_while_paused",
    "resumable",
    "subrun_ids",
    "decode_messages",
    "decode_state",
    "encode_messages",
    "encode_state",
    "snapshot_of",
]

FINAL_STATUSES = frozenset({"done", "cancelled", "failed"})
"""A run in one of these is over: its messages are in the log."""

WORKER_STOPPED_TEXT = "The worker stopped while running this call; effect unknown."
"""The error result of a tool call whose owner died (its lease expired) mid-run: it contains
"worker stopped" and "effect unknown", the words users may match on (the contract suite pins
them)."""


def abandoned(state: RunState) -> RunState:
    """The failed state of a run whose owner died: every pending call answered with
    :data:`WORKER_STOPPED_TEXT`, queued input kept, history valid (it ends with the user's
    message, as after a model error, so the conversation can go on)."""
    messages = [_copy(message) for message in state.messages]
    answer_pending(messages, WORKER_STOPPED_TEXT)
    add_user_blocks(messages, _queued(state))
    return replace(
        state,
        status="failed",
        next_step=None,
        messages=tuple(messages),
        pending_tool_uses=(),
        queued_inputs=(),
        approvals=(),
        invalid_tool_inputs={},
        stop_reason=None,
    )


def subrun_ids(state: RunState) -> list[str]:
    """The paused child runs a paused run waits on (a sub-agent's approvals): a store's
    ``cancel`` of the run cancels them too (cancel is a tree)."""
    return [str(info["run_id"]) for info in state.subruns.values() if info.get("run_id")]


def cancelled_while_paused(state: RunState, reason: str | None) -> RunState:
    """A paused run cancelled: pending calls answered "Cancelled by user", queued input
    written (or kept, unchecked: :meth:`RunState.queued_on_cancel`), a closing assistant
    message: the history a cancel leaves in a running turn."""
    return _cancelled(state, reason, CANCELLED_TEXT)


def resumable(state: RunState) -> bool:
    """Whether a run whose owner died (its lease expired while it ran) is *lost*, left
    running for a recoverer to claim (``on_owner_lost == "resume"``), rather than failed on
    the next read (:func:`abandoned`)."""
    return state.on_owner_lost == "resume"


def cancelled_while_lost(state: RunState, reason: str | None) -> RunState:
    """A lost run cancelled (its owner died, no recoverer took it yet): the calls of the
    round its owner committed results for keep them (they ran), the others are answered
    with :data:`WORKER_STOPPED_TEXT` (they may have run), queued input written, the turn
    closed: the history a cancel leaves, with nothing claimed about calls cut short."""
    return _cancelled(state, reason, WORKER_STOPPED_TEXT)


def _cancelled(state: RunState, reason: str | None, unanswered_text: str) -> RunState:
    """A run cancelled while nobody ran it (paused or lost): the calls of its round keep
    the results its owner committed, the others are answered ``unanswered_text``; queued
    input written (input its checks never passed kept, unsent, in ``queued_inputs``), the
    turn closed, nothing left pending."""
    messages = [_copy(message) for message in state.messages]
    known: list[ToolResult] = from_json_ready(json_ready(list(state.round_results)))
    written, kept = state.queued_on_cancel()
    close_cancelled_turn(messages, results=known, queued=written, unanswered_text=unanswered_text)
    return replace(
        state,
        status="cancelled",
        next_step=None,
        messages=tuple(messages),
        pending_tool_uses=(),
        queued_inputs=kept,  # unchecked input, never sent: handed back (closing_record)
        approvals=(),
        round_results=(),
        subruns={},
        invalid_tool_inputs={},
        stop_reason="cancelled",
        cancel_reason=reason,
    )


def check_limit(limit: object) -> int | None:
    """``lost_runs``'s ``limit``: ``None`` (all) or an ``int`` >= 1.

    Raises:
        UsageError: Anything else.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"limit must be None or an int >= 1, got {limit!r}")
    return limit


def snapshot_of(state: RunState, *, started_at: float, updated_at: float) -> RunSnapshot:
    """``store.get``: the run as of its last commit (phase ``idle``: a store does not know
    what the owner is doing between commits)."""
    pending = tuple(tool_use["toolUseId"] for tool_use in state.pending_tool_uses)
    return RunSnapshot(
        run_id=state.run_id,
        status=state.status,
        phase="idle",
        cycle=state.cycle,
        pending_tool_ids=pending if state.status in ("running", "paused") else (),
        queued_inputs=state.queued_inputs,
        usage=state.usage,
        elapsed_s=max(0.0, updated_at - started_at),
        conversation_id=state.conversation_id,
        stop_reason=state.stop_reason,
        cancel_reason=state.cancel_reason,
        guardrail=state.guardrail,
        parent_run_id=state.parent_run_id,
        usage_limit=state.usage_limit if state.stop_reason == "usage_limit" else None,
    )


def encode_state(state: RunState) -> str:
    """The one JSON text of a state (what every store writes)."""
    return json.dumps(state.to_dict(), separators=(",", ":"), allow_nan=False)


def decode_state(text: str | bytes) -> RunState:
    """The state :func:`encode_state` wrote.

    Raises:
        UsageError: The text is not a state this version reads.
    """
    try:
        data = loads_stored(text)  # a state stored before the encodable rule still loads
    except ValueError as exc:
        raise UsageError(f"a stored run state is not JSON ({exc})") from exc
    return RunState.from_dict(data)


def encode_messages(messages: Sequence[Message]) -> list[str]:
    """Each message as its JSON text (``bytes`` kept as base64).

    Raises:
        ValueError: A non-finite number (nothing invalid is stored silently: the edges
            refuse them, see :mod:`agent_sync._encodable`).
    """
    return [
        json.dumps(json_ready(message), separators=(",", ":"), allow_nan=False)
        for message in messages
    ]


def decode_messages(texts: Sequence[str | bytes]) -> list[Message]:
    """The messages :func:`encode_messages` wrote (made encodable: a lone surrogate or
    ``NaN`` stored by an earlier version must not make a conversation unreadable)."""
    return [from_json_ready(loads_stored(text)) for text in texts]


def _queued(state: RunState) -> list[ContentBlock]:
    return [block for blocks in state.queued_inputs for block in blocks]


def _copy(message: Message) -> Message:
    copied: Any = from_json_ready(json_ready(message))
    return copied  # type: ignore[no-any-return]


# -- ids --


def storable_id(value: object) -> bool:
    """Whether ``value`` can name a run or conversation in a store: a non-empty ``str``
    that UTF-8 can encode (a lone surrogate cannot). Any other id names nothing: ``get``
    answers ``None``, ``cancel`` ``False``, never an error."""
    if not isinstance(value, str) or not value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def bad_conversation_id(conversation_id: object) -> UsageError:
    """``begin`` with an id no store can hold."""
    return UsageError(
        "a conversation id is a non-empty str that UTF-8 can encode, "
        f"got {type(conversation_id).__name__}"
    )


# -- the refusals, worded once --


def acknowledged_injects(accepted: int, queued: int, received: int) -> int:
    """How many of a run's oldest queued injects a running commit acknowledges (removes).

    ``accepted``: the injects counted for the run's current owner (those queued when it
    claimed the run, and every one accepted since); ``queued``: those still queued;
    ``received``: how many the owner says its committed state holds (its count since it
    began or claimed the run). ``accepted - queued`` were acknowledged before, so the
    rest of ``received`` are acknowledged now, never more than are queued."""
    return max(0, min(queued, received - (accepted - queued)))


class InputPending(RunConflictError):
    """A final commit refused: input injected through the store (``store.inject``) was
    accepted for the run but has not reached its owner yet. Nothing changed; the owner
    takes that input and answers it, then commits again (an accepted inject is answered,
    never dropped)."""


def input_pending(run_id: str, accepted: int, received: int) -> InputPending:
    """A final commit whose owner received fewer injects than the store accepted."""
    return InputPending(
        f"run {run_id!r}: {accepted - received} injected input(s) accepted by the store "
        "have not reached the run yet; it answers them before it ends"
    )


def check_reason(reason: str | None) -> str | None:
    """A cancel's reason, made encodable at the edge (a store's ``cancel``): it is stored
    and shown in frames, and a lone surrogate would be refused by both."""
    return clean_text(reason) if isinstance(reason, str) else reason


def conversation_paused(conversation_id: str) -> PendingApprovalError:
    """``begin`` on a conversation whose run waits for approval."""
    return PendingApprovalError(f"conversation {conversation_id!r} has a run waiting for approval")


def conversation_busy(conversation_id: str) -> ConcurrentInvocationError:
    """``begin`` on a conversation that is running somewhere."""
    return ConcurrentInvocationError(
        f"conversation {conversation_id!r} is running in another worker"
    )


def conversation_recovering(conversation_id: str, run_id: str) -> ConcurrentInvocationError:
    """``begin`` (or ``replace_log``) on a conversation whose run lost its worker and waits
    for a recoverer (``on_owner_lost="resume"``)."""
    return ConcurrentInvocationError(
        f"conversation {conversation_id!r}: its run {run_id!r} lost its worker and waits "
        "for recovery (another worker resumes it)"
    )


def log_moved_on(conversation_id: str, length: int, expected: int) -> RunConflictError:
    """``begin`` at a log length that is no longer the log's."""
    return RunConflictError(
        f"conversation {conversation_id!r} has {length} messages, expected {expected}: "
        "it moved on since it was loaded"
    )


def run_exists(run_id: str) -> RunConflictError:
    """``begin`` with a run id the store has."""
    return RunConflictError(f"run {run_id!r} exists already")


def stale_write(run_id: str, why: str) -> RunConflictError:
    """A commit or claim that lost a compare-and-set: ``why`` says what was found."""
    return RunConflictError(f"run {run_id!r}: {why}")


def moved_on(found: int, expected: int) -> str:
    """Why a compare-and-set on the version failed (for :func:`stale_write`)."""
    return (
        f"at version {found}, run by another owner or moved on (this write expected "
        f"version {expected})"
    )


def claimable(
    run_id: str, status: str, *, resumable: bool, expired: bool
) -> Literal["paused", "lost"]:
    """What ``claim`` takes (its version already checked): a paused run, or a lost one
    (running, ``on_owner_lost="resume"``, its lease expired by the store's clock).

    Raises:
        RunConflictError: Neither, saying why: it is over, its owner's death fails it
            (``on_owner_lost="fail"``), or its lease is live (its owner renewed it).
    """
    if status == "paused":
        return "paused"
    if status != "running":
        raise RunConflictError(f"run {run_id!r} is {status}, not paused or lost")
    if not resumable:
        raise RunConflictError(
            f"run {run_id!r} is running with on_owner_lost='fail': it is failed when its "
            "owner dies, never taken over"
        )
    if not expired:
        raise RunConflictError(
            f"run {run_id!r} is running and its owner's lease is live: it is not lost"
        )
    return "lost"


def not_running(run_id: str) -> UsageError:
    """``inject`` into a run that is not running."""
    return UsageError(f"run {run_id!r} is not running: nothing can be injected")
