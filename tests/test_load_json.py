"""Issue 33 item 8: the JSON of a model's answer (the forced output tool's input, any tool's
input, a text answer read by the Python path) is parsed once.

``load_json`` parsed the text, encoded the value again and parsed that a second time (to
find lone surrogates and non-finite numbers), 10-20x the cost of a parse per answer: the
bulk of what typed output cost over a plain answer on the Anthropic and Bedrock wires. The
rule now: the text says whether the value may need cleaning (a ``NaN``/``Infinity`` or
overflowing float, stopped by the parser's hooks; a lone surrogate or a surrogate escape in
the text); only then is the value walked. These tests hold both halves: a clean text is
never copied, and every kind of unclean text is still cleaned or refused as before.
"""

from __future__ import annotations

import json

import pytest

from agent_sync import _encodable
from agent_sync._encodable import Unencodable, load_json, parse_json


def _no_walk(value: object, **_: object) -> object:
    raise AssertionError("a clean JSON text was copied after its parse")


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"number": "A-1", "items": [{"price": 1.5, "tags": ["a"]}] * 50}),
        json.dumps({"name": "Zoë, 東京 ✓"}, ensure_ascii=False),
        '{"deep": [[[[{"x": -0.0, "y": 1e308, "z": 12345678901234567890}]]]]}',
        '["a backslash: \\\\ and a small float", 2.5e-300]',
    ],
)
def test_a_clean_text_is_parsed_once_and_not_copied(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = json.loads(text)
    monkeypatch.setattr(_encodable, "clean_json", _no_walk)
    assert load_json(text) == expected


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ('{"a": NaN}', '$["a"] is NaN'),
        ('{"a": [1, Infinity]}', '$["a"][1] is Infinity'),
        ('{"a": -Infinity}', '$["a"] is -Infinity'),
        ('{"a": {"b": 1e400}}', '$["a"]["b"] is Infinity'),
        ('{"a": -' + "9" * 400 + ".0}", '$["a"] is -Infinity'),
    ],
)
def test_a_non_finite_number_is_refused_naming_its_place(text: str, place: str) -> None:
    with pytest.raises(Unencodable) as raised:
        load_json(text, what="the tool input")
    assert str(raised.value) == f"the tool input at {place}: JSON has no NaN or infinities"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": "x\\ud800y"}', {"a": "x\ufffdy"}),  # a lone high surrogate escape
        ('{"a": "\\uDC00"}', {"a": "\ufffd"}),  # a lone low one, upper case
        ('{"\\ud800": 1}', {"\ufffd": 1}),  # in a key
        ('{"a": "\\ud83d\\ude00"}', {"a": "\U0001f600"}),  # a pair: the character it means
        ('{"a": "raw \ud800 in the text"}', {"a": "raw \ufffd in the text"}),
    ],
)
def test_a_surrogate_is_replaced_or_joined(text: str, expected: object) -> None:
    value = load_json(text)
    assert value == expected
    json.dumps(value, ensure_ascii=False).encode("utf-8")  # encodable
    # and the text is not the value's JSON as it is: it may not stand for the value
    assert parse_json(text) == (expected, False)


def test_a_clean_text_stands_for_its_value() -> None:
    """parse_json's promise: ``True`` only where the text is the JSON of the very value."""
    for text in ('{"a": [1, 2.5, "Zoë \\u2713"]}', '  {"b": {}}  ', "[]"):
        value, as_is = parse_json(text)
        assert as_is and json.loads(text) == value
        text.encode("utf-8")  # encodable as it is


def test_bad_syntax_and_depth_keep_their_errors() -> None:
    with pytest.raises(json.JSONDecodeError):
        load_json('{"a": ')
    with pytest.raises(Unencodable, match="nested deeper than"):
        load_json("[" * 100_000 + "]" * 100_000, what="the answer")


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("shape", ["value", "text"])
def test_the_depth_bound_holds_on_the_fast_path_too(shape: str) -> None:
    """A clean value deeper than MAX_DEPTH was taken whole by the fast paths (only a value
    that needed the walk met the bound): stored, then unloadable in a deeper stack."""

    def take(levels: int) -> object:
        value = _nested(levels)
        if shape == "text":
            return load_json(json.dumps(value), what="the answer")
        return _encodable.clean_json(value, what="the answer")

    assert take(_encodable.MAX_DEPTH) == _nested(_encodable.MAX_DEPTH)
    with pytest.raises(Unencodable, match="the answer at .* is nested deeper than 200 levels"):
        take(_encodable.MAX_DEPTH + 1)


def test_brackets_inside_strings_never_refuse_a_shallow_value() -> None:
    value = {"code": "[" * 1000 + "{" * 1000, "rows": [{"x": "]}"}] * 300}
    assert _encodable.clean_json(value) == value
    assert load_json(json.dumps(value)) == value
