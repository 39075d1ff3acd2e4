"""Issue 10 item 7: prompts and histories are checked at the edge.

A bad prompt or history raises ``UsageError`` naming the first problem, and nothing is
touched: the history is as it was, the agent is idle, the next call works.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent_sync import Agent, UsageError
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import assert_valid

HISTORY: list[Any] = [
    {"role": "user", "content": [{"text": "hi"}]},
    {"role": "assistant", "content": [{"text": "hello"}]},
]

BAD_PROMPTS: list[tuple[Any, str]] = [
    ([{"toolResult": {"toolUseId": "t1", "status": "success", "content": []}}], "toolResult"),
    ([{"toolUse": {"toolUseId": "t1", "name": "x", "input": {}}}], "toolUse"),
    ([{"reasoningContent": {"reasoningText": {"text": "hm"}}}], "reasoningContent"),
    ([{"text": 42}], "text must be a string, not int"),
    ([{"text": "ok"}, {"text": None}], "prompt block 1: text must be a string"),
    ([{"video_of_cat": {}}], "unknown block kind 'video_of_cat'"),
    ([{"text": "a", "image": {}}], "exactly one key"),
    (["just a string in a list"], "exactly one key"),
    ([{"image": {"format": "png"}}], "image needs a source"),
    ([{"document": {"format": "pdf", "source": {"bytes": b"%PDF"}}}], "document needs a 'name'"),
    ([{"text": "   "}], "the prompt is empty"),
    ([], "non-empty list"),
    ({"text": "a dict, not a list"}, "non-empty list"),
]


@pytest.mark.parametrize(("prompt", "named"), BAD_PROMPTS)
def test_a_bad_prompt_raises_usage_error_and_touches_nothing(prompt: Any, named: str) -> None:
    model = ScriptedModel(["fine"])
    agent = Agent(model, messages=HISTORY)
    before = copy.deepcopy(agent.messages)
    with pytest.raises(UsageError, match="invalid prompt|empty|non-empty") as caught:
        agent.invoke(prompt)
    assert named in str(caught.value)
    assert agent.messages == before
    assert not model.calls
    assert_valid(agent)
    assert agent.invoke("now a good one").text == "fine"  # the agent is free


def test_good_block_prompts_are_accepted_and_copied() -> None:
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}
    prompt: list[Any] = [{"text": "look"}, image]
    agent = Agent(ScriptedModel(["seen"]))
    assert agent.invoke(prompt).text == "seen"
    prompt[0]["text"] = "changed later"
    assert agent.messages[0]["content"][0] == {"text": "look"}
    assert_valid(agent)


BAD_HISTORIES: list[tuple[Any, str]] = [
    ([{"role": "user", "content": [{"text": 42}]}], "message 0 block 0: text must be a string"),
    (
        [
            {"role": "user", "content": [{"text": "q"}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "a", "name": "t", "input": {}}}],
            },
            {
                "role": "user",
                "content": [{"toolResult": {"toolUseId": "a", "content": [{"text": 5}]}}],
            },
        ],
        "toolResult content piece 0: text must be a string",
    ),
    ([{"role": "user", "content": [{"mystery": {}}]}], "unknown block kind 'mystery'"),
    ("not a list", "a history is a list of messages"),
]


@pytest.mark.parametrize(("history", "named"), BAD_HISTORIES)
def test_a_bad_history_is_refused_at_construction_and_assignment(history: Any, named: str) -> None:
    with pytest.raises(UsageError, match="invalid history") as caught:
        Agent(ScriptedModel([]), messages=history)
    assert named in str(caught.value)

    agent = Agent(ScriptedModel(["ok"]), messages=HISTORY)
    with pytest.raises(UsageError, match="invalid history") as caught:
        agent.messages = history
    assert named in str(caught.value)
    assert agent.messages == HISTORY  # nothing touched
    assert agent.invoke("again").text == "ok"
