"""AnthropicModel against the real Anthropic API. Skipped unless ANTHROPIC_API_KEY is set.

Environment: ``ANTHROPIC_API_KEY``; optional ``AGENT_SYNC_ANTHROPIC_MODEL`` (default
claude-haiku-4-5) and ``ANTHROPIC_BASE_URL`` (read by the SDK).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agent_sync import Agent, validate_history
from agent_sync.models import AnthropicModel
from integ_tests._scenarios import (
    check_cancel_while_streaming,
    check_text,
    check_tool_round_trip,
    get_weather,
)

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="needs ANTHROPIC_API_KEY"),
]

MODEL_ID = os.environ.get("AGENT_SYNC_ANTHROPIC_MODEL", "claude-haiku-4-5")


@pytest.fixture
def model() -> Iterator[AnthropicModel]:
    m = AnthropicModel(MODEL_ID, max_tokens=400, temperature=0)
    yield m
    m.close()


def test_thinking_round_trip() -> None:
    thinking = AnthropicModel(
        MODEL_ID, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    try:
        agent = Agent(thinking, tools=[get_weather])
        result = agent.invoke("Use the tool for Oslo's weather, then say if a coat is needed.")
        assert result.stop_reason == "end_turn"
        assert any(
            "reasoningContent" in block
            for message in agent.messages
            for block in message["content"]
        )
        assert validate_history(agent.messages) == []
    finally:
        thinking.close()


def test_text(model: AnthropicModel) -> None:
    check_text(model)


def test_tool_round_trip(model: AnthropicModel) -> None:
    check_tool_round_trip(model)


def test_cancel_while_streaming(model: AnthropicModel) -> None:
    check_cancel_while_streaming(model)
