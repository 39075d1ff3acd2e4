"""The incremental partial-JSON parser: the value so far of a JSON text arriving in pieces."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sync.output._partial import PartialJSON

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_roots = st.dictionaries(st.text(max_size=6), _values, max_size=5) | st.lists(_values, max_size=5)


def _texts(value: Any) -> list[str]:
    """The ways a model might write ``value``: compact, spaced, indented, ASCII-escaped."""
    return [
        json.dumps(value),
        json.dumps(value, separators=(",", ":"), ensure_ascii=False),
        json.dumps(value, indent=2, ensure_ascii=True),
    ]


def _feed_all(text: str, cuts: list[int]) -> tuple[PartialJSON, list[Any]]:
    parser = PartialJSON()
    seen = []
    points = sorted({c % (len(text) + 1) for c in cuts})
    start = 0
    for point in [*points, len(text)]:
        if parser.feed(text[start:point]):
            seen.append(parser.snapshot())
        start = point
    return parser, seen


# 100 examples each: at 100, every seed tried (6 per test) took every line-to-line step of
# the parser (agent_sync/output/_partial.py) that 300 or 200 took, all of its 220-odd; the
# larger counts only repeated them, for seconds per test on two busy cores.
_EXAMPLES = 100


@settings(max_examples=_EXAMPLES, deadline=None)
@given(_roots, st.lists(st.integers(min_value=0, max_value=10**6), max_size=12))
def test_any_split_of_any_json_ends_with_the_value(value: Any, cuts: list[int]) -> None:
    for text in _texts(value):
        parser, seen = _feed_all(text, cuts)
        assert parser.done and not parser.broken
        assert parser.snapshot() == value
        if seen:
            assert seen[-1] == value


@settings(max_examples=_EXAMPLES, deadline=None)
@given(_roots, st.integers(min_value=0, max_value=10**6), st.lists(st.integers(0, 10**6)))
def test_the_value_so_far_does_not_depend_on_how_the_text_was_cut(
    value: Any, prefix_at: int, cuts: list[int]
) -> None:
    """What a prefix reads as is a function of the prefix: the same whether it arrived in
    one piece or many (so a partial never shows what a later chunk takes back)."""
    text = json.dumps(value, ensure_ascii=False)
    prefix = text[: prefix_at % (len(text) + 1)]
    whole = PartialJSON()
    whole.feed(prefix)
    pieces, _ = _feed_all(prefix, cuts)
    assert pieces.snapshot() == whole.snapshot()


@settings(max_examples=_EXAMPLES, deadline=None)
@given(_roots)
def test_partials_only_grow_and_snapshots_are_never_changed_later(value: Any) -> None:
    """A snapshot is the caller's: feeding more never changes one already taken; and each
    change reported is a real change."""
    text = json.dumps(value)
    parser = PartialJSON()
    taken: list[tuple[Any, str]] = []
    for char in text:
        if parser.feed(char):
            snapshot = parser.snapshot()
            taken.append((snapshot, json.dumps(snapshot)))
    for snapshot, frozen in taken:
        assert json.dumps(snapshot) == frozen
    shown = [frozen for _, frozen in taken]
    assert all(a != b for a, b in zip(shown, shown[1:], strict=False))


def test_partial_values_read_as_far_as_they_go() -> None:
    parser = PartialJSON()
    steps = {
        '{"na': {},
        'me": "Ad': {"name": "Ad"},
        'a", "n': {"name": "Ada"},
        '": -': {"name": "Ada"},
        "12": {"name": "Ada", "n": -12},
        '.5, "ok": tr': {"name": "Ada", "n": -12.5},
        'ue, "tags": ["x", {"k": [1': {
            "name": "Ada",
            "n": -12.5,
            "ok": True,
            "tags": ["x", {"k": [1]}],
        },
    }
    for chunk, expected in steps.items():
        parser.feed(chunk)
        assert parser.snapshot() == expected


def test_escapes_split_across_chunks_decode_like_json() -> None:
    text = json.dumps({"s": 'a"b\\c\n\u00e9 \U0001f600 /'}, ensure_ascii=True)
    parser = PartialJSON()
    for char in text:
        parser.feed(char)
    assert parser.snapshot() == json.loads(text)


def test_a_code_fence_around_the_json_is_ignored() -> None:
    parser = PartialJSON()
    for chunk in ["```json\n{", '"a": 1', "}\n```\nDone."]:
        parser.feed(chunk)
    assert parser.done and parser.snapshot() == {"a": 1}


def test_text_that_is_not_json_stops_the_parser_keeping_the_last_value() -> None:
    parser = PartialJSON()
    parser.feed('{"a": 1, "b": [2')
    assert parser.feed("}}}") is False
    assert parser.broken
    assert parser.snapshot() == {"a": 1, "b": [2]}
    assert parser.feed("3]}") is False


def test_nothing_before_the_first_brace_is_a_value() -> None:
    parser = PartialJSON()
    assert parser.feed("Sure, here it is: ") is False
    assert parser.snapshot() is None


_EMOJI = '{"city": "Os\\ud83d\\ude00lo", "lone": "a\\ud83db\\udc00", "k\\ud83d": [1]}'


def test_a_surrogate_pair_split_anywhere_never_shows_half_a_character() -> None:
    """Each partial must survive UTF-8 (a store, a frame); the last is the final parse's."""
    final = {"city": "Os\U0001f600lo", "lone": "a\ufffdb\ufffd", "k\ufffd": [1]}
    for cut in range(len(_EMOJI) + 1):
        for second in range(cut, len(_EMOJI) + 1, 3):
            parser, seen = _feed_all(_EMOJI, [cut, second])
            for partial in seen:
                json.dumps(partial, ensure_ascii=False).encode("utf-8")  # no lone half
            assert parser.snapshot() == final


def test_raw_surrogate_halves_in_separate_pieces_are_joined() -> None:
    """A provider's JSON may carry an emoji's halves in two deltas as code points."""
    parser = PartialJSON()
    parser.feed('{"a": "x\ud83d')
    assert parser.snapshot() == {"a": "x"}
    parser.feed('\ude00y"}')
    assert parser.snapshot() == {"a": "x\U0001f600y"}
