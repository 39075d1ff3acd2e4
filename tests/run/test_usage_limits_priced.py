"""A cost limit counts the dollars a run spent before it was paused and resumed by another
agent (a new request's, on the same store): the run's state carries ``cost_usd`` as it
carries its usage and tool calls, and ``restore`` takes it back. Priced by genai-prices from
a real ``AnthropicModel`` talking to the local Anthropic wire server.

claude-sonnet-4, 1000 input and 100 output tokens: $0.0045 a call, so two calls ($0.009)
pass a $0.008 limit and one does not: a resumed run that counted from zero would end
``end_turn``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, UsageLimits, tool, validate_history
from agent_sync.models import AnthropicModel
from agent_sync.stores import MemoryRunStore
from agent_sync.testing.anthropic_server import AnthropicServer

pytest.importorskip("genai_prices", reason="pip install -e '.[prices]'")

KEY = "sk-ant-priced-resume-test-secret"
SONNET = "claude-sonnet-4-20250514"
USAGE = {"inputTokens": 1000, "outputTokens": 100}
LIMITS = UsageLimits(cost_usd=0.008)


@tool(requires_approval=True)
def send(text: str) -> str:
    """Send a message.

    Args:
        text: The message.
    """
    return "sent"


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as running:
        yield running


def _agent(server: AnthropicServer, store: MemoryRunStore, made: list[Any]) -> Agent:
    model = AnthropicModel(SONNET, client_args={"base_url": server.base_url, "api_key": KEY})
    made.append(model)
    return Agent(model, tools=[send], store=store, conversation_id="c1", usage_limits=LIMITS)


def test_a_cost_limit_counts_what_the_run_spent_before_its_pause(
    server: AnthropicServer,
) -> None:
    server.add_turns(
        {"tool_calls": [{"name": "send", "input": {"text": "hi"}}], "usage": USAGE},
        {"text": "sent it", "usage": USAGE},
    )
    store, made = MemoryRunStore(), list[Any]()
    try:
        paused = _agent(server, store, made).invoke("send hi")
        (request,) = paused.approvals
        result = _agent(server, store, made).resume({request.id: True})
    finally:
        for model in made:
            model.close()
    assert (result.stop_reason, result.usage_limit) == ("usage_limit", "cost_usd")
    assert result.text == "sent it"  # a final answer is kept; the run names the limit
    assert validate_history(list(store.load("c1").messages)) == []
