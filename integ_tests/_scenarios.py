"""The scenarios every provider must pass against its real service.

Each provider's test module builds its model (and skips without credentials), then calls
these, so the providers are held to exactly the same behaviour: a text answer with usage,
a tool round trip, and a cancel while streaming that returns fast over real TLS and leaves
the agent usable.
"""

from __future__ import annotations

import threading
import time

from agent_sync import Agent, AgentResult, tool, validate_history
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import Model

CANCEL_BOUND_S = 2.0
"""Generous bound on cancel() -> return over the internet (the benches measure the real figure)."""


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Oslo".
    """
    return {"city": city, "temperature_c": 17, "sky": "overcast"}


def check_text(model: Model) -> None:
    """A one-word answer, with usage counted."""
    agent = Agent(model, system_prompt="Answer with one word.")
    result = agent.invoke("What is the capital of Norway?")
    assert result.stop_reason == "end_turn"
    assert "oslo" in result.text.lower()
    assert result.usage["inputTokens"] > 0 and result.usage["outputTokens"] > 0
    assert validate_history(agent.messages) == []


def check_tool_round_trip(model: Model) -> None:
    """The model calls the tool, gets its result back, and uses it."""
    agent = Agent(model, tools=[get_weather], system_prompt="Use tools when useful.")
    result = agent.invoke("What is the temperature in Oslo right now? Use the tool.")
    assert result.stop_reason == "end_turn"
    assert "17" in result.text
    assert any("toolUse" in block for message in agent.messages for block in message["content"])
    assert validate_history(agent.messages) == []


def check_cancel_while_streaming(model: Model) -> None:
    """Cancel from another thread once text flows; the same agent then answers again."""
    agent = Agent(model)
    first_text = threading.Event()
    box: dict[str, AgentResult] = {}

    def consume() -> None:
        stream = agent.stream("Count slowly from 1 to 300, one number per line.")
        for event in stream:
            if event.type == "text":
                first_text.set()
        assert stream.result is not None
        box["result"] = stream.result

    thread = threading.Thread(target=consume, name="integ-stream")
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
    assert elapsed < CANCEL_BOUND_S, f"cancel took {elapsed:.3f} s"
    assert validate_history(agent.messages) == []
    # the same model (and connection pool) serves the next call after the abort
    assert agent.invoke("Now just say: done.").stop_reason == "end_turn"
    assert validate_history(agent.messages) == []
