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

Judges (output checks with ``every=N``) judge each block's text after the gate passed it,
on worker threads (:mod:`._guard_judges`): the text goes on to the events only as far as
every judge passed it (:class:`~agent_sync._guardrails._judged.JudgedText`), in block order.
At the stream's end the message waits for its last checkpoints (bounded by their timeout and
the run's cancel), then is released. A judge's ``Redact`` goes over the patterns again (as a
whole text). A judge's trip wakes the loop through the run's scope; the model step then stops
the run at it, the text its checkpoints passed before released first.

After a trip the guard holds the trip and the message the history keeps instead of the
model's: the released text, then "Stopped by guardrail".
"""

from __future__ import annotations

from collections.abc import Generator

from .._encodable import clean_text
from .._guardrails._checks import Guardrail, GuardrailTrip, GuardView
from .._guardrails._judged import Checkpoint, JudgedText
from .._guardrails._pattern import PatternGuard
from .._guardrails._release import GateStep, OutputGate
from .._guardrails._set import STOPPED_TEXT, GuardrailSet
from ..cancel import CancelledError, CancelToken
from ..events import AgentEvent, ReasoningDelta, TextDelta
from ..messages import ContentBlock, Message, StreamEvent
from ._assemble import MessageAssembler
from ._context import RunContext
from ._guard_judges import Job, JudgeLanes, TripClaim
from ._guard_tools import guardrail_tripped

__all__ = ["OutputGuard", "output_guard", "stop_at_output_trip"]


def output_guard(ctx: RunContext) -> OutputGuard | None:
    """The output guard of one model call, or ``None`` when the run has no output
    guardrails."""
    guards: GuardrailSet | None = ctx.settings.guardrails
    if guards is None or not guards.has("output"):
        return None
    return OutputGuard(
        ctx, guards.output_patterns(), guards.output_checks(), guards.output_judges()
    )


class OutputGuard:
    """One model call's output gates (one per text block), in the loop's thread; its judges'
    verdicts come from their threads (:class:`~._guard_judges.JudgeLanes`)."""

    __slots__ = (
        "_checks", "_claim", "_ctx", "_ended", "_gates", "_judged", "_judges", "_lanes",
        "_patterns", "_token", "_unshown", "_view_messages",
    )  # fmt: skip

    def __init__(
        self,
        ctx: RunContext,
        patterns: tuple[PatternGuard, ...],
        checks: tuple[Guardrail, ...],
        judges: tuple[Guardrail, ...] = (),
    ) -> None:
        self._ctx = ctx
        self._patterns = patterns
        self._checks = checks
        self._judges = judges
        self._gates: dict[int, OutputGate] = {}
        self._view_messages = tuple(ctx.messages)  # the history before this call
        # the checks' and judges' token: cancelled at the trip, and when the call is over
        self._token = CancelToken()
        self._claim = TripClaim()
        self._lanes = (
            JudgeLanes(judges, ctx.scope, self._claim, self._token, ctx.run_id) if judges else None
        )
        self._judged: dict[int, JudgedText] = {}  # per block, with judges
        self._ended = False  # every block ended (the judges' blocks release in order)
        self._unshown = ""  # released, not handed out as a delta yet

    @property
    def trip(self) -> GuardrailTrip | None:
        """The trip, once a gate or a judge tripped: nothing more of this message is
        released."""
        return self._claim.trip

    def feed(
        self, event: StreamEvent, delta: TextDelta | ReasoningDelta | None
    ) -> TextDelta | ReasoningDelta | None:
        """Take one stream event and the delta the assembler made of it: the delta to
        show (for text, only the text the gates and judges let out, if any)."""
        delta_event = event.get("contentBlockDelta")
        text = None if delta_event is None else delta_event["delta"].get("text")
        if delta_event is None or text is None:  # reasoning, tool input: not the answer's
            if delta is None and self._lanes is not None:
                self._drain()  # verdicts that came meanwhile
                return self._show()
            return delta
        if text:
            index = delta_event["contentBlockIndex"]
            self._take(index, self._gate(index).feed(clean_text(text)))
        elif self._lanes is not None:
            self._drain()
        return self._show()

    def finish(self, assembler: MessageAssembler) -> Generator[TextDelta, None, None]:
        """The stream ended: settle each block's gate in order, wait for the judges' last
        checkpoints (bounded by their timeout; a cancel or a judge's trip raises
        :class:`CancelledError`), and put each block's released text in the assembler's
        block; yields the deltas still to show (none after a trip)."""
        lanes = self._lanes
        for index in sorted(self._gates):
            self._take(index, self._gates[index].finish())
            if self.trip is not None:
                return
            if lanes is not None:
                for checkpoint in self._judged[index].end():
                    self._submit(index, checkpoint)
        if lanes is not None:
            self._ended = True
            self._drain()
            while self.trip is None and lanes.outstanding:
                if (delta := self._show()) is not None:
                    yield delta
                lanes.wait()
                self._ctx.scope.raise_if_cancelled()  # a cancel, or a judge's trip
                self._drain()
            self._drain()  # the verdicts that came with the last answer
        if self.trip is not None:
            return
        if (delta := self._show()) is not None:
            yield delta
        for index in sorted(self._gates):
            assembler.set_text(index, self._released_text(index))

    def settle_trip(self) -> TextDelta | None:
        """At a trip: release what every judge passed before it; the text released and not
        shown yet, as a delta (shown before the trip's event)."""
        if self._lanes is not None:
            self._drain()
        text, self._unshown = self._unshown, ""
        if text and self._ctx.emit_deltas:
            return TextDelta(text=text, run_id=self._ctx.run_id)
        return None

    @property
    def tripped_from_worker(self) -> bool:
        """Whether a judge's trip, from its thread, cancelled the scope (it came first)."""
        return self._claim.from_worker

    def close(self) -> None:
        """The model call is over: the checks' token cancelled, the judges' threads let go
        (never waited for). Idempotent."""
        self._token.cancel("model call over")
        if self._lanes is not None:
            self._lanes.close(self._ctx.settings.tool_grace_period)

    def stopped_message(self, closing_text: str = STOPPED_TEXT) -> Message:
        """The message the history keeps after a trip (or a cancel): the released text of
        each block, then ``closing_text`` (no toolUse: none of the message's calls runs)."""
        content: list[ContentBlock] = []
        for index in sorted(self._gates):
            text = self._released_text(index)
            if text.strip():  # providers reject blank text blocks
                content.append({"text": text})
        content.append({"text": closing_text})
        return {"role": "assistant", "content": content}

    def _released_text(self, index: int) -> str:
        judged = self._judged.get(index)
        return self._gates[index].released_text if judged is None else judged.released_text

    def _gate(self, index: int) -> OutputGate:
        gate = self._gates.get(index)
        if gate is None:
            gate = self._gates[index] = OutputGate(
                self._patterns, self._checks, self._view if self._checks else None
            )
            if self._lanes is not None:
                self._judged[index] = JudgedText([judge.every or 1 for judge in self._judges])
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

    def _take(self, index: int, step: GateStep) -> None:
        """What a block's gate let out: released, or (with judges) judged first."""
        if step.tripped is not None:
            self._trip_here(step.tripped.name, step.reason or "tripped")
            return
        if self._lanes is None:
            self._unshown += step.released
            return
        if step.released:
            for checkpoint in self._judged[index].add(step.released):
                self._submit(index, checkpoint)
        self._drain()

    def _submit(self, index: int, checkpoint: Checkpoint) -> None:
        assert self._lanes is not None
        text, pending = self._judged[index].view_of(checkpoint)
        self._lanes.submit(Job(index, checkpoint, self._view(text, pending)))

    def _drain(self) -> None:
        """Apply the judges' verdicts that came, then release, block by block in order,
        what every judge passed (a block waits for the blocks before it to end)."""
        assert self._lanes is not None
        for job, verdict in self._lanes.take():
            judged = self._judged[job.block]
            if verdict is None:
                judged.passed(job.checkpoint)
                continue
            name = self._judges[job.checkpoint.judge].name
            replacement = self._scanned(verdict.text)
            if replacement is None:
                break
            if not judged.redact(job.checkpoint, replacement):
                self._trip_here(name, f"guardrail {name}: conflicting redactions")
                break
        for index in sorted(self._judged):
            judged = self._judged[index]
            self._unshown += judged.release()
            if not (self._ended and judged.complete):
                break

    def _scanned(self, text: str) -> str | None:
        """A judge's replacement, through the patterns (a whole text): ``None`` at a trip."""
        for pattern in self._patterns:
            scanned = pattern.scan(text)
            if scanned is None:
                self._trip_here(pattern.name, f"matched the {pattern.name} pattern")
                return None
            text = scanned
        return text

    def _trip_here(self, name: str, reason: str) -> None:
        """A trip in the loop's thread (a pattern, a loop check, a judge's redaction)."""
        trip = GuardrailTrip(name=name, stage="output", reason=reason, run_id=self._ctx.run_id)
        if self._claim.claim(trip):
            self._token.cancel("guardrail tripped")

    def _show(self) -> TextDelta | None:
        if self.trip is not None:
            return None  # kept for settle_trip: shown before the trip's event, or never
        text, self._unshown = self._unshown, ""
        if text and self._ctx.emit_deltas:
            return TextDelta(text=text, run_id=self._ctx.run_id)
        return None


def stop_at_output_trip(
    ctx: RunContext, guard: OutputGuard, assembler: MessageAssembler, cycle: int, duration: float
) -> Generator[AgentEvent, None, None]:
    """End the model call at the guard's trip: what the judges passed before it released,
    the call counted, the history given the released text and "Stopped by guardrail", the
    hooks told the call was stopped (nothing of its text), the trip announced, and the run
    stopped as a cancel is (:meth:`RunContext.stop_at_guardrail`)."""
    trip = guard.trip
    assert trip is not None
    delta = guard.settle_trip()
    guard.close()
    if delta is not None:
        yield delta
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
    ctx.stop_at_guardrail(trip, claimed=guard.tripped_from_worker)
