"""What an invocation returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._guardrails._set import STOPPED_TEXT
from .messages import CANCELLED_TEXT, ContentBlock, Message, Usage

if TYPE_CHECKING:
    from ._decisions import ApprovalRequest
    from ._guardrails._checks import GuardrailTrip

__all__ = ["TEXT_OUTPUT", "AgentMetrics", "AgentResult"]


class _TextOutput:
    def __repr__(self) -> str:
        return "TEXT_OUTPUT"


TEXT_OUTPUT: Any = _TextOutput()
_STOPPED: ContentBlock = {"text": STOPPED_TEXT}
"""The default of :attr:`AgentResult.output`: the result's text (a run without an
``output_type``)."""


@dataclass(frozen=True, kw_only=True)
class AgentMetrics:
    """Counts and timings of one invocation."""

    cycles: int
    """Model calls made (retries of one call count once)."""
    tool_calls: int
    """Tool calls the model asked for."""
    retries: int
    """Model calls retried after a retryable error."""
    duration_s: float
    """Wall time of the whole invocation, in seconds."""
    model_duration_s: float
    """Time spent in model calls (back-off included)."""
    tool_duration_s: float
    """Time spent running tools."""
    time_to_first_token_s: float | None
    """From the start to the first streamed text or reasoning, if any arrived."""
    model_ids: tuple[str, ...] = ()
    """Per model call that was answered (its content began, or it ended with an empty
    answer), in order: the id of the model that answered (a model's ``model_id``; with a
    :class:`~agent_sync.models.FallbackModel`, the id of the model of the chain that
    answered). A call that failed or was cancelled before its answer began adds none."""


@dataclass(frozen=True, kw_only=True)
class AgentResult:
    """The outcome of ``Agent.invoke()`` (and of the ``Done`` stream event)."""

    run_id: str = ""
    """The run's id (the same as ``event.run_id`` of its events)."""
    stop_reason: str
    """``"end_turn"``, ``"max_tokens"``, ``"stop_sequence"``, ``"max_cycles"``,
    ``"usage_limit"`` (see :attr:`usage_limit`), ``"guardrail"`` (see :attr:`guardrail`),
    ``"cancelled"`` or ``"paused"`` (a tool
    call waits for approval); providers may report others, e.g. ``"content_filtered"``."""
    cancel_reason: str | None
    """``None`` unless cancelled: the reason given to ``cancel()``, ``"timeout"``, or
    ``"stream closed"`` when a stream was abandoned."""
    message: Message
    """The last message of the history (the assistant's answer)."""
    usage: Usage
    """Token counts summed over every model call of the invocation."""
    metrics: AgentMetrics
    """Counts and timings."""
    approvals: tuple[ApprovalRequest, ...] = ()
    """With ``stop_reason == "paused"``: the tool calls waiting for ``agent.resume()``."""
    output: Any = TEXT_OUTPUT
    """With an ``output_type``: the validated answer (an instance of the type, or a dict
    for a JSON-schema dict; ``None`` if the run ended without one, e.g. cancelled).
    Without: :attr:`text`."""
    usage_limit: str | None = None
    """With ``stop_reason == "usage_limit"``: the limit of
    :class:`~agent_sync.UsageLimits` that stopped the run (``"requests"``,
    ``"input_tokens"``, ``"output_tokens"``, ``"total_tokens"``, ``"tool_calls"``,
    ``"cost_usd"``); ``None`` otherwise."""
    guardrail: GuardrailTrip | None = None
    """With ``stop_reason == "guardrail"``: the trip (``name``, ``stage``, ``reason``,
    ``run_id``) of the guardrail that stopped the run; ``None`` otherwise."""
    unchecked_input: tuple[ContentBlock, ...] = ()
    """Injected input the run accepted but never committed, because its input guardrails
    had not passed it when the run ended (a cancel, a stop at a trip or a usage limit, or
    the input reaching a stopped run through its store): not in the history, never sent
    to the model. Send it again (a prompt, an inject) to have it checked and answered.
    Always empty for a run without input guardrails (its history keeps such input)."""

    def __post_init__(self) -> None:
        if self.output is TEXT_OUTPUT:
            object.__setattr__(self, "output", self.text)

    @property
    def text(self) -> str:
        """The model's text: the text blocks of :attr:`message`, joined.

        A cancelled run's message ends with the marker "Cancelled by user" (for the
        history: the model reads it next turn); it is not the model's, so it is left out,
        as is the marker "Stopped by guardrail" of a run a guardrail stopped (its text is
        the released text).
        """
        blocks = self.message["content"]
        if self.stop_reason == "cancelled" and blocks and blocks[-1] == {"text": CANCELLED_TEXT}:
            blocks = blocks[:-1]
        elif self.stop_reason == "guardrail" and blocks and blocks[-1] == _STOPPED:
            blocks = blocks[:-1]
        return "".join(block["text"] for block in blocks if "text" in block)

    def __str__(self) -> str:
        return self.text
