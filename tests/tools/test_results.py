"""Issue 10 items 1 and 8: whatever a tool returns or raises becomes one valid toolResult.

The worker reports every call exactly once (its one report path is a ``finally``), and
result normalisation never raises, so the run goes on and ends ``end_turn``.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import os
import pathlib
import uuid
from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from agent_sync import Agent, tool
from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from agent_sync.tools._results import result_from_value
from tests.fixtures.doubles import BackgroundInvoke, assert_valid


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you either")


class _Fatal(BaseException):
    """A BaseException that is not an Exception (like SystemExit or KeyboardInterrupt)."""


def _huge_int() -> Any:
    return {"n": 10**5000}  # past Python's int-to-str digit limit


def _bare_huge_int() -> Any:
    return 10**5000


def _unprintable_object() -> Any:
    return _Unprintable()


def _raises_unprintable() -> Any:
    raise _UnprintableError()


def _raises_base_exception() -> Any:
    raise _Fatal("fatal")


def _raises_system_exit() -> Any:
    raise SystemExit(3)


def _wrong_typed_result() -> Any:
    return {"content": [{"text": 5}]}


def _bad_status() -> Any:
    return {"status": "maybe", "content": [{"text": "x"}]}


def _nan_json() -> Any:
    return {"content": [{"json": float("nan")}]}


HOSTILE: dict[str, Callable[[], Any]] = {
    "huge int in a dict": _huge_int,
    "huge int": _bare_huge_int,
    "object whose __str__ raises": _unprintable_object,
    "exception whose __str__ raises": _raises_unprintable,
    "BaseException": _raises_base_exception,
    "SystemExit": _raises_system_exit,
    "result-shaped dict with int text": _wrong_typed_result,
    "result-shaped dict with unknown status": _bad_status,
    "result-shaped dict with NaN json": _nan_json,
}


@pytest.mark.parametrize("executor", ["concurrent", "sequential"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_tool_gets_an_error_result_and_the_run_goes_on(case: str, executor: str) -> None:
    hostile = tool(name="hostile")(HOSTILE[case])

    @tool
    def fine() -> str:
        """A well-behaved neighbour."""
        return "fine"

    turn = {"tool_calls": [{"name": "hostile", "input": {}}, {"name": "fine", "input": {}}]}
    model = ScriptedModel([turn, "done"])
    agent = Agent(model, tools=[hostile, fine], tool_executor=executor)  # type: ignore[arg-type]
    running = BackgroundInvoke(agent)
    try:
        result = running.result(timeout=30)  # the old worker died: invoke() hung here
    finally:
        agent.cancel("test cleanup")
    assert result.stop_reason == "end_turn"
    assert result.text == "done"
    assert_valid(agent)
    answers = [block["toolResult"] for block in agent.messages[2]["content"]]
    assert answers[0]["status"] == "error"
    assert answers[1] == {**answers[1], "status": "success", "content": [{"text": "fine"}]}
    error_text = answers[0]["content"][0]["text"]
    assert isinstance(error_text, str) and error_text
    json.dumps(agent.messages)  # the history stays JSON-serialisable
    sent = model.calls[1].messages  # the model was told, through a valid request
    assert validate_history(list(sent)) == []


def test_error_results_say_what_could_not_be_represented() -> None:
    from agent_sync.tools._results import describe_exception, safe_str

    huge = result_from_value("t1", {"n": 10**5000})
    assert huge["status"] == "error"
    assert 'at $["n"] is an int too long to write' in huge["content"][0]["text"]
    wrong = result_from_value("t1", {"content": [{"text": 5}]})
    assert wrong["status"] == "error"
    assert "content piece 0: text must be a string, not int" in wrong["content"][0]["text"]
    assert describe_exception(_UnprintableError()).startswith("_UnprintableError: <")
    assert "could not be shown" in safe_str(_Unprintable())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", [{"text": "plain"}]),
        ({"a": 1}, [{"json": {"a": 1}}]),
        ({1: (2, 3)}, [{"json": {"1": [2, 3]}}]),  # stored as plain JSON values
        ([1, "x"], [{"text": '[1, "x"]'}]),
        (None, [{"text": "null"}]),
        ({"content": [{"json": {"k": [1]}}, {"text": "t"}]}, [{"json": {"k": [1]}}, {"text": "t"}]),
    ],
)
def test_representable_values_are_kept(value: Any, expected: list[Any]) -> None:
    result = result_from_value("t1", value)
    assert result == {"toolUseId": "t1", "status": "success", "content": expected}


def test_a_result_shaped_error_keeps_its_status() -> None:
    value = {"status": "error", "content": [{"text": "nope"}]}
    assert result_from_value("t1", value) == {"toolUseId": "t1", **value}


def test_a_str_subclass_is_stored_as_a_plain_str() -> None:
    class Loud(str):
        def __str__(self) -> str:
            raise RuntimeError("never called")

    result = result_from_value("t1", Loud("hi"))
    piece = result["content"][0]["text"]
    assert piece == "hi" and type(piece) is str


# --- issue 22 items 1 and 23: a return value JSON cannot carry is encoded or refused ---


def _cycle() -> list[Any]:
    loop: list[Any] = [decimal.Decimal(1)]  # not plain JSON: the walk, not the fast path
    loop.append(loop)
    return [loop]


def _deep(levels: int) -> list[Any]:
    value: list[Any] = [datetime.date(2026, 1, 1)]
    for _ in range(levels):
        value = [value]
    return value


@dataclasses.dataclass
class _Row:
    when: datetime.datetime
    tags: set[str]


class _Colour(enum.Enum):
    RED = "red"


class _Model(pydantic.BaseModel):
    price: decimal.Decimal
    id: uuid.UUID


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (datetime.datetime(2026, 11, 26, 18, 0, 5), [{"text": "2026-11-26T18:00:05"}]),
        (datetime.date(2026, 11, 26), [{"text": "2026-11-26"}]),
        (datetime.time(7, 30), [{"text": "07:30:00"}]),
        (decimal.Decimal("12.50"), [{"text": "12.50"}]),  # exact digits, as pydantic's JSON
        (uuid.UUID(int=7), [{"text": "00000000-0000-0000-0000-000000000007"}]),
        ({3, 1, 2}, [{"text": "[1, 2, 3]"}]),
        (frozenset({"b", "a"}), [{"text": '["a", "b"]'}]),
        (_Colour.RED, [{"text": "red"}]),
        (pathlib.PurePosixPath("/srv/data.csv"), [{"text": "/srv/data.csv"}]),
        (
            _Row(datetime.datetime(2026, 1, 2), {"y", "x"}),
            [{"json": {"when": "2026-01-02T00:00:00", "tags": ["x", "y"]}}],
        ),
        (
            _Model(price=decimal.Decimal("9.99"), id=uuid.UUID(int=1)),
            [{"json": {"price": "9.99", "id": "00000000-0000-0000-0000-000000000001"}}],
        ),
        ({"at": datetime.date(2026, 1, 1)}, [{"json": {"at": "2026-01-01"}}]),
        ([decimal.Decimal("1.5"), "Zürich"], [{"text": '["1.5", "Zürich"]'}]),
        (os.fsdecode(b"report-\xff.txt"), [{"text": "report-\ufffd.txt"}]),
        ({"name": os.fsdecode(b"\xff")}, [{"json": {"name": "\ufffd"}}]),
        (
            {"content": [{"text": "a\ud800"}, {"json": ["\udcff"]}]},
            [{"text": "a\ufffd"}, {"json": ["\ufffd"]}],
        ),
    ],
    ids=lambda value: type(value).__name__,
)
def test_values_with_a_standard_json_form_are_encoded(value: Any, expected: list[Any]) -> None:
    """The old code sent the model str(value) (``'{3, 1, 2}'``, ``Decimal('12.50')``,
    ``_Row(when=datetime.datetime(...))``) or a string the store could not encode."""
    result = result_from_value("t1", value)
    assert result == {"toolUseId": "t1", "status": "success", "content": expected}
    json.dumps(result, allow_nan=False).encode("utf-8")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (float("nan"), "the return value is NaN"),
        (float("inf"), "the return value is Infinity"),
        ({"score": -math.inf}, 'the return value at $["score"] is -Infinity'),
        ([1, {"x": [float("nan")]}], 'the return value at $[1]["x"][0] is NaN'),
        (decimal.Decimal("NaN"), "is Decimal('NaN')"),
        (b"\x89PNG", "is bytes, which JSON cannot carry"),
        ({"raw": bytearray(b"x")}, 'at $["raw"] is bytes'),
        (_Unprintable(), "is of type _Unprintable, which has no JSON form"),
        ({"obj": object()}, 'at $["obj"] is of type object'),
        (_cycle(), "at $[0][1] contains itself (a cycle)"),
        (_deep(300), "is nested deeper than 200 levels"),
        ({"content": [{"json": float("nan")}], "extra": 1}, 'at $["content"][0]["json"] is NaN'),
    ],
    ids=lambda value: type(value).__name__,
)
def test_values_json_cannot_carry_are_error_results_not_reprs(value: Any, says: str) -> None:
    result = result_from_value("t1", value)
    assert result["status"] == "error"
    text = result["content"][0]["text"]
    assert says in text
    assert "object at 0x" not in text and "b'" not in text  # no repr of the value
    json.dumps(result, allow_nan=False).encode("utf-8")


def test_error_texts_are_made_encodable() -> None:
    """A tool's exception message and a deny reason may carry a file name's lone surrogate."""
    from agent_sync.tools._results import describe_exception, error_result

    name = os.fsdecode(b"report-\xff.txt")
    assert describe_exception(ValueError(f"cannot read {name}")).encode("utf-8")
    result = error_result("t1", f"denied: {name}")
    assert result["content"][0]["text"] == "denied: report-\ufffd.txt"
