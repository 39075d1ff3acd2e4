"""Overflow recovery through the real Anthropic SDK: the local wire server refuses a request
over its window with the API's own 400 ("prompt is too long"); a context policy retries
once with at most half of the view, and remembers it; without one the error is raised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.context import PLACEHOLDER_TEXT, SUMMARY_HEADING, SlidingWindow, Summarizing
from agent_sync.errors import ContextWindowOverflowError
from agent_sync.messages import Message
from agent_sync.models import AnthropicModel
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer

pytestmark = pytest.mark.timeout(60)


def _history(pairs: int) -> list[Message]:
    history: list[Message] = []
    for i in range(pairs):
        history += [
            {"role": "user", "content": [{"text": f"question {i}"}]},
            {"role": "assistant", "content": [{"text": f"answer {i}"}]},
        ]
    return history


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    with AnthropicServer(max_messages=6) as srv:
        yield srv


@pytest.fixture
def model(server: AnthropicServer) -> Iterator[AnthropicModel]:
    instance = AnthropicModel(
        "claude-test", client_args={"base_url": server.base_url, "api_key": "sk-ctx"}
    )
    yield instance
    instance.close()


def _sent(server: AnthropicServer) -> list[list[dict[str, Any]]]:
    return [request.body["messages"] for request in server.requests]


def test_a_refused_view_is_retried_once_with_half_of_it(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("the answer", "the next answer")
    agent = Agent(model, messages=_history(5), context=SlidingWindow(max_messages=40))

    result = agent.invoke("question 5")

    assert result.text == "the answer"
    assert server.refused_too_long == 1
    first, retried = _sent(server)
    assert len(first) == 11 and len(retried) <= 5
    assert retried[-1]["content"][0]["text"] == "question 5"
    assert len(agent.messages) == 12 and validate_history(agent.messages) == []

    # the next call is sent within what fitted: no second refusal
    agent.invoke("question 6")
    assert server.refused_too_long == 1
    assert len(_sent(server)[-1]) <= 5


def test_a_view_starting_inside_a_tool_round_keeps_the_call_with_its_result(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    history = [*_history(1), {"role": "user", "content": [{"text": "use the tool"}]}]
    for i in range(4):  # one prompt, then four tool rounds
        history += [
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": f"t{i}", "name": "f", "input": {}}}],
            },
            {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": f"t{i}", "status": "success", "content": []}}
                ],
            },
        ]
    assert validate_history(history) == []  # 11 messages, the last a tool result
    server.add_turns("done")

    @tool
    def f() -> str:
        """The tool the history called (a request that defines no tools sends calls as
        text)."""
        return "ok"

    agent = Agent(model, tools=[f], messages=history, context=SlidingWindow())

    agent.invoke()  # answer the history as it is

    retried = _sent(server)[-1]
    assert server.refused_too_long == 1
    assert retried[0]["content"][0]["text"] == PLACEHOLDER_TEXT
    assert retried[1]["role"] == "assistant" and retried[1]["content"][0]["type"] == "tool_use"
    assert retried[2]["content"][0]["type"] == "tool_result"


def test_without_a_policy_the_overflow_is_raised_and_the_history_kept(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("never sent")
    agent = Agent(model, messages=_history(5))

    with pytest.raises(ContextWindowOverflowError, match="prompt is too long"):
        agent.invoke("question 5")

    assert len(server.requests) == 1
    assert len(agent.messages) == 11 and validate_history(agent.messages) == []
    assert agent.messages[-1]["content"][-1]["text"] == "question 5"


def test_a_policy_retries_only_once(server: AnthropicServer, model: AnthropicModel) -> None:
    server.max_messages = 0  # even half the view is too long
    server.add_turns("never sent")
    agent = Agent(model, messages=_history(5), context=SlidingWindow(max_messages=40))

    with pytest.raises(ContextWindowOverflowError):
        agent.invoke("question 5")

    assert server.refused_too_long == 2 and len(server.requests) == 2
    assert len(agent.messages) == 11 and validate_history(agent.messages) == []


def test_a_summarized_view_keeps_its_summary_when_it_is_halved(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.max_messages = 3
    server.add_turns("the answer")
    history: list[Message] = []
    for i in range(10):
        history += [
            {"role": "user", "content": [{"text": f"question {i} " + "q" * 300}]},
            {"role": "assistant", "content": [{"text": f"answer {i} " + "a" * 300}]},
        ]
    summarizer = ScriptedModel(["THE SUMMARY"], repeat=True)
    policy = Summarizing(summarizer, keep_last=6, trigger_tokens=500)
    agent = Agent(model, messages=history, context=policy)

    assert agent.invoke("question 10").text == "the answer"

    first, retried = _sent(server)
    assert server.refused_too_long == 1 and len(retried) <= len(first) // 2
    assert retried[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nTHE SUMMARY"
    assert retried[-1]["content"][-1]["text"] == "question 10"
    # the 14 older messages (about 4,400 characters) in pieces of about 2,000 (500 tokens)
    assert len(summarizer.calls) == 3
