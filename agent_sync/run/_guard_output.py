"""The output stage of a run's guardrails (DESIGN 13): one model call's streamed text goes
through an :class:`~agent_sync._guardrails._release.OutputGate` per text block, and only
what the gates released reaches the events, the history and the hooks.

The model step holds an :class:`OutputGuard` only when the run has output guardrails (else
``None``: nothing is added per chunk but one ``if``). Per stream event it feeds the text
deltas to their block's gate and hands back the released text as the delta to show; at the
stream's end it settles every gate and writes the released text into the assembler's blocks,
so the message the history keeps is made of released text only. A toolUse block is only
ever released in the finished message, after the text before it; a trip drops the message's
toolUses (never run).

After a trip the guard holds the trip and the message the history keeps instead of the
model's: the released text, then "Stopped by guardrail".
"""

from __future__ import annotations

from collections.abc import Generator

from .._encodable import clean_text
from .._guardrails._checks import Guardrail, GuardrailTrip, GuardView
from .._guardrails._pattern import PatternGuard
from .._guardrails._release import GateStep, OutputGate
from .._guardrails._set import STOPPED_TEXT, GuardrailSet
from ..cancel import CancelledError, CancelToken
from ..events import AgentEvent, ReasoningDelta, TextDelta
from ..messages import ContentBlock, Message, StreamEvent
from ._assemble import MessageAssembler
from ._context import RunContext
from ._guard_tools import guardrail_tripped

__all__ = ["OutputGuard", "output_guard", "stop_at_output_trip"]


def output_guard(ctx: RunContext) -> OutputGuard | None:
    """The output guard of one model call, or ``None`` when the run has no output
    guardrails."""
    guards: GuardrailSet | None = ctx.settings.guardrails
    if guards is None or not guards.has("output"):
        return None
    return OutputGuard(ctx, guards.output_patterns(), guards.output_checks())


class OutputGuard:
    """One model call's output gates (one per text block), in the loop's thread."""

    __slots__ = ("_checks", "_ctx", "_gates", "_patterns", "_token", "_view_messages", "trip")

    def __init__(
        self,
        ctx: RunContext,
        patterns: tuple[PatternGuard, ...],
        checks: tuple[Guardrail, ...],
    ) -> None:
        self._ctx = ctx
        self._patterns = patterns
        self._checks = checks
        self._gates: dict[int, OutputGate] = {}
        self._view_messages = tuple(ctx.messages)  # the history before this call
        # the checks run in the loop's thread, one at a time: cancelled at the trip
        self._token = CancelToken()
        self.trip: GuardrailTrip | None = None
        """The trip, once a gate tripped: nothing more of this message is released."""

    def feed(
        self, event: StreamEvent, delta: TextDelta | ReasoningDelta | None
    ) -> TextDelta | ReasoningDelta | None:
        """Take one stream event and the delta the assembler made of it: the delta to
        show (for text, only the text the gates let out, if any)."""
        delta_event = event.get("contentBlockDelta")
        if delta_event is None:
            return delta
        text = delta_event["delta"].get("text")
        if text is None:
            return delta  # reasoning, tool input: not the answer's text
        if not text:
            return None
        step = self._gate(delta_event["contentBlockIndex"]).feed(clean_text(text))
        return self._released(step)

    def finish(self, assembler: MessageAssembler) -> list[TextDelta]:
        """The stream ended: settle each block's gate in order and put its released text in
        the assembler's block; the deltas still to show (none after a trip)."""
        deltas: list[TextDelta] = []
        for index in sorted(self._gates):
            delta = self._released(self._gates[index].finish())
            if self.trip is not None:
                return []
            if delta is not None:
                deltas.append(delta)
            assembler.set_text(index, self._gates[index].released_text)
        return deltas

    def stopped_message(self, closing_text: str = STOPPED_TEXT) -> Message:
        """The message the history keeps after a trip (or a cancel): the released text of
        each block, then ``closing_text`` (no toolUse: none of the message's calls runs)."""
        content: list[ContentBlock] = []
        for index in sorted(self._gates):
            text = self._gates[index].released_text
            if text.strip():  # providers reject blank text blocks
                content.append({"text": text})
        content.append({"text": closing_text})
        return {"role": "assistant", "content": content}

    def _gate(self, index: int) -> OutputGate:
        gate = self._gates.get(index)
        if gate is None:
            gate = self._gates[index] = OutputGate(
                self._patterns, self._checks, self._view if self._checks else None
            )
        return gate

    def _view(self, text: str, pending: str) -> GuardView:
        ctx = self._ctx
        return GuardView(
            stage="output",
            run_id=ctx.run_id,
            text=text,
            pending=pending,
            messages=self._view_messages,
            cancel_token=self._token,
        )

    def _released(self, step: GateStep) -> TextDelta | None:
        if step.tripped is not None:
            if self.trip is None:
                self.trip = GuardrailTrip(
                    name=step.tripped.name,
                    stage="output",
                    reason=step.reason or "tripped",
                    run_id=self._ctx.run_id,
                )
                self._token.cancel("guardrail tripped")
            return None
        if step.released and self._ctx.emit_deltas:
            return TextDelta(text=step.released, run_id=self._ctx.run_id)
        return None


def stop_at_output_trip(
    ctx: RunContext, guard: OutputGuard, assembler: MessageAssembler, cycle: int, duration: float
) -> Generator[AgentEvent, None, None]:
    """End the model call at the guard's trip: the call counted, the history given the
    released text and "Stopped by guardrail", the hooks told the call was stopped (nothing
    of its text), the trip announced, and the run stopped as a cancel is
    (:meth:`RunContext.stop_at_guardrail`)."""
    trip = guard.trip
    assert trip is not None
    ctx.count_call(assembler.usage, assembler.first_text_at)
    ctx.messages.append(guard.stopped_message())
    ctx.hooks.model_call_failed(
        run_id=ctx.run_id,
        cycle=cycle,
        usage=assembler.usage,
        error=CancelledError(f"guardrail: {trip.name}"),
        duration_s=duration,
    )
    yield guardrail_tripped(trip)
    ctx.stop_at_guardrail(trip)
