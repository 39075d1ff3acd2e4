"""The output gate (DESIGN 13): streamed text is released only where every pattern passed it.

The rule under test: whatever the chunking, the gate releases exactly what checking the whole
text at once gives (a redaction streams as it would have been made on the whole answer), and
a trip releases nothing of the tripped text or after it. Every pattern is split at every
boundary, and Hypothesis draws random chunkings.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_sync._guardrails._checks import Guardrail, GuardView, Redact, Trip, guardrail
from agent_sync._guardrails._pattern import PatternGuard
from agent_sync._guardrails._release import OutputGate
from agent_sync.errors import UsageError

KEY = r"sk-[A-Za-z0-9]{8,}"
SECRET = "sk-ABCDEFGH1234"


def stream(gate: OutputGate, chunks: list[str]) -> tuple[str, PatternGuard | Guardrail | None]:
    """Feed every chunk, then finish; what was released, and the pattern that tripped."""
    released: list[str] = []
    for chunk in chunks:
        step = gate.feed(chunk)
        released.append(step.released)
        if step.tripped is not None:
            return "".join(released), step.tripped
    step = gate.finish()
    released.append(step.released)
    return "".join(released), step.tripped


def splits(text: str) -> list[list[str]]:
    """The text in two chunks at every boundary, and one character a chunk."""
    return [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]


@pytest.mark.parametrize("chunks", splits(f"the key is {SECRET}, keep it."))
def test_a_trip_releases_nothing_of_a_secret_split_anywhere(chunks: list[str]) -> None:
    guard = PatternGuard(KEY, max_match=24)
    released, tripped = stream(OutputGate([guard]), chunks)
    assert tripped is guard
    assert released == "the key is "[: len(released)]  # a prefix of the text before the key
    assert "sk-" not in released


@pytest.mark.parametrize("chunks", splits(f"a {SECRET} and {SECRET}!"))
def test_a_redaction_split_anywhere_streams_as_the_whole_text_redacted(
    chunks: list[str],
) -> None:
    guard = PatternGuard(KEY, action="redact", replacement="[key]", max_match=24)
    released, tripped = stream(OutputGate([guard]), chunks)
    assert tripped is None
    assert released == "a [key] and [key]!" == guard.scan("".join(chunks))


@given(
    text=st.text(alphabet="sk-AB9 .x", max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=12),
)
def test_any_chunking_releases_what_the_whole_text_gives(text: str, cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(cut for cut in cuts if cut <= len(text))})
    chunks = [text[a:b] for a, b in pairwise(bounds)]
    patterns = [
        PatternGuard(r"sk-[AB9]{3,}", action="redact", replacement="#", max_match=8),
        PatternGuard(r"x\.x", action="trip", max_match=3),
    ]
    released, tripped = stream(OutputGate(patterns), chunks)
    whole = patterns[0].scan(text)
    assert whole is not None
    if patterns[1].scan(whole) is None:  # the whole text trips: nothing of the match leaks
        trip = patterns[1].first_match(whole)
        assert tripped is patterns[1] and trip is not None
        assert whole.startswith(released)
        assert len(released) <= trip.start  # not a character of the tripped text
    else:
        assert tripped is None
        assert released == whole


def test_text_without_a_match_is_held_back_only_by_the_longest_pattern() -> None:
    gate = OutputGate([PatternGuard("abc", max_match=3), PatternGuard(KEY, max_match=24)])
    assert gate.feed("x" * 30).released == "x" * 7  # 30 - (24 - 1)
    assert gate.pending == "x" * 23
    assert gate.finish().released == "x" * 23
    assert gate.released_text == "x" * 30


def test_nothing_configured_holds_nothing_back() -> None:
    gate = OutputGate([])
    assert gate.feed("hello").released == "hello"
    assert gate.finish().released == ""


def test_after_a_trip_nothing_more_is_released() -> None:
    guard = PatternGuard("bad", max_match=3)
    gate = OutputGate([guard])
    assert gate.feed("so bad").tripped is guard
    assert gate.feed(" and more").released == ""
    assert gate.finish().tripped is guard
    assert gate.released_text == "so "[: len(gate.released_text)]


def test_redactions_that_keep_making_matches_trip_fail_closed() -> None:
    # each replacement completes a match of the other pattern, round after round
    first = PatternGuard("ab", action="redact", replacement="c", max_match=2)
    second = PatternGuard("cb", action="redact", replacement="a", max_match=2)
    released, tripped = stream(OutputGate([first, second]), ["abbbbbbb"])
    assert tripped is not None
    assert released == ""


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pattern": "("}, "does not compile"),
        ({"pattern": "a*"}, "empty string"),
        ({"pattern": b"x"}, "must be a str"),
        ({"pattern": "x", "stage": "later"}, "stage must be one of"),
        ({"pattern": "x", "action": "log"}, "action must be"),
        ({"pattern": "x", "max_match": 0}, "max_match must be"),
        ({"pattern": "x", "max_match": True}, "max_match must be"),
        ({"pattern": "x", "replacement": "xx"}, "must not match its own pattern"),
        ({"pattern": "x", "name": ""}, "name must be"),
    ],
)
def test_a_bad_pattern_guard_is_refused_with_a_clear_error(
    kwargs: dict[str, object], message: str
) -> None:
    pattern = kwargs.pop("pattern")
    with pytest.raises(UsageError, match=message):
        PatternGuard(pattern, **kwargs)  # type: ignore[arg-type]


def test_a_whole_text_scan_trips_or_redacts_every_match() -> None:
    assert PatternGuard(KEY).scan(f"x {SECRET}") is None
    redact = PatternGuard(KEY, action="redact", replacement="[k]")
    assert redact.scan(f"{SECRET} {SECRET}") == "[k] [k]"
    assert redact.scan("nothing here") == "nothing here"
    assert repr(redact).startswith("PatternGuard('sk-")


def view_of(text: str, pending: str) -> GuardView:
    return GuardView(stage="output", run_id="run-1", text=text, pending=pending)


def test_a_chunk_check_that_trips_releases_nothing_of_the_chunk_it_saw() -> None:
    seen: list[tuple[str, str]] = []

    @guardrail(stage="output")
    def no_plans(view: GuardView) -> Trip | None:
        seen.append((view.text, view.pending))
        return Trip("plans") if "plan" in view.text else None

    gate = OutputGate([], [no_plans], view_of)
    assert gate.feed("Hello. ").released == "Hello. "
    step = gate.feed("The plan is")
    assert (step.released, step.tripped, step.reason) == ("", no_plans, "plans")
    assert seen == [("Hello. ", "Hello. "), ("Hello. The plan is", "The plan is")]
    assert gate.finish().tripped is no_plans and gate.released_text == "Hello. "


def test_a_chunk_check_redacts_the_pending_text_and_the_patterns_go_over_it_again() -> None:
    @guardrail(stage="output")
    def canonical(view: GuardView) -> Redact:
        return Redact(view.pending.replace("sk-", "SK-"))

    # the pattern only matches what the check made of the text
    key = PatternGuard(r"SK-\w{4}", action="redact", replacement="[key]", max_match=8)
    released, tripped = stream(OutputGate([key], [canonical], view_of), ["a sk-", "abcd b"])
    assert tripped is None
    assert released == "a [key] b"


def test_a_chunk_check_that_raises_trips_the_message() -> None:
    def broken(view: GuardView) -> None:
        raise KeyError(view.text)

    check = Guardrail(broken, stage="output")
    step = OutputGate([], [check], view_of).feed("anything")
    assert step.tripped is check and step.reason == "guardrail broken failed: KeyError"


def _by_block(pieces: list[tuple[int, str]]) -> dict[int, str]:
    texts: dict[int, str] = {}
    for block, piece in pieces:
        texts[block] = texts.get(block, "") + piece
    return texts


@pytest.mark.parametrize("split", range(1, len(SECRET)))
def test_a_match_across_two_blocks_is_redacted_in_the_block_it_starts_in(split: int) -> None:
    """The gate's text runs on over a block's end: the match is seen whole, its replacement
    goes to the block it starts in, and each block gets back the rest of its own text."""
    gate = OutputGate([PatternGuard(KEY, action="redact", max_match=20)])
    pieces: list[tuple[int, str]] = []
    for block, chunk in ((0, "a " + SECRET[:split]), (2, SECRET[split:] + " b"), (5, " c")):
        pieces += gate.feed(chunk, block).pieces
    pieces += gate.finish().pieces
    assert _by_block(pieces) == {0: "a [redacted]", 2: " b", 5: " c"}
    assert [block for block, _ in pieces] == sorted(block for block, _ in pieces)


def test_a_checks_redaction_of_pending_text_across_blocks_goes_to_the_first() -> None:
    @guardrail(stage="output")
    def no_plans(view: GuardView) -> Redact | None:
        return Redact("[plans]") if "plan" in view.text and "plan" in view.pending else None

    gate = OutputGate([PatternGuard("zzzz", max_match=4)], [no_plans], view_of)
    pieces = list(gate.feed("Hi. The pl", 0).pieces) + list(gate.feed("an is", 1).pieces)
    pieces += gate.feed(" done", 1).pieces + gate.finish().pieces
    # " plan is" (" pl" of block 0, "an is" of block 1) became "[plans]": block 0's
    assert _by_block(pieces) == {0: "Hi. The[plans]", 1: " done"}


def _attributed(text: str, owners: list[int], guard: PatternGuard) -> dict[int, str]:
    """The rule, on the whole text at once: each character goes to its block, a match's
    replacement to the block the match starts in."""
    texts: dict[int, str] = {}
    at = 0
    while at < len(text):
        match = guard.first_match(text, at)
        if match is not None and match.start == at:
            texts[owners[at]] = texts.get(owners[at], "") + guard.replacement
            at = match.end
            continue
        texts[owners[at]] = texts.get(owners[at], "") + text[at]
        at += 1
    return texts


@given(
    text=st.text(alphabet="sk-AB9 .x", max_size=60),
    block_cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=5),
    chunk_cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=12),
)
def test_any_blocks_and_chunking_give_each_block_its_own_text(
    text: str, block_cuts: list[int], chunk_cuts: list[int]
) -> None:
    """Whatever the blocks and the chunks, the released text is what the whole text gives,
    and each block gets back its own characters and the replacements of the matches that
    start in it."""
    guard = PatternGuard(r"sk-[AB9]{3,}", action="redact", replacement="#", max_match=8)
    block_bounds = sorted({0, len(text), *(cut for cut in block_cuts if cut <= len(text))})
    owners = [0] * len(text)
    for block, (a, b) in enumerate(pairwise(block_bounds)):
        owners[a:b] = [block] * (b - a)
    bounds = sorted({*block_bounds, *(cut for cut in chunk_cuts if cut <= len(text))})
    gate = OutputGate([guard])
    pieces: list[tuple[int, str]] = []
    for a, b in pairwise(bounds):
        pieces += gate.feed(text[a:b], owners[a]).pieces
    pieces += gate.finish().pieces
    assert "".join(piece for _, piece in pieces) == guard.scan(text)
    assert _by_block(pieces) == _attributed(text, owners, guard)
