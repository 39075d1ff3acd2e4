"""The judges' part of the output gate: one text of a message (its answer or reasoning),
already passed by the patterns and the loop's checks, released only as far as every
``every=N`` judge passed it (DESIGN 13).

Design. The text comes in as the :class:`~._release.OutputGate` releases it (final: no later
chunk changes it). Each judge has its own checkpoints, at each ``every`` characters of that
text (and, at the message's end, one at its end); a checkpoint covers the text from the
judge's previous checkpoint to it (its *segment*). Positions count the text as it came in,
so a redaction never moves a checkpoint: a judge's ``Redact(text)`` is kept beside the text
as a replacement of its segment, applied as the text is released.

Release point: the least position every judge passed, moved back to the start of a
replacement it would cut (a replacement is released whole, or not at all). Replacements of
two judges that overlap and differ cannot both hold: :meth:`JudgedText.redact` says so, and
the caller trips (fail closed: neither judge saw the other's text).

The text runs across its blocks, as the gate releases it (:mod:`._blocks`):
a checkpoint may cover the end of one block and the start of the next, and what is released
goes back to the blocks it came from (a replacement to the block its segment starts in).

The verdicts reach this object in the loop's thread, through the run's judge lanes; one
object serves one text of one message, in the loop's thread only (no lock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._blocks import BlockMarks, split_spans

__all__ = ["Checkpoint", "JudgedText"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A judge's checkpoint: its ``judge`` (index), and the positions ``start`` (its
    previous checkpoint) and ``end`` in the block's text."""

    judge: int
    start: int
    end: int


class JudgedText:
    """One text of a message, released only where every judge passed it.

    Args:
        everies: Each judge's ``every`` (characters between its checkpoints), in order.
    """

    __slots__ = (
        "_base", "_done", "_ends", "_everies", "_marks", "_passed", "_replaced",
        "_text",
    )  # fmt: skip

    def __init__(self, everies: Sequence[int]) -> None:
        self._everies = tuple(everies)
        self._text = ""  # what came in and is not released: positions from _base
        self._base = 0  # the position of _text[0]: how much of what came in is released
        self._ends = [0] * len(self._everies)  # each judge's last checkpoint
        self._passed = [0] * len(self._everies)  # each judge's passed position
        self._replaced: dict[int, tuple[int, str]] = {}  # start -> (end, replacement)
        self._done: list[str] = []
        self._marks = BlockMarks()  # the block of each character of _text

    @property
    def released_text(self) -> str:
        """Everything released (replacements applied)."""
        return "".join(self._done)

    def holds(self, block: int) -> bool:
        """Whether any of ``block``'s text is not released yet."""
        return self._marks.holds(block, len(self._text))

    @property
    def complete(self) -> bool:
        """Whether everything that came in is released."""
        return not self._text

    @property
    def received(self) -> int:
        """The position after the last text that came in."""
        return self._base + len(self._text)

    def view_of(self, checkpoint: Checkpoint) -> tuple[str, str]:
        """What the judge sees at ``checkpoint``: the block's text up to it (released,
        replacements applied, then the rest as it came in) and its segment (the text its
        judge has not passed yet, which a ``Redact`` replaces)."""
        text = self.released_text + self._text[: checkpoint.end - self._base]
        return text, text[len(text) - (checkpoint.end - checkpoint.start) :]

    def add(self, text: str, block: int = 0) -> list[Checkpoint]:
        """Take text the patterns and loop checks passed, of content block ``block``: the
        checkpoints now due."""
        self._marks.grow(len(self._text), block)
        self._text += text
        due: list[Checkpoint] = []
        for judge, every in enumerate(self._everies):
            while self._ends[judge] + every <= self.received:
                due.append(self._checkpoint(judge, self._ends[judge] + every))
        return due

    def end(self) -> list[Checkpoint]:
        """The text ended (for now): each judge's checkpoint at its end (if any text came
        after its last one)."""
        end = self.received
        return [
            self._checkpoint(judge, end) for judge in range(len(self._everies))
            if self._ends[judge] < end
        ]  # fmt: skip

    def passed(self, checkpoint: Checkpoint) -> None:
        """Its judge passed ``checkpoint``. A judge's verdicts come in order; one after a
        checkpoint it never passed (it tripped) moves nothing: the text stays unpassed."""
        if checkpoint.start == self._passed[checkpoint.judge]:
            self._passed[checkpoint.judge] = checkpoint.end

    def redact(self, checkpoint: Checkpoint, replacement: str) -> bool:
        """Its judge passed ``checkpoint`` with its segment replaced by ``replacement``.
        ``False``: another judge replaced an overlapping text differently (nothing kept)."""
        if checkpoint.start != self._passed[checkpoint.judge]:
            return True  # after a checkpoint it never passed: moves nothing (see passed)
        for start, (end, text) in self._replaced.items():
            overlaps = start < checkpoint.end and checkpoint.start < end
            same = (start, end, text) == (checkpoint.start, checkpoint.end, replacement)
            if overlaps and not same:
                return False
        self._replaced[checkpoint.start] = (checkpoint.end, replacement)
        self.passed(checkpoint)
        return True

    def release(self) -> list[tuple[int, str]]:
        """Release what every judge passed: the pieces released now, ``(block, text)`` in
        order (may be none)."""
        point = min(self._passed, default=self.received)
        for start, (end, _) in self._replaced.items():
            if start < point < end:
                point = start  # a replacement goes out whole
        if point <= self._base:
            return []
        base = self._base
        spans = self._marks.cut(point - base)
        pieces: list[tuple[int, str]] = []
        at = base
        for start in sorted(s for s in self._replaced if base <= s < point):
            end, text = self._replaced.pop(start)
            pieces += split_spans(self._text[at - base : start - base], spans, at - base)
            if text:  # the replacement goes to the block its segment starts in
                block = next(b for b, first, last in spans if first <= start - base < last)
                pieces.append((block, text))
            at = end
        pieces += split_spans(self._text[at - base : point - base], spans, at - base)
        self._text = self._text[point - base :]
        self._base = point
        self._done += (piece for _, piece in pieces)
        return pieces

    def _checkpoint(self, judge: int, end: int) -> Checkpoint:
        checkpoint = Checkpoint(judge=judge, start=self._ends[judge], end=end)
        self._ends[judge] = end
        return checkpoint
