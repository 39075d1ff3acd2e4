"""Released output is shown in the order it streamed (DESIGN 13: nothing after the tripped
text leaves): a block's text waits for every block before it to be complete."""

from __future__ import annotations

from agent_sync._guardrails._blocks import BlockMarks
from agent_sync._guardrails._order import InOrder


def test_a_later_block_waits_for_an_earlier_one_its_checks_still_hold() -> None:
    order = InOrder()
    held = {0}
    order.start(0)
    order.put([(0, "Hello. s")])
    order.start(1)  # reasoning, after the answer's held tail
    order.put([(1, "Let me see.")])
    assert order.take(held.__contains__) == [(0, "Hello. s")]  # block 1 waits
    held.clear()
    assert order.take(held.__contains__) == [(1, "Let me see.")]
    order.start(2)
    order.put([(2, "bye")])
    order.end()
    assert order.take(held.__contains__) == [(2, "bye")]
    assert [order.shown_of(block) for block in (0, 1, 2)] == ["Hello. s", "Let me see.", "bye"]


def test_marks_follow_a_rewrite_and_a_cut() -> None:
    marks = BlockMarks()
    marks.grow(0, 0)  # "ab" of block 0
    marks.grow(2, 1)  # "cd" of block 1
    marks.grow(4, 2)  # "ef" of block 2
    marks.replace(1, 5, 1)  # "bcde" -> "X": block 0's; block 1 is gone; block 2 keeps "f"
    assert marks.cut(3) == [(0, 0, 2), (2, 2, 3)]
    assert not marks.holds(2, 0)
    marks.grow(0, 2)
    assert marks.holds(2, 1) and marks.cut(1) == [(2, 0, 1)]
