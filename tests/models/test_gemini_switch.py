"""One conversation switching provider mid-way, Gemini among them (DESIGN 14): tool calls,
an image and reasoning made on one wire are mapped or dropped as the next wire requires, so
every wire's fake (each refusing what its real API refuses) accepts the whole history, and
no wire is sent another wire's reasoning signature."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.messages import Message
from agent_sync.models import AnthropicModel, BedrockModel, GeminiModel, Model, OpenAIModel
from agent_sync.testing import AnthropicServer, BedrockServer, GeminiServer, OpenAIServer
from agent_sync.testing._http_server import ScriptedServer

from ._bedrock_fixtures import aws_session

PNG = b"\x89PNG\r\n\x1a\n-switch-test-image"


@tool
def get_weather(city: str) -> str:
    """Weather for a city.

    Args:
        city: City name.
    """
    return f"Mild in {city}."


def _turns(city: str, answer: str) -> list[dict[str, Any]]:
    call = {"name": "get_weather", "input": {"city": city}}
    return [{"reasoning": f"Look up {city}.", "tool_calls": [call]}, {"text": answer}]


Build = Callable[[ScriptedServer], Model]

WIRES: dict[str, tuple[Callable[[], ScriptedServer], Build]] = {
    "anthropic": (
        AnthropicServer,
        lambda s: AnthropicModel(
            "claude-test", client_args={"base_url": s.base_url, "api_key": "k"}
        ),
    ),
    "bedrock": (
        BedrockServer,
        lambda s: BedrockModel(
            "test-model", endpoint_url=s.base_url, boto_session=aws_session("AKIDSWITCH", "s")
        ),
    ),  # fmt: skip
    "openai": (
        OpenAIServer,
        lambda s: OpenAIModel(
            "gpt-test", base_url=f"{s.base_url}/v1", api_key="k", timeout=(5, 30)
        ),
    ),
    "gemini": (
        lambda: GeminiServer(api_key="k"),
        lambda s: GeminiModel(
            "gemini-3-pro-preview", base_url=f"{s.base_url}/v1beta", api_key="k", timeout=(5, 30)
        ),
    ),  # fmt: skip
}


@pytest.fixture
def wires() -> Iterator[dict[str, tuple[ScriptedServer, Model]]]:
    with ExitStack() as stack:
        opened: dict[str, tuple[ScriptedServer, Model]] = {}
        for name, (make, build) in WIRES.items():
            server = stack.enter_context(make())
            model = build(server)
            closer = getattr(model, "close", None)
            if closer is not None:
                stack.callback(closer)
            opened[name] = (server, model)
        yield opened


ROUTE = ["anthropic", "gemini", "bedrock", "gemini", "openai", "gemini", "anthropic"]


def test_a_conversation_switching_wires_stays_valid_on_every_wire(
    wires: dict[str, tuple[ScriptedServer, Model]],
) -> None:
    history: list[Message] = []
    for step, name in enumerate(ROUTE):
        server, model = wires[name]
        city = f"City{step}"
        server.add_turns(*_turns(city, f"{name} says mild in {city}."))
        prompt: Any = f"Weather in {city}?"
        if step == 0:
            prompt = [{"text": "What city is this? Then its weather."},
                      {"image": {"format": "png", "source": {"bytes": PNG}}}]  # fmt: skip
        agent = Agent(model, tools=[get_weather], messages=history)
        result = agent.invoke(prompt)
        assert result.stop_reason == "end_turn", (name, result.stop_reason)
        assert result.text == f"{name} says mild in {city}."
        history = agent.messages
        assert validate_history(history) == []
    for name, (server, _) in wires.items():
        for request in server.requests:
            _check_no_foreign_signature(name, server, request.body)
    gemini_server = wires["gemini"][0]
    last = gemini_server.requests[-1].body["contents"]
    assert any("inlineData" in part for part in last[0]["parts"])  # the image went along
    calls = [p for c in last for p in c["parts"] if "functionCall" in p]
    assert len(calls) == 6  # every wire's calls, each answered (else the fake refuses)


def _check_no_foreign_signature(name: str, server: ScriptedServer, body: Any) -> None:
    text = json.dumps(body, default=str)
    if name != "gemini":
        assert "gemini:" not in text, name  # no wire but Gemini gets Gemini's signatures
        return
    assert isinstance(server, GeminiServer)
    for content in body["contents"]:
        for part in content["parts"]:
            signature = part.get("thoughtSignature")
            if signature is not None:  # its own, untagged, or Google's placeholder
                assert signature == "skip_thought_signature_validator" or server.issued(signature)
            assert "signature" not in json.dumps(part.get("functionCall", {}))
