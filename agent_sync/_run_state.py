"""The run as data: :class:`RunState` (what a store persists), :class:`RunSnapshot` (what a
monitor reads) and :class:`Step` (what ``agent.steps()`` yields), and the JSON codec of
their contents (:func:`json_ready`, :func:`from_json_ready`).

It sits below the run (``agent_sync.run``), the stores (``agent_sync.stores``) and the web
layer, which all use it, so that the run may import the stores and the stores never import
the run. The public names are exported by ``agent_sync`` and ``agent_sync.run``.

A :class:`RunState` holds only what a run *is*, never what a process has: the messages this
run added to the conversation, the tool calls it still owes results for, the input queued
for it, its counters and its status. No thread, lock, socket or clock reading is in it, so
``RunState.from_dict(state.to_dict())`` in another process describes the same run.

``to_dict()`` is JSON-ready: ``bytes`` (image sources, redacted reasoning) become
``{"$bytes": "<base64>"}`` and come back as ``bytes``. The format tag is
``"agent_sync.run/1"``; :meth:`RunState.from_dict` refuses any other with a clear error.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ._decisions import ApprovalRequest, Approve, Deny, decision_from_dict, decision_to_dict
from ._guardrails._checks import GuardrailTrip
from .errors import UsageError
from .messages import ContentBlock, Message, ToolResult, ToolUse, Usage

__all__ = [
    "FORMAT",
    "OwnerLostPolicy",
    "RunPhase",
    "RunSnapshot",
    "RunState",
    "RunStatus",
    "Step",
    "StepName",
    "from_json_ready",
    "json_ready",
]

FORMAT = "agent_sync.run/1"
"""The ``format`` tag of :meth:`RunState.to_dict`."""

RunStatus: TypeAlias = Literal["running", "paused", "done", "cancelled", "failed"]
RunPhase: TypeAlias = Literal["model", "retry_wait", "tools", "idle"]
StepName: TypeAlias = Literal["model", "tools", "approval", "finish", "max_cycles", "output"]
OwnerLostPolicy: TypeAlias = Literal["fail", "resume"]
"""What happens to a running run whose owner died (``Agent(on_owner_lost=...)``)."""
"""Where a run goes next: a model call, the pending tool calls, a pause for approval, the
end of a turn (answer queued input or stop), the cycle limit, or reading a structured
answer (``output_type``)."""

_STATUSES = frozenset({"running", "paused", "done", "cancelled", "failed"})
_STEPS = frozenset({"model", "tools", "approval", "finish", "max_cycles", "output"})


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSnapshot:
    """A moment of a run, safe to take from any thread while the run moves.

    Cheap: nothing in it is copied from the history (``agent.messages`` has that).
    """

    run_id: str
    """The run."""
    status: RunStatus
    """``running``, ``paused``, ``done``, ``cancelled`` or ``failed``."""
    phase: RunPhase
    """``model`` (a model call is streaming), ``retry_wait`` (backing off before a retry),
    ``tools`` (tools are running) or ``idle`` (between steps, or over)."""
    cycle: int
    """Model calls made so far."""
    pending_tool_ids: tuple[str, ...]
    """``toolUseId`` of each call of the current tool round that has no result yet."""
    queued_inputs: tuple[tuple[ContentBlock, ...], ...]
    """Input injected and not yet sent, oldest first."""
    usage: Usage
    """Tokens so far."""
    elapsed_s: float
    """Seconds since the run started (its whole length once it is over)."""
    conversation_id: str | None = None
    """The conversation the run belongs to, when its agent has one."""
    stop_reason: str | None = None
    """Set once the run is over (``"end_turn"``, ``"cancelled"``, ...)."""
    cancel_reason: str | None = None
    """Why it was cancelled, if it was."""
    guardrail: GuardrailTrip | None = None
    """With ``stop_reason == "guardrail"``: the trip that stopped the run."""
    parent_run_id: str | None = None
    """For a sub-agent's run (a tool made with ``agent.as_tool()``): the run that called
    it; ``None`` for a top-level run."""
    usage_limit: str | None = None
    """With ``stop_reason == "usage_limit"``: the limit that stopped the run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One iteration of ``agent.steps()``: a model call and the tools it asked for."""

    cycle: int
    """The model call's number in the run, from 1."""
    message: Message
    """The assistant message of the call."""
    tool_results: tuple[ToolResult, ...]
    """The results of the tools it asked for (empty if it asked for none)."""
    injected: tuple[ContentBlock, ...] = ()
    """Input injected into the run that went out with these results."""


@dataclass(frozen=True, kw_only=True)
class RunState:
    """A run as data: JSON-serialisable through :meth:`to_dict`, exact on the way back.

    The messages and blocks are the run's own (not copies): read them, do not change them.
    ``to_dict()`` returns an independent, JSON-ready copy.
    """

    run_id: str
    """The run."""
    status: RunStatus
    """``running``, ``paused``, ``done``, ``cancelled`` or ``failed``."""
    next_step: StepName | None
    """Where the run goes on from (``None`` once it is over)."""
    cycle: int
    """Model calls made."""
    messages: tuple[Message, ...]
    """The messages this run added to the conversation, in order. The first may be a user
    message the run extended (the prompt added to a history that ended with a user
    message)."""
    history_start: int
    """Index in the conversation of :attr:`messages`' first message."""
    pending_tool_uses: tuple[ToolUse, ...] = ()
    """Tool calls of the last assistant message that have no result yet."""
    queued_inputs: tuple[tuple[ContentBlock, ...], ...] = ()
    """Input injected and not yet sent, oldest first."""
    usage: Usage = field(default_factory=lambda: _zero_usage())
    """Tokens summed over the run's model calls."""
    stop_reason: str | None = None
    """Set once the run is over (``"end_turn"``, ``"cancelled"``, ...)."""
    cancel_reason: str | None = None
    """Why it was cancelled, if it was."""
    conversation_id: str | None = None
    """The conversation this run belongs to, when the agent has one."""
    approvals: tuple[ApprovalRequest, ...] = ()
    """While paused: the tool calls waiting for a decision."""
    invalid_tool_inputs: Mapping[str, str] = field(default_factory=dict)
    """``toolUseId`` -> why the model's input for that pending call could not be parsed
    (the history holds ``{}`` for it); the call is answered with that problem."""
    output: Any = None
    """With an ``output_type``: the validated answer as JSON (the type is not stored;
    ``None`` until there is one)."""
    parent_run_id: str | None = None
    """For a sub-agent's run (a tool made with ``agent.as_tool()``): the run that called
    it; ``None`` for a top-level run."""
    round_results: tuple[ToolResult, ...] = ()
    """While paused on a sub-agent's approvals: the results of the round's calls that
    finished (they are not run again on resume)."""
    subruns: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """While paused on a sub-agent's approvals: ``toolUseId`` -> ``{"run_id",
    "conversation_id", "requests"}`` of each paused child run (its conversation in the
    store, ``None`` without one; the ids of the requests it waits for)."""
    on_owner_lost: OwnerLostPolicy = "fail"
    """What a store does when the run's owner dies (its lease expires while it runs):
    ``"fail"`` it on the next read, or leave it for a recoverer to ``"resume"`` from this
    state (``Agent(on_owner_lost=...)``)."""
    guardrail: GuardrailTrip | None = None
    """With ``stop_reason == "guardrail"``: the trip that stopped the run."""
    decisions: Mapping[str, Approve | Deny] = field(default_factory=dict)
    """While a resumed round runs: ``toolUseId`` -> the reviewer's decision for each of its
    pending calls that has no result yet. Kept from the resume until the commit that
    records the call's result, so a run recovered after its worker died reuses the
    decision for the same call instead of asking again."""
    tool_calls: int = 0
    """Tool calls started so far (what ``UsageLimits(tool_calls=)`` counts)."""
    cost_usd: float = 0.0
    """Dollars of the model calls so far (counted with ``UsageLimits(cost_usd=)`` only)."""
    usage_limit: str | None = None
    """The usage limit the run passed, once one is (with ``stop_reason ==
    "usage_limit"``, the one that stopped it). With :attr:`usage`, :attr:`cycle` (the
    requests), :attr:`tool_calls` and :attr:`cost_usd`, what a run resumed from this state
    (after a pause, or by a recoverer) goes on counting from: limits count per run."""
    input_checked: bool = False
    """The run has input checks (input guardrails): its :attr:`queued_inputs` are unchecked
    until those pass them. A run resumed from this state checks them, as any inject; a
    cancel while nobody runs it (paused, or lost) never writes them to the history: the
    cancelled state keeps them, unsent, in :attr:`queued_inputs`, and the store's done
    record hands them back (``unchecked_input``). ``False`` in a state of an earlier
    version: its queued input is written on cancel, as without checks."""

    def queued_on_cancel(self) -> tuple[list[ContentBlock], tuple[tuple[ContentBlock, ...], ...]]:
        """What a cancel of this run while nobody runs it (paused, or lost) does with its
        queued input: ``(written, kept)``. Without input checks it is all written to the
        history before the closing message (DESIGN 5: nothing lost); with them
        (:attr:`input_checked`) none is: nothing checked it, so it is kept, unsent."""
        if self.input_checked:
            return [], self.queued_inputs
        return [block for blocks in self.queued_inputs for block in blocks], ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready ``dict`` (``"format": "agent_sync.run/1"``), independent of the run."""
        return {
            "format": FORMAT,
            "run_id": self.run_id,
            "status": self.status,
            "next_step": self.next_step,
            "cycle": self.cycle,
            "history_start": self.history_start,
            "messages": json_ready(list(self.messages)),
            "pending_tool_uses": json_ready(list(self.pending_tool_uses)),
            "queued_inputs": json_ready([list(blocks) for blocks in self.queued_inputs]),
            "usage": dict(self.usage),
            "stop_reason": self.stop_reason,
            "cancel_reason": self.cancel_reason,
            "conversation_id": self.conversation_id,
            "approvals": [json_ready(request.to_dict()) for request in self.approvals],
            "invalid_tool_inputs": dict(self.invalid_tool_inputs),
            "output": copy.deepcopy(self.output),
            "parent_run_id": self.parent_run_id,
            "round_results": json_ready(list(self.round_results)),
            "subruns": json_ready(dict(self.subruns)),
            "on_owner_lost": self.on_owner_lost,
            "guardrail": self.guardrail.to_dict() if self.guardrail is not None else None,
            "decisions": {
                tool_use_id: json_ready(decision_to_dict(decision))
                for tool_use_id, decision in self.decisions.items()
            },
            "tool_calls": self.tool_calls,
            "cost_usd": self.cost_usd,
            "usage_limit": self.usage_limit,
            "input_checked": self.input_checked,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunState:
        """The state :meth:`to_dict` described.

        Raises:
            UsageError: ``data`` has another ``format`` (say which one this version reads)
                or a field of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise UsageError(f"a RunState dict is a mapping, got {type(data).__name__}")
        found = data.get("format")
        if found != FORMAT:
            raise UsageError(
                f"unknown RunState format {found!r}: this version of agent_sync reads {FORMAT!r}"
            )
        status = data.get("status")
        if status not in _STATUSES:
            raise UsageError(f"RunState status must be one of {sorted(_STATUSES)}, got {status!r}")
        next_step = data.get("next_step")
        on_owner_lost = data.get("on_owner_lost", "fail")  # absent: a state of an earlier version
        if on_owner_lost not in ("fail", "resume"):
            raise UsageError(
                f"RunState on_owner_lost must be 'fail' or 'resume', got {on_owner_lost!r}"
            )
        if next_step is not None and next_step not in _STEPS:
            raise UsageError(f"RunState next_step must be one of {sorted(_STEPS)} or None")
        try:
            return cls(
                run_id=_typed(data, "run_id", str),
                status=status,
                next_step=next_step,
                cycle=_typed(data, "cycle", int),
                history_start=_typed(data, "history_start", int),
                messages=tuple(from_json_ready(_typed(data, "messages", list))),
                pending_tool_uses=tuple(from_json_ready(_typed(data, "pending_tool_uses", list))),
                queued_inputs=tuple(
                    tuple(blocks) for blocks in from_json_ready(_typed(data, "queued_inputs", list))
                ),
                usage=dict(_typed(data, "usage", dict)),  # type: ignore[arg-type]
                stop_reason=_optional(data, "stop_reason"),
                cancel_reason=_optional(data, "cancel_reason"),
                conversation_id=_optional(data, "conversation_id"),
                approvals=tuple(
                    ApprovalRequest.from_dict(from_json_ready(item))
                    for item in _typed(data, "approvals", list)
                ),
                invalid_tool_inputs=dict(_typed(data, "invalid_tool_inputs", dict)),
                output=copy.deepcopy(data.get("output")),
                parent_run_id=_optional(data, "parent_run_id"),
                round_results=tuple(from_json_ready(data.get("round_results") or [])),
                subruns=dict(from_json_ready(data.get("subruns") or {})),
                on_owner_lost=on_owner_lost,
                guardrail=_guardrail(data),
                decisions=_decisions(data),
                # absent: a state of an earlier version (its counts were not kept)
                tool_calls=_typed({"tool_calls": data.get("tool_calls", 0)}, "tool_calls", int),
                cost_usd=_cost(data),
                usage_limit=_optional(data, "usage_limit"),
                # absent: a state of an earlier version (its queued input is written on cancel)
                input_checked=_typed(
                    {"input_checked": data.get("input_checked", False)}, "input_checked", bool
                ),
            )
        except KeyError as exc:
            raise UsageError(f"a RunState dict needs the field {exc.args[0]!r}") from None


def _guardrail(data: Mapping[str, Any]) -> GuardrailTrip | None:
    """A state's trip (absent: a state of an earlier version, or no trip)."""
    trip = data.get("guardrail")
    if trip is None:
        return None
    if not isinstance(trip, Mapping):
        raise UsageError("RunState guardrail must be a dict or None")
    return GuardrailTrip.from_dict(trip)


def _decisions(data: Mapping[str, Any]) -> dict[str, Approve | Deny]:
    """The ``decisions`` field (absent: a state of an earlier version)."""
    raw = data.get("decisions") or {}
    if not isinstance(raw, dict) or not all(isinstance(d, dict) for d in raw.values()):
        raise UsageError("RunState field 'decisions' must map toolUseId -> decision dict")
    return {key: decision_from_dict(from_json_ready(value)) for key, value in raw.items()}


def _cost(data: Mapping[str, Any]) -> float:
    """The ``cost_usd`` field (absent: a state of an earlier version)."""
    value = data.get("cost_usd", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise UsageError(f"RunState field 'cost_usd' must be a number >= 0, got {value!r:.80}")
    return float(value)


def _zero_usage() -> Usage:
    return {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}


def _typed(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"RunState field {key!r} must be {kind.__name__}, got {value!r:.80}")
    return value


def _optional(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"RunState field {key!r} must be a str or None")
    return value


_BYTES_KEY = "$bytes"


def json_ready(value: Any) -> Any:
    """A JSON-ready deep copy of messages, blocks or a state's parts: ``bytes`` (image
    sources, redacted reasoning) become ``{"$bytes": "<base64>"}``, tuples become lists."""
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return {_BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    return value


def from_json_ready(value: Any) -> Any:
    """What :func:`json_ready` was given (``{"$bytes": ...}`` back to ``bytes``), as a deep
    copy."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(_BYTES_KEY), str):
            return base64.b64decode(value[_BYTES_KEY])
        return {key: from_json_ready(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json_ready(item) for item in value]
    return value
