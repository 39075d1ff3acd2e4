"""Issue 10 items 1 and 8: whatever a tool returns or raises becomes one valid toolResult.

The worker reports every call exactly once (its one report path is a ``finally``), and
result normalisation never raises, so the run goes on and ends ``end_turn``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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
    assert "dict that could not be represented" in huge["content"][0]["text"]
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
        (float("nan"), [{"text": "nan"}]),  # NaN is not JSON: its str()
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
