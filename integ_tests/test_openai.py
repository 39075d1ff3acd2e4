"""OpenAIModel against a real OpenAI-compatible server. Skipped unless OPENAI_API_KEY is set.

Environment: ``OPENAI_API_KEY``; optional ``OPENAI_BASE_URL`` (e.g. a vLLM or Ollama server,
which then needs any non-empty key) and ``AGENT_SYNC_OPENAI_MODEL`` (default gpt-4o-mini).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from agent_sync import Agent, AgentResult, tool, validate_history
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import OpenAIModel

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY"),
]

MODEL_ID = os.environ.get("AGENT_SYNC_OPENAI_MODEL", "gpt-4o-mini")
BASE_URL = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")


@pytest.fixture
def model() -> Iterator[OpenAIModel]:
    m = OpenAIModel(MODEL_ID, base_url=BASE_URL, temperature=0, max_tokens=400)
    yield m
    m.close()


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Oslo".
    """
    return {"city": city, "temperature_c": 17, "sky": "overcast"}


def test_text(model: OpenAIModel) -> None:
    agent = Agent(model, system_prompt="Answer with one word.")
    result = agent.invoke("What is the capital of Norway?")
    assert result.stop_reason == "end_turn"
    assert "oslo" in result.text.lower()
    assert result.usage["inputTokens"] > 0 and result.usage["outputTokens"] > 0
    assert validate_history(agent.messages) == []


def test_tool_round_trip(model: OpenAIModel) -> None:
    agent = Agent(model, tools=[get_weather], system_prompt="Use tools when useful.")
    result = agent.invoke("What is the temperature in Oslo right now? Use the tool.")
    assert result.stop_reason == "end_turn"
    assert "17" in result.text
    assert any("toolUse" in block for message in agent.messages for block in message["content"])
    assert validate_history(agent.messages) == []


def test_cancel_while_streaming(model: OpenAIModel) -> None:
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

    thread = threading.Thread(target=consume, name="integ-openai-stream")
    thread.start()
    assert first_text.wait(60)
    cancelled_at = time.monotonic()
    assert agent.cancel("integ")
    thread.join(10)
    assert time.monotonic() - cancelled_at < 2
    result = box["result"]
    assert result.stop_reason == "cancelled"
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert validate_history(agent.messages) == []
    assert "oslo" in agent.invoke("Say only: Oslo").text.lower()  # ready for the next call
