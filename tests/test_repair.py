"""repair_history: any damaged history comes back valid, and a valid one unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_sync import Agent, repair_history, validate_history
from agent_sync.errors import UsageError
from agent_sync.testing import ScriptedModel


def _use(i: str) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": i, "name": "t", "input": {}}}


def _result(i: str) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": i, "status": "success", "content": [{"text": "ok"}]}}


_blocks = st.sampled_from(
    [
        {"text": "hi"},
        {"text": "   "},
        {"text": 42},
        _use("a"),
        _use("b"),
        _result("a"),
        _result("b"),
        _result("zzz"),
        {"toolResult": {"toolUseId": "a", "content": [{"text": 5}]}},
        {"mystery": 1},
        "not a block",
    ]
)
_messages = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.lists(_blocks, max_size=4)}
    ),
    st.sampled_from([None, {"role": "user"}, {"role": "user", "content": "plain"}]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_messages, max_size=8))
def test_any_damaged_history_is_repaired_to_a_valid_one(history: list[Any]) -> None:
    before = copy.deepcopy(history)
    repaired = repair_history(history)
    assert validate_history(repaired) == []
    assert history == before  # the input is not modified


def test_a_valid_history_comes_back_equal() -> None:
    history = [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [{"text": "calling"}, _use("a"), _use("b")]},
        {"role": "user", "content": [_result("a"), _result("b"), {"text": "and"}]},
        {"role": "assistant", "content": [{"text": "done"}]},
    ]
    assert validate_history(history) == []
    assert repair_history(history) == history


def test_the_documented_repairs() -> None:
    damaged = [
        {"role": "assistant", "content": [{"text": "hello"}]},  # starts with the assistant
        {"role": "assistant", "content": [_use("a")]},  # same-role neighbour
        {"role": "user", "content": [_result("zzz"), {"text": ""}]},  # orphan result, blank
    ]
    repaired = repair_history(damaged)
    assert validate_history(repaired) == []
    assert repaired[0] == {"role": "user", "content": [{"text": "(conversation start)"}]}
    assert repaired[1]["content"] == [{"text": "hello"}, _use("a")]
    results = [b["toolResult"] for b in repaired[2]["content"] if "toolResult" in b]
    assert [(r["toolUseId"], r["status"]) for r in results] == [("a", "error")]
    assert {"text": "(empty)"} in repaired[2]["content"]


def test_a_repaired_history_is_accepted_and_continued() -> None:
    damaged = [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [_use("a")]},
    ]
    with pytest.raises(UsageError, match="no toolResult"):
        Agent(ScriptedModel(["fine"]), messages=damaged)
    agent = Agent(ScriptedModel(["fine"]), messages=repair_history(damaged))
    assert agent.invoke("go on").text == "fine"
    assert validate_history(agent.messages) == []


@pytest.mark.parametrize("bad", ["text", {"role": "user"}, 5, None])
def test_not_a_list_is_a_usage_error(bad: Any) -> None:
    with pytest.raises(UsageError):
        repair_history(bad)
