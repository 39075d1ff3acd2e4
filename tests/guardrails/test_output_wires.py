"""The output stage on the three wires (DESIGN 13): the real anthropic, boto3 and openai
clients against the local wire servers of :mod:`agent_sync.testing`. A secret split at each
chunk boundary never reaches an event or the history; the history after the trip (and
after a trip that drops a tool call) is replayed through the same server, which refuses what
the real API refuses, and the next invoke works.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.events import Done, TextDelta
from agent_sync.guardrails import STOPPED_TEXT, PatternGuard
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.openai_server import OpenAIServer
from tests.models._bedrock_fixtures import aws_session

SECRET = "sk-" + "Z9y8X7w6V5u4T3s2R1q0P"
GUARD = PatternGuard(r"sk-[A-Za-z0-9]{20,}", max_match=40)


@tool
def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    raise AssertionError("a tripped message's call never runs")


Wire = tuple[Any, Any]


def _anthropic() -> Iterator[Wire]:
    with AnthropicServer() as server:
        model = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": "guard-key"}
        )
        yield server, model
        model.close()


def _bedrock() -> Iterator[Wire]:
    with BedrockServer() as server:
        session = aws_session("AKIDGUARDTEST", "guard-secret")
        model = BedrockModel(
            "test-model", endpoint_url=server.base_url, boto_session=session, read_timeout=60
        )
        yield server, model
        model.close()


def _openai() -> Iterator[Wire]:
    with OpenAIServer() as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="guard-key", timeout=(5, 30))
        yield server, model
        model.close()


WIRES: dict[str, Callable[[], Iterator[Wire]]] = {
    "anthropic": _anthropic,
    "bedrock": _bedrock,
    "openai": _openai,
}


@pytest.fixture(params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    yield from WIRES[request.param]()


def test_a_split_secret_never_leaves_and_the_history_replays(wire: Wire) -> None:
    server, model = wire
    agent = Agent(model, tools=[lookup], guardrails=[GUARD])
    for chunk_size in (1, 4, 7, 25):
        for offset in (0, 3, 10):
            before = "a" * offset
            server.add_turns(
                {
                    "text": before + SECRET + " after",
                    "chunk_size": chunk_size,
                    "tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}],
                }
            )
            events = list(agent.stream("go"))
            released = "".join(e.text for e in events if isinstance(e, TextDelta))
            assert before.startswith(released), (chunk_size, offset)
            done = events[-1]
            assert isinstance(done, Done) and done.result.stop_reason == "guardrail"
            shown = repr(events) + repr(agent.messages)
            assert "sk-" not in shown and "after" not in shown
            assert agent.messages[-1]["content"][-1] == {"text": STOPPED_TEXT}
            assert validate_history(agent.messages) == []
    # the whole history, trips and all, goes back through the provider's rules
    server.add_turns("all good")
    result = agent.invoke("replay")
    assert result.stop_reason == "end_turn" and result.text == "all good"
    assert "sk-" not in repr(server.requests[-1].body)
