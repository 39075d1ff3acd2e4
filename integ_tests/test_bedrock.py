"""BedrockModel against the real Bedrock runtime. Skipped without AWS credentials + AWS_REGION.

Environment: AWS credentials (environment, profile or role) and ``AWS_REGION``; optional
``AGENT_SYNC_BEDROCK_MODEL`` (default: a Claude Haiku inference profile, which needs model
access enabled in the account).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from agent_sync import Agent, AgentResult, tool, validate_history
from agent_sync.events import Done
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import BedrockModel


def _has_credentials() -> bool:
    if not os.environ.get("AWS_REGION"):
        return False
    try:
        import boto3

        return boto3.Session().get_credentials() is not None
    except Exception:  # noqa: BLE001 (no usable configuration: skip)
        return False


pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(not _has_credentials(), reason="needs AWS credentials and AWS_REGION"),
]

MODEL_ID = os.environ.get("AGENT_SYNC_BEDROCK_MODEL", "us.anthropic.claude-3-5-haiku-20241022-v1:0")


@pytest.fixture
def model() -> Iterator[BedrockModel]:
    bedrock = BedrockModel(MODEL_ID, temperature=0, max_tokens=400)
    yield bedrock
    bedrock.close()


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Oslo".
    """
    return {"city": city, "temperature_c": 17, "sky": "overcast"}


def test_text(model: BedrockModel) -> None:
    agent = Agent(model, system_prompt="Answer with one word.")
    result = agent.invoke("What is the capital of Norway?")
    assert result.stop_reason == "end_turn"
    assert "oslo" in result.text.lower()
    assert result.usage["inputTokens"] > 0 and result.usage["outputTokens"] > 0


def test_tool_round_trip(model: BedrockModel) -> None:
    agent = Agent(model, tools=[get_weather], system_prompt="Use tools when they help.")
    result = agent.invoke("What is the weather in Oslo right now? Use the tool.")
    assert result.stop_reason == "end_turn"
    assert "17" in result.text
    assert any("toolUse" in block for m in agent.messages for block in m["content"])
    assert validate_history(agent.messages) == []


def test_non_streaming_converse() -> None:
    plain = BedrockModel(MODEL_ID, streaming=False, temperature=0, max_tokens=100)
    try:
        result = Agent(plain).invoke("Say hello in Norwegian, one word.")
    finally:
        plain.close()
    assert result.stop_reason == "end_turn" and result.text.strip()


def test_cancel_while_streaming(model: BedrockModel) -> None:
    agent = Agent(model)
    first_text = threading.Event()
    box: dict[str, object] = {}

    def run() -> None:
        for event in agent.stream("Count slowly from 1 to 300, one number per line."):
            if event.type == "text":
                first_text.set()
            if isinstance(event, Done):
                box["result"] = event.result

    thread = threading.Thread(target=run, name="integ-bedrock-stream")
    thread.start()
    assert first_text.wait(60)
    started = time.monotonic()
    assert agent.cancel("integ") is True
    thread.join(10)
    elapsed = time.monotonic() - started

    result = box["result"]
    assert isinstance(result, AgentResult) and result.stop_reason == "cancelled"
    assert elapsed < 2.0
    assert agent.messages[-1]["content"][-1] == {"text": CANCELLED_TEXT}
    assert validate_history(agent.messages) == []
    # The conversation goes on after a cancel, on the same model.
    assert agent.invoke("Now just say: done.").stop_reason == "end_turn"
