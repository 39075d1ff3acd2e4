"""The judges' release rule (``JudgedText``), without threads: text goes out only up to the
least position every judge passed, in order; a replacement goes out whole; a judge's verdict
after a checkpoint it never passed moves nothing; overlapping different redactions refuse."""

from __future__ import annotations

from agent_sync._guardrails._judged import Checkpoint, JudgedText


def test_release_is_the_least_passed_position_of_all_judges() -> None:
    judged = JudgedText([4, 6])
    due = judged.add("abcdefghij")
    assert [(c.judge, c.start, c.end) for c in due] == [(0, 0, 4), (0, 4, 8), (1, 0, 6)]
    judged.passed(due[0])
    judged.passed(due[1])
    assert _text(judged.release()) == ""  # the second judge passed nothing yet
    judged.passed(due[2])
    assert _text(judged.release()) == "abcdef"
    ends = judged.end()
    assert [(c.judge, c.start, c.end) for c in ends] == [(0, 8, 10), (1, 6, 10)]
    for checkpoint in ends:
        judged.passed(checkpoint)
    assert _text(judged.release()) == "ghij" and judged.complete
    assert judged.released_text == "abcdefghij"


def test_a_verdict_after_an_unpassed_checkpoint_moves_nothing() -> None:
    judged = JudgedText([2])
    first, second = judged.add("abcd")
    judged.passed(second)  # first never passed (it tripped)
    assert _text(judged.release()) == ""
    assert judged.redact(second, "X") and _text(judged.release()) == ""


def test_a_replacement_goes_out_whole_and_overlaps_refuse() -> None:
    judged = JudgedText([4, 2])
    a0, b0, b1 = judged.add("abcd")
    assert (a0.judge, b0.judge, b1.judge) == (0, 1, 1)
    assert judged.redact(a0, "[x]")
    judged.passed(b0)
    assert _text(judged.release()) == ""  # inside the replacement: it waits for all of it
    assert not judged.redact(b1, "[y]")  # overlaps the first judge's, differently
    judged.passed(b1)
    assert _text(judged.release()) == "[x]"
    assert judged.view_of(Checkpoint(judge=0, start=4, end=4)) == ("[x]", "")


def _text(pieces: list[tuple[int, str]]) -> str:
    return "".join(piece for _, piece in pieces)


def test_release_gives_each_block_its_text_and_a_replacement_to_its_first_block() -> None:
    judged = JudgedText([4])
    due = judged.add("abc", 0) + judged.add("def", 3) + judged.add("gh", 5)
    assert [(c.start, c.end) for c in due] == [(0, 4), (4, 8)]
    judged.passed(due[0])
    assert judged.release() == [(0, "abc"), (3, "d")]
    assert judged.holds(3) and not judged.holds(0)
    assert judged.redact(due[1], "[x]")  # "efgh": the rest of block 3 and block 5's
    assert judged.release() == [(3, "[x]")]
    assert not judged.holds(3) and not judged.holds(5) and judged.complete
