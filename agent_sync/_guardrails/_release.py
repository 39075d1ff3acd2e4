"""The output gate: an assistant message's streamed text is released only as far as every
pattern allows (DESIGN 13, output stage; STYLE: "a stream gate holds back what it has not
checked").

Design. The gate keeps the message's text so far, with the redactions already made, and how
much of it was released. After each chunk it applies every match that more text can no longer
change (a redaction rewrites the unreleased text; a trip ends the message), then releases up to
the first of:

* the start of a match that more text could still change (it waits for its whole reach);
* ``len(text) - hold``, where ``hold`` is the longest ``max_match`` less one: a match that is
  not here yet ends after the text and is at most ``max_match`` long, so it starts inside the
  held tail; what lies before it can never become part of a match.

Released text is final: no later chunk changes it, and a match can never start inside it and
end after it. At the message's end (:meth:`OutputGate.finish`) every match is settled and the
rest is released. A trip releases nothing more: the tripped text and all after it stay here.

Checks without ``every`` (:class:`~._checks.Guardrail`) run on each chunk, after the patterns,
in the loop's thread: each sees the text so far and what is pending; a ``Redact`` replaces the
pending text (and the patterns go over it again), a ``Trip`` ends the message. What they
passed is released as far as the patterns allow.

Checks with ``every`` (judges, on worker threads) come after the gate: what it releases is
final, and only then judged (:mod:`._judged`), so the release point is the least of what
the patterns and loop checks passed and what every judge passed.

The text is one text of the message (its answer, or its reasoning) across its blocks
(:mod:`._blocks`): each chunk says which block it is from, so the hold-back and the matches
run on over a block's end into the next block of the text, and what is released comes back
as pieces of their blocks. :meth:`OutputGate.finish` settles the text as it stands; more
may follow (a match never spans that point).

One gate serves one text of one message, in the loop's thread only (no lock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._blocks import BlockMarks, split_spans
from ._checks import Guardrail, GuardView, Redact, Trip
from ._pattern import PatternGuard

MakeView = Callable[[str, str], GuardView]
"""``make_view(text, pending)``: the view a check sees (the run fills in the rest)."""


@dataclass(frozen=True)
class GateStep:
    """What one chunk (or the message's end) let out."""

    released: str
    """Text released now, after the text released before (may be empty)."""
    tripped: PatternGuard | Guardrail | None = None
    """The pattern or check that tripped: nothing more of this message is released."""
    reason: str | None = None
    """Why, with ``tripped`` (never the tripped text)."""
    pieces: tuple[tuple[int, str], ...] = ()
    """``released`` cut into the pieces of its blocks: ``(block, text)``, in order."""


class OutputGate:
    """One assistant message's text, released only where every pattern and check passed it.

    Args:
        patterns: The output-stage patterns, applied in order (a redaction made by one is
            what the next sees).
        checks: Output checks without ``every``, run on each chunk in order.
        make_view: Builds a check's view from the text so far and the pending text (needed
            with ``checks``).
    """

    __slots__ = (
        "_checks", "_context", "_done", "_hold", "_make_view", "_marks", "_patterns",
        "_pending", "_tail", "_trip",
    )  # fmt: skip

    def __init__(
        self,
        patterns: Sequence[PatternGuard],
        checks: Sequence[Guardrail] = (),
        make_view: MakeView | None = None,
    ) -> None:
        if checks and make_view is None:
            raise ValueError("an OutputGate with checks needs make_view")
        self._patterns = tuple(patterns)
        self._checks = tuple(checks)
        self._make_view = make_view
        self._context = max((pattern.max_match for pattern in self._patterns), default=0)
        self._hold = max(0, self._context - 1)
        # Released text is final: kept as pieces (a chunk never copies the whole answer),
        # with its last ``_context`` characters beside the pending text for a lookbehind.
        self._done: list[str] = []
        self._tail = ""
        self._pending = ""  # at most the hold and a match waiting for its reach
        self._marks = BlockMarks()  # the block of each pending character
        self._trip: GateStep | None = None

    @property
    def released_text(self) -> str:
        """Everything released so far, every block's (in the order it streamed)."""
        return "".join(self._done)

    def holds(self, block: int) -> bool:
        """Whether any of ``block``'s text is still pending."""
        return self._marks.holds(block, len(self._pending))

    @property
    def pending(self) -> str:
        """Text received (redactions applied) and not released yet."""
        return self._pending

    @property
    def tripped(self) -> PatternGuard | Guardrail | None:
        """The pattern or check that tripped, if one did."""
        return self._trip.tripped if self._trip is not None else None

    def feed(self, chunk: str, block: int = 0) -> GateStep:
        """Take the next chunk of the message's text, from its content block ``block``;
        return what may be released now."""
        if self._trip is not None:
            return self._trip
        self._marks.grow(len(self._pending), block)
        self._pending += chunk
        return self._advance(final=False)

    def finish(self) -> GateStep:
        """The text ended (for now): settle every match and release the rest."""
        if self._trip is not None:
            return self._trip
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> GateStep:
        judged = self._judge(final)
        if isinstance(judged, GateStep):
            self._trip = judged
            return judged
        released, self._pending = self._pending[:judged], self._pending[judged:]
        if not released:
            return GateStep("")
        self._done.append(released)
        self._tail = (self._tail + released)[-self._context :] if self._context else ""
        pieces = split_spans(released, self._marks.cut(judged))
        return GateStep(released, pieces=tuple(pieces))

    def _judge(self, final: bool) -> GateStep | int:
        """Patterns, then checks (then patterns again over what a check redacted): the
        trip, or how much of the pending text may be released."""
        pattern, releasable = self._apply_settled(final)
        if pattern is not None:
            return GateStep("", pattern, f"matched the {pattern.name} pattern")
        if not self._checks or not self._pending:
            return releasable
        assert self._make_view is not None
        redacted = False
        for check in self._checks:
            # The view's text is the whole message so far (DESIGN 13): a join per chunk,
            # paid only by gates with checks.
            text = self.released_text + self._pending
            verdict = check.judge(self._make_view(text, self._pending))
            if isinstance(verdict, Trip):
                return GateStep("", check, verdict.reason)
            if isinstance(verdict, Redact):
                self._marks.replace(0, len(self._pending), len(verdict.text))
                self._pending = verdict.text
                redacted = True
        if redacted:
            pattern, releasable = self._apply_settled(final)
            if pattern is not None:
                return GateStep("", pattern, f"matched the {pattern.name} pattern")
        return releasable

    def _apply_settled(self, final: bool) -> tuple[PatternGuard | None, int]:
        """Apply every settled match in the pending text until none is left: the pattern
        that tripped, if one did, and how much of the pending text may then be released
        (up to the first match still waiting for its reach, and the hold).

        A redaction can make a new match with the text around it, so the patterns go round
        again while any changed the text. A pattern's own replacement never matches it
        (checked when it is made), so the rounds end unless redactions keep feeding each
        other: after one round more than there are patterns, the last to redact trips (fail
        closed)."""
        base = len(self._tail)  # the patterns see the released tail, match after it only
        window = self._tail + self._pending
        changed_by: PatternGuard | None = None
        for _ in range(len(self._patterns) + 1):
            changed_by = None
            limit = len(window) if final else max(base, len(window) - self._hold)
            for pattern in self._patterns:
                at = base
                while (match := pattern.first_match(window, at)) is not None:
                    if not final and not pattern.settled(match, len(window)):
                        limit = min(limit, match.start)
                        break
                    if pattern.action == "trip":
                        return pattern, 0
                    window = window[: match.start] + pattern.replacement + window[match.end :]
                    self._marks.replace(
                        match.start - base, match.end - base, len(pattern.replacement)
                    )
                    at = match.start + len(pattern.replacement)
                    changed_by = pattern
            if changed_by is None:
                self._pending = window[base:]
                return None, limit - base
        return changed_by, 0
