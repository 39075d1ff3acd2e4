"""The output stage of a run's guardrails (DESIGN 13): one model call's streamed output goes
through output gates (:mod:`~agent_sync._guardrails._release`) and judges, and only what
they released reaches the events, the history and the hooks.

What the output checks see (the rule, here only). A message streams two texts, each
checked as a whole as it streams (its own gate, hold-back and judges' checkpoints):

* the answer: its text blocks and the input JSON of the output tool (structured output,
  DESIGN 10: that input is the answer), joined in the order they streamed;
* the reasoning: its reasoning blocks' text, joined in the order it streamed. An answer
  block settles the reasoning before it (as the message's end would): the model moved on
  from thinking, and the answer is not held back behind the reasoning's hold-back.

So a match split across two blocks of a text (text, then a toolUse or reasoning, then more
text) is caught as one split across two chunks: the hold-back runs on across a block's end
into the next block of its text. A check's ``view.text`` is its text (answer or reasoning)
so far. Other tools' input is the tool_call stage's.

What is released goes back to its block (:mod:`~agent_sync._guardrails._blocks`) and is
shown in the order it streamed (:mod:`~agent_sync._guardrails._order`): a block's text
only once every block before it is complete, so nothing that streamed after a tripped text
leaves, in either text. Text as :class:`TextDelta`, reasoning as :class:`ReasoningDelta`,
the output tool's input only in the finished message. The history's blocks hold exactly
what was shown (a reasoning block whose text was redacted loses its signature, so no
provider is sent it back).

The model step holds an :class:`OutputGuard` only when the run has output guardrails (else
``None``, and a call nothing gates streams through a loop of its own: nothing per chunk).
Per stream event it feeds the checked text to its text's gate and hands back the released
text as the deltas to show; at the stream's end it settles both texts and writes the
released text into the assembler's blocks. A toolUse block is only ever released in the
finished message, after the text before it; a trip drops the message's toolUses (never
run).

Judges (output checks with ``every=N``) judge the text after the gate passed it, on worker
threads (:mod:`._guard_judges`): the text goes on to the events only as far as every judge
passed it (:class:`~agent_sync._guardrails._judged.JudgedText`). At the stream's end the
message waits for its last checkpoints (bounded by their timeout and the run's cancel), then
is released. A judge's ``Redact`` goes over the patterns again (as a whole text). A judge's
trip wakes the loop through the run's scope; the model step then stops the run at it, the
text its checkpoints passed before released first.

After a trip the guard holds the trip and the message the history keeps instead of the
model's: the released text of its text blocks, then "Stopped by guardrail".
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal, cast

from .._encodable import clean_text
from .._guardrails._checks import Guardrail, GuardrailTrip, GuardView
from .._guardrails._judged import Checkpoint, JudgedText
from .._guardrails._order import InOrder
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

ANSWER, REASONING = 0, 1  # the two texts of a message (the module docstring)

Kind = Literal["text", "reasoning", "output"]
"""A block whose text the output checks see: the answer's text, the reasoning, or the input
JSON of the output tool (structured output, DESIGN 10)."""


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
    """One model call's output gate and judges, in the loop's thread; the judges' verdicts
    come from their threads (:class:`~._guard_judges.JudgeLanes`)."""

    __slots__ = (
        "_checks", "_claim", "_ctx", "_gates", "_judged", "_judges", "_kinds", "_lanes",
        "_order", "_output_tool", "_patterns", "_token", "_view_messages",
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
        self._view_messages = tuple(ctx.messages)  # the history before this call
        view = self._view if checks else None
        # one gate (and JudgedText) per text: ANSWER and REASONING
        self._gates = (OutputGate(patterns, checks, view), OutputGate(patterns, checks, view))
        # the checks' and judges' token: cancelled at the trip, and when the call is over
        self._token = CancelToken()
        self._claim = TripClaim()
        self._lanes = (
            JudgeLanes(judges, ctx.scope, self._claim, self._token, ctx.run_id) if judges else None
        )
        everies = [judge.every or 1 for judge in judges]
        self._judged = (JudgedText(everies), JudgedText(everies)) if judges else None
        output = ctx.settings.output
        self._output_tool = None if output is None else output.name  # its input is the answer
        self._kinds: dict[int, Kind] = {}  # each block whose text is checked, by index
        self._order = InOrder()  # released text, shown in the order it streamed

    @property
    def trip(self) -> GuardrailTrip | None:
        """The trip, once the gate or a judge tripped: nothing more of this message is
        released."""
        return self._claim.trip

    def feed(self, event: StreamEvent) -> tuple[TextDelta | ReasoningDelta, ...]:
        """Take one stream event: the deltas to show now (only the text the gate and the
        judges let out; several when it spans blocks)."""
        delta_event = event.get("contentBlockDelta")
        if delta_event is None:
            start = event.get("contentBlockStart")
            if start is not None:
                tool = start["start"].get("toolUse")
                if tool is not None and tool.get("name") == self._output_tool:
                    self._register(start["contentBlockIndex"], "output")
        else:
            index = delta_event["contentBlockIndex"]
            text = self._checked_text(index, delta_event["delta"])
            if self.trip is not None:
                return ()
            if text:
                text_of = self._text_of(index)
                self._take(text_of, self._gates[text_of].feed(clean_text(text), index))
                return self._show()
        if self._lanes is not None:
            self._drain()  # verdicts that came meanwhile
        return self._show()

    def _checked_text(self, index: int, delta: Any) -> str | None:
        """The text of a delta that the output checks see (DESIGN 13): the answer's text,
        the reasoning's text and the output tool's input JSON; ``None`` for anything else
        (a signature, another tool's input: the tool_call stage checks that)."""
        text = delta.get("text")
        if text is not None:
            self._register(index, "text")
            return cast(str, text)
        reasoning = delta.get("reasoningContent")
        if reasoning is not None:
            if "text" not in reasoning:
                return None
            self._register(index, "reasoning")
            return cast(str, reasoning["text"])
        tool = delta.get("toolUse")
        if tool is not None and self._kinds.get(index) == "output":
            return cast(str, tool.get("input", ""))
        return None

    def _register(self, index: int, kind: Kind) -> None:
        """Block ``index`` started streaming checked text. An answer's block settles the
        reasoning before it (as at the message's end): the model moved on from thinking, so
        a match never runs on from the reasoning over the answer into later reasoning, and
        the answer is not held back behind the reasoning's hold-back."""
        if index in self._kinds:
            return
        self._kinds[index] = kind
        self._order.start(index)
        if kind != "reasoning":
            self._settle(REASONING)

    def _settle(self, text_of: int) -> None:
        """Settle one text as it stands: every match in it, the rest released; with judges,
        each judge's checkpoint at its end (more of the text may come after)."""
        self._take(text_of, self._gates[text_of].finish())
        if self._judged is not None and self.trip is None:
            for checkpoint in self._judged[text_of].end():
                self._submit(text_of, checkpoint)

    def finish(self, assembler: MessageAssembler) -> Generator[TextDelta | ReasoningDelta]:
        """The stream ended: settle the gate, wait for the judges' last checkpoints (bounded
        by their timeout; a cancel or a judge's trip raises :class:`CancelledError`), and
        put each block's released text in the assembler's block; yields the deltas still
        to show (none after a trip)."""
        self._order.end()
        for text_of in (ANSWER, REASONING):
            self._settle(text_of)
            if self.trip is not None:
                return
        lanes = self._lanes
        if lanes is not None:
            self._drain()
            while self.trip is None and lanes.outstanding:
                yield from self._show()
                lanes.wait()
                self._ctx.scope.raise_if_cancelled()  # a cancel, or a judge's trip
                self._drain()
            self._drain()  # the verdicts that came with the last answer
        if self.trip is not None:
            return
        yield from self._show()
        for index in self._kinds:
            assembler.set_text(index, self._released_text(index))

    def settle_trip(self) -> tuple[TextDelta | ReasoningDelta, ...]:
        """At a trip: release what every judge passed before it; the text released and not
        shown yet, as deltas (shown before the trip's event)."""
        if self._lanes is not None:
            self._drain()
        return self._deltas()

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
        each text block, then ``closing_text`` (no reasoning, whose signature covers text
        that was not all released; no toolUse: none of the message's calls runs)."""
        content: list[ContentBlock] = []
        for index in sorted(self._kinds):
            text = self._released_text(index)
            if self._kinds[index] == "text" and text.strip():  # providers reject blank text
                content.append({"text": text})
        content.append({"text": closing_text})
        return {"role": "assistant", "content": content}

    def _text_of(self, index: int) -> int:
        """Which text block ``index`` is part of: ANSWER or REASONING."""
        return REASONING if self._kinds.get(index) == "reasoning" else ANSWER

    def _released_text(self, index: int) -> str:
        return self._order.shown_of(index)

    def _holds(self, index: int) -> bool:
        """Whether the checks of ``index``'s text still hold some of its text back."""
        text_of = self._text_of(index)
        if self._gates[text_of].holds(index):
            return True
        return self._judged is not None and self._judged[text_of].holds(index)

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

    def _take(self, text_of: int, step: GateStep) -> None:
        """What a text's gate let out: released, or (with judges) judged first."""
        if step.tripped is not None:
            self._trip_here(step.tripped.name, step.reason or "tripped")
            return
        if self._judged is None:
            self._order.put(step.pieces)
            return
        judged = self._judged[text_of]
        for block, piece in step.pieces:
            for checkpoint in judged.add(piece, block):
                self._submit(text_of, checkpoint)
        self._drain()

    def _submit(self, text_of: int, checkpoint: Checkpoint) -> None:
        assert self._lanes is not None and self._judged is not None
        text, pending = self._judged[text_of].view_of(checkpoint)
        self._lanes.submit(Job(text_of, checkpoint, self._view(text, pending)))

    def _drain(self) -> None:
        """Apply the judges' verdicts that came, then release what every judge passed."""
        assert self._lanes is not None and self._judged is not None
        for job, verdict in self._lanes.take():
            judged = self._judged[job.text]
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
        for judged in self._judged:
            self._order.put(judged.release())

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

    def _show(self) -> tuple[TextDelta | ReasoningDelta, ...]:
        if self.trip is not None:
            return ()  # kept for settle_trip: shown before the trip's event, or never
        return self._deltas()

    def _deltas(self) -> tuple[TextDelta | ReasoningDelta, ...]:
        """The released text that may be shown now (in the order it streamed), as deltas:
        one per block (the output tool's input is never a delta: the finished message
        shows it)."""
        pieces = self._order.take(self._holds)
        if not pieces or not self._ctx.emit_deltas:
            return ()
        deltas: list[TextDelta | ReasoningDelta] = []
        run_id = self._ctx.run_id
        for index, text in pieces:
            kind = self._kinds[index]
            if kind == "text":
                deltas.append(TextDelta(text=text, run_id=run_id))
            elif kind == "reasoning":
                deltas.append(ReasoningDelta(text=text, run_id=run_id))
        return tuple(deltas)


def stop_at_output_trip(
    ctx: RunContext, guard: OutputGuard, assembler: MessageAssembler, cycle: int, duration: float
) -> Generator[AgentEvent, None, None]:
    """End the model call at the guard's trip: what the judges passed before it released,
    the call counted, the history given the released text and "Stopped by guardrail", the
    hooks told the call was stopped (nothing of its text), the trip announced, and the run
    stopped as a cancel is (:meth:`RunContext.stop_at_guardrail`)."""
    trip = guard.trip
    assert trip is not None
    deltas = guard.settle_trip()
    guard.close()
    yield from deltas
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
