"""The order the output's released text is shown in (DESIGN 13): the order it streamed.

A message streams two texts, each checked on its own (the answer and the reasoning,
:mod:`agent_sync.run._guard_output`); each releases its text when its checks passed it. But
what is shown never runs ahead of what streamed before it: a block's released text is shown
only once every block that streamed before it is complete (it ended, and its text's checks
hold none of it back). So a trip in one text stops everything that came after the tripped
text, in either text: what streamed after it is never shown, and never in the history.

One per model call, in the loop's thread only (no lock).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["InOrder"]


class InOrder:
    """Released pieces of a message's blocks, handed out in the order the blocks streamed."""

    __slots__ = ("_ended", "_front", "_order", "_queued", "_shown")

    def __init__(self) -> None:
        self._order: list[int] = []  # the blocks, in the order they started streaming
        self._front = 0  # the first block of _order not complete yet
        self._queued: dict[int, list[str]] = {}  # released, not handed out yet
        self._shown: dict[int, list[str]] = {}  # handed out: what the history keeps
        self._ended = False

    def start(self, block: int) -> None:
        """``block`` started streaming: the blocks before it have ended."""
        self._order.append(block)

    def end(self) -> None:
        """The message ended: its last block too."""
        self._ended = True

    def put(self, pieces: tuple[tuple[int, str], ...] | list[tuple[int, str]]) -> None:
        """Released ``(block, text)`` pieces, each in its block's order."""
        for block, piece in pieces:
            self._queued.setdefault(block, []).append(piece)

    def take(self, held: Callable[[int], bool]) -> list[tuple[int, str]]:
        """What may be shown now: ``(block, text)``, one piece per block, in order.
        ``held(block)``: whether the checks still hold some of ``block``'s text back."""
        shown: list[tuple[int, str]] = []
        order = self._order
        while self._front < len(order):
            block = order[self._front]
            pieces = self._queued.pop(block, None)
            if pieces:
                text = "".join(pieces)
                self._shown.setdefault(block, []).append(text)
                shown.append((block, text))
            last = self._front == len(order) - 1
            if (last and not self._ended) or held(block):
                break
            self._front += 1
        return shown

    def shown_of(self, block: int) -> str:
        """Everything of ``block`` handed out."""
        return "".join(self._shown.get(block, ()))
