"""Which content block each character of a message's output text belongs to (DESIGN 13).

The output checks see two texts per assistant message (:mod:`agent_sync.run._guard_output`):
the answer (its text blocks and the output tool's input JSON) and the reasoning, each its
blocks' text joined in the order it streamed, so that a match split across two blocks is
caught like one split across two chunks. What they release goes back to the block it came
from, so the history's blocks hold exactly the released text. :class:`BlockMarks` keeps
that attribution beside a text while the text grows at its end, is rewritten (a redaction)
and is cut from its front (a release).

Rule for a rewrite: the replacement belongs to the block its first character was in (a
match that spans two blocks is replaced in the earlier one); a block whose text was all
replaced keeps its place after the replacement, empty, so its later text follows it there.
"""

from __future__ import annotations

__all__ = ["BlockMarks", "Span", "split_spans"]

Span = tuple[int, int, int]
"""``(block, start, end)``: the text ``[start:end]`` is block ``block``'s."""


class BlockMarks:
    """The block of each character of a text, as ``(offset, block)`` marks: each block's
    text runs from its mark to the next (offsets increasing; the last mark is the block
    the next text joins unless another block's comes)."""

    __slots__ = ("_marks",)

    def __init__(self) -> None:
        self._marks: list[tuple[int, int]] = []

    def grow(self, length: int, block: int) -> None:
        """Text of ``block`` is appended to the text, ``length`` characters long before."""
        if not self._marks or self._marks[-1][1] != block:
            self._put(length, block)

    def replace(self, start: int, end: int, length: int) -> None:
        """``text[start:end]`` became ``length`` characters (see the module docstring)."""
        shift = length - (end - start)
        marks = self._marks
        self._marks = []
        for offset, block in marks:
            if start < offset < end:
                offset = start + length
            elif offset >= end:
                offset += shift
            self._put(offset, block)

    def cut(self, length: int) -> list[Span]:
        """Cut the first ``length`` characters off the text: their spans, in order (the
        marks of the rest count from its new start)."""
        spans: list[Span] = []
        rest: list[tuple[int, int]] = []
        marks = self._marks
        for position, (offset, block) in enumerate(marks):
            end = marks[position + 1][0] if position + 1 < len(marks) else None
            if offset < length:
                stop = length if end is None else min(end, length)
                if stop > offset:
                    spans.append((block, offset, stop))
                if end is None or end > length:
                    rest.append((0, block))  # runs on past the cut
            else:
                rest.append((offset - length, block))
        self._marks = rest
        return spans

    def holds(self, block: int, length: int) -> bool:
        """Whether any of the text, ``length`` characters long, is ``block``'s."""
        marks = self._marks
        for position, (offset, owner) in enumerate(marks):
            end = marks[position + 1][0] if position + 1 < len(marks) else length
            if owner == block and offset < min(end, length):
                return True
        return False

    def _put(self, offset: int, block: int) -> None:
        marks = self._marks
        if marks and marks[-1][0] == offset:
            marks.pop()  # the earlier block holds no text here
        if marks and marks[-1][1] == block:
            return  # the same block runs on
        marks.append((offset, block))


def split_spans(text: str, spans: list[Span], base: int = 0) -> list[tuple[int, str]]:
    """``text`` (starting at offset ``base`` of the spans' text) cut into its blocks'
    pieces: ``(block, piece)`` in order, empty pieces left out."""
    pieces: list[tuple[int, str]] = []
    for block, start, end in spans:
        piece = text[max(start - base, 0) : max(end - base, 0)]
        if piece:
            pieces.append((block, piece))
    return pieces
