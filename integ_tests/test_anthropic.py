"""AnthropicModel against the real Anthropic API. Skipped unless ANTHROPIC_API_KEY is set.

Environment: ``ANTHROPIC_API_KEY``; optional ``AGENT_SYNC_ANTHROPIC_MODEL`` (default
claude-haiku-4-5) and ``ANTHROPIC_BASE_URL`` (read by the SDK).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from agent_sync import Agent, AgentResult, tool, validate_history
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import AnthropicModel

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


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Oslo".
    """
    return {"city": city, "temperature_c": 17, "sky": "overcast"}


def test_text(model: AnthropicModel) -> None:
    agent = Agent(model, system_prompt="Answer with one word.")
    result = agent.invoke("What is the capital of Norway?")
    assert result.stop_reason == "end_turn"
    assert "oslo" in result.text.lower()
    assert result.usage["inputTokens"] > 0 and result.usage["outputTokens"] > 0
    assert validate_history(agent.messages) == []


def test_tool_round_trip(model: AnthropicModel) -> None:
    agent = Agent(model, tools=[get_weather], system_prompt="Use tools when useful.")
    result = agent.invoke("What is the temperature in Oslo right now? Use the tool.")
    assert result.stop_reason == "end_turn"
    assert "17" in result.text
    assert any("toolUse" in block for message in agent.messages for block in message["content"])
    assert validate_history(agent.messages) == []


def test_cancel_while_streaming(model: AnthropicModel) -> None:
    agent = Agent(model)
    first_text = threading.Event()
    box: dict[str, AgentResult] = {}

    def consume() -> None:
        stream = agent.stream("Count from 1 to 300, one number per line.")
        for event in stream:
            if event.type == "text":
                first_text.set()
        assert stream.result is not None
        box["result"] = stream.result

    thread = threading.Thread(target=consume, name="integ-anthropic-stream")
    thread.start()
    assert first_text.wait(60)
    cancelled_at = time.monotonic()
    assert agent.cancel("integ") is True
    thread.join(10)
    assert not thread.is_alive()
    elapsed = time.monotonic() - cancelled_at
    result = box["result"]
    assert result.stop_reason == "cancelled" and result.cancel_reason == "integ"
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert elapsed < 2.0, f"cancel took {elapsed:.3f} s over TLS"
    assert validate_history(agent.messages) == []
    # The same model (and pool) serves the next call after the abort.
    assert agent.invoke("Say OK.").stop_reason == "end_turn"
    assert validate_history(agent.messages) == []


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
