"""Events that ``Agent.stream()`` yields, in the order things happen.

Each event is a frozen dataclass with a stable ``type`` string (handy for SSE or JSON)::

    for event in agent.stream("Weather in Oslo?"):
        if event.type == "text":
            print(event.text, end="", flush=True)
        elif event.type == "done":
            print(event.result.stop_reason)

``done`` is always the last event of a stream that was not abandoned; it carries the same
:class:`~agent_sync.AgentResult` that ``invoke()`` returns. A model error surfaces as the
exception itself, raised from the iteration (the history is already valid by then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, Union

from .messages import ContentBlock, Message, ToolResult, ToolUse

if TYPE_CHECKING:
    from ._decisions import ApprovalRequest
    from .result import AgentResult

__all__ = [
    "AgentEvent",
    "ApprovalRequired",
    "Done",
    "GuardrailTripped",
    "InputInjected",
    "MessageComplete",
    "ModelRetry",
    "PartialOutput",
    "ReasoningDelta",
    "SubAgentEvent",
    "TextDelta",
    "ToolEnd",
    "ToolProgress",
    "ToolStart",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """A piece of the assistant's answer text, as the model streams it."""

    type: ClassVar[Literal["text"]] = "text"
    run_id: str = ""
    """The run this event belongs to."""
    text: str
    """The new text (not the text so far)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasoningDelta:
    """A piece of the model's visible reasoning ("thinking")."""

    type: ClassVar[Literal["reasoning"]] = "reasoning"
    run_id: str = ""
    """The run this event belongs to."""
    text: str
    """The new reasoning text."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartialOutput:
    """The structured answer so far, as it streams (a run with an ``output_type``).

    Emitted only when the value so far changed. ``partial`` is the best-effort JSON value
    of the answer: complete members, the string in progress, an open list as far as it
    goes (a dict for an object output type; for a wrapped type, the value inside). It is
    not validated: the validated answer is ``result.output`` at the end. Later events
    never change an earlier ``partial``; complete members are shared between events, so
    treat it as read-only.
    """

    type: ClassVar[Literal["partial_output"]] = "partial_output"
    run_id: str = ""
    """The run this event belongs to."""
    partial: Any
    """The answer so far (JSON: dicts, lists, str, numbers, bools, None)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageComplete:
    """An assistant or tool-result message was appended to the history."""

    type: ClassVar[Literal["message"]] = "message"
    run_id: str = ""
    """The run this event belongs to."""
    message: Message
    """The message as stored in ``agent.messages``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRetry:
    """A model call failed with a retryable error; the agent waits, then tries again."""

    type: ClassVar[Literal["retry"]] = "retry"
    run_id: str = ""
    """The run this event belongs to."""
    attempt: int
    """The attempt that failed (1 for the first call)."""
    delay: float
    """Seconds the agent waits before the next attempt (cut short by cancel)."""
    error: str
    """What went wrong, e.g. ``"ModelThrottledError: rate limited"``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolStart:
    """A tool is about to run."""

    type: ClassVar[Literal["tool_start"]] = "tool_start"
    run_id: str = ""
    """The run this event belongs to."""
    tool_use: ToolUse
    """The model's call: ``toolUseId``, ``name``, ``input``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolProgress:
    """A running tool reported progress: an MCP server's ``notifications/progress``, or
    ``context.report_progress(...)`` in any tool. Between its ``tool_start`` and ``tool_end``."""

    type: ClassVar[Literal["tool_progress"]] = "tool_progress"
    run_id: str = ""
    """The run this event belongs to."""
    tool_use_id: str
    """The call's ``toolUseId`` (as in its ``tool_start``)."""
    progress: float
    """How far it is (grows with each report; in units of ``total`` when given)."""
    total: float | None = None
    """The amount ``progress`` counts to, if known."""
    message: str | None = None
    """What it is doing, if it said."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolEnd:
    """A tool finished (or was cancelled or abandoned); its result is in the history."""

    type: ClassVar[Literal["tool_end"]] = "tool_end"
    run_id: str = ""
    """The run this event belongs to."""
    tool_use: ToolUse
    """The model's call."""
    result: ToolResult
    """What was recorded in the history for it."""
    duration_s: float
    """Wall time from start to result, in seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InputInjected:
    """Input injected with ``run.inject()`` went out in the next user message."""

    type: ClassVar[Literal["input_injected"]] = "input_injected"
    run_id: str = ""
    """The run this event belongs to."""
    content: tuple[ContentBlock, ...]
    """The blocks that were added to the history (all inputs queued at that point)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequired:
    """The run paused: these tool calls wait for ``agent.resume(decisions)``.

    Sent after the paused state is committed (``agent.is_paused`` is already true); the
    stream then ends with ``Done`` whose result has ``stop_reason == "paused"``.
    """

    type: ClassVar[Literal["approval_required"]] = "approval_required"
    run_id: str = ""
    """The run this event belongs to."""
    approvals: tuple[ApprovalRequest, ...]
    """The pending requests."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardrailTripped:
    """A guardrail tripped: the run stops (``Done`` follows, ``stop_reason ==
    "guardrail"``). Nothing of the tripped text is in it, nor in any event after it."""

    type: ClassVar[Literal["guardrail"]] = "guardrail"
    run_id: str = ""
    """The run this event belongs to."""
    name: str
    """The guardrail's name."""
    stage: Literal["input", "output", "tool_call", "tool_result"]
    """Where it tripped."""
    reason: str
    """Why (the check's ``Trip.reason``; never the tripped text)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Done:
    """The invocation ended; always the last event."""

    type: ClassVar[Literal["done"]] = "done"
    run_id: str = ""
    """The run this event belongs to."""
    result: AgentResult
    """The same result ``invoke()`` returns."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: stop_reason, cancel_reason, usage, text (and
        usage_limit, when a usage limit stopped the run; guardrail, when one tripped)."""
        result = self.result
        return end_summary(
            result.run_id,
            result.stop_reason,
            result.cancel_reason,
            result.usage,
            result.text,
            usage_limit=result.usage_limit,
            guardrail=result.guardrail.to_dict() if result.guardrail is not None else None,
        )


def end_summary(
    run_id: str,
    stop_reason: str,
    cancel_reason: str | None,
    usage: Mapping[str, Any],
    text: str,
    *,
    usage_limit: str | None = None,
    guardrail: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON summary of a run's end (:meth:`Done.to_dict`, and a store's ``done``
    record of a run it saw end): ``usage_limit`` and ``guardrail`` only when they stopped
    it."""
    summary: dict[str, Any] = {
        "run_id": run_id,
        "stop_reason": stop_reason,
        "cancel_reason": cancel_reason,
        "usage": dict(usage),
        "text": text,
    }
    if usage_limit is not None:
        summary["usage_limit"] = usage_limit
    if guardrail is not None:
        summary["guardrail"] = dict(guardrail)
    return summary


@dataclass(frozen=True, kw_only=True, slots=True)
class SubAgentEvent:
    """An event of a sub-agent's run (a tool made with ``agent.as_tool()``), as seen in the
    stream of the run that called it.

    The calling run's own events are never wrapped; a grandchild's event is wrapped once
    per level (a ``SubAgentEvent`` whose ``event`` is a ``SubAgentEvent``). The child's
    ``Done`` comes through too: its result is the child's.
    """

    type: ClassVar[Literal["subagent"]] = "subagent"
    run_id: str = ""
    """The child run's id (the run the wrapped event belongs to)."""
    parent_run_id: str
    """The run whose tool call started the child."""
    tool_use_id: str
    """The parent's tool call (``toolUseId``) the child answers."""
    event: AgentEvent
    """The child's event, unchanged."""


AgentEvent: TypeAlias = Union[
    TextDelta,
    ReasoningDelta,
    PartialOutput,
    MessageComplete,
    ModelRetry,
    ToolStart,
    ToolProgress,
    ToolEnd,
    InputInjected,
    ApprovalRequired,
    GuardrailTripped,
    SubAgentEvent,
    Done,
]
"""Any event ``Agent.stream()`` yields.

Each member's ``type`` is a ``Literal``, so a type checker narrows an ``AgentEvent`` on
``event.type == "text"`` as well as on ``isinstance`` and ``match``::

    for event in agent.stream("Weather in Oslo?"):
        match event:
            case TextDelta(text=text):
                print(text, end="")
            case Done(result=result):
                print(result.stop_reason)
"""
