"""One conversation switching providers mid-way stays valid on every wire: Anthropic ->
OpenAI Responses -> Bedrock -> OpenAI Chat Completions -> Responses -> Anthropic, with tool
calls, an image and each provider's reasoning.

Each local server refuses what its real API refuses (an unanswered call, a reasoning item it
never issued or without its following item...), so every call succeeding is the proof; the
bodies are also checked for what each wire must drop: another provider's reasoning token is
never sent (Anthropic and Bedrock would reject a Responses reasoning item's token as a bad
signature, the Responses API an Anthropic signature as an unknown item).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.messages import Message
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel, OpenAIResponsesModel
from agent_sync.testing import AnthropicServer, BedrockServer, OpenAIServer, ResponsesServer

from ._bedrock_fixtures import aws_session

PNG = b"\x89PNG\r\n\x1a\n switch-test"


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temperature_c": 21}


def _call(city: str) -> dict[str, Any]:
    return {"name": "get_weather", "input": {"city": city}}


@pytest.fixture
def servers() -> Iterator[dict[str, Any]]:
    with AnthropicServer() as anthropic_server, BedrockServer() as bedrock_server, \
            OpenAIServer() as chat_server, ResponsesServer() as responses_server:  # fmt: skip
        yield {"anthropic": anthropic_server, "bedrock": bedrock_server, "chat": chat_server,
               "responses": responses_server}  # fmt: skip


def test_a_conversation_switching_providers_stays_valid_on_every_wire(
    servers: dict[str, Any],
) -> None:
    anthropic_server, bedrock_server = servers["anthropic"], servers["bedrock"]
    chat_server, responses_server = servers["chat"], servers["responses"]
    models = {
        "anthropic": AnthropicModel("claude-test", client_args={
            "base_url": anthropic_server.base_url, "api_key": "sk-ant-switch"}),
        "bedrock": BedrockModel("test-model", endpoint_url=bedrock_server.base_url,
                                boto_session=aws_session("AKIDSWITCH", "switch-secret")),
        "chat": OpenAIModel("gpt-test", base_url=chat_server.url, api_key="sk-chat-switch"),
        "responses": OpenAIResponsesModel("gpt-test", base_url=responses_server.url,
                                          api_key="sk-resp-switch", store=False),
    }  # fmt: skip
    anthropic_server.add_turns({"reasoning": "Claude thinks", "tool_calls": [_call("Oslo")]},
                               "Oslo: 21 C.", "Anthropic again.")  # fmt: skip
    responses_server.add_turns(
        {"reasoning": "GPT thinks", "text": "Checking.", "tool_calls": [_call("Bergen")]},
        {"reasoning": "Done thinking", "text": "Bergen: 21 C."},
        "Responses again.",
    )
    bedrock_server.add_turns({"reasoning": "Bedrock thinks", "text": "Bedrock here."})
    chat_server.add_turns({"reasoning": "chat thinks", "text": "Chat here."})
    history: list[Message] = []
    prompts = [
        ("anthropic", [{"text": "What is in this picture, and the weather in Oslo?"},
                       {"image": {"format": "png", "source": {"bytes": PNG}}}]),
        ("responses", "And in Bergen?"),
        ("bedrock", "Summarise."),
        ("chat", "Shorter."),
        ("responses", "Once more."),
        ("anthropic", "Last word?"),
    ]  # fmt: skip
    try:
        for name, prompt in prompts:
            agent = Agent(models[name], tools=[get_weather], messages=history)
            result = agent.invoke(prompt)
            assert result.stop_reason == "end_turn", (name, result.stop_reason)
            history = agent.messages
            assert validate_history(history) == [], name
    finally:
        for model in models.values():
            model.close()
    assert result.text == "Anthropic again."

    # the Responses API got the image, Anthropic's call and result, never Claude's reasoning
    first = responses_server.requests[0].body["input"]
    assert first[0]["content"][1]["type"] == "input_image"
    assert [i["type"] for i in first].count("reasoning") == 0
    assert first[1]["type"] == "function_call" and first[2]["type"] == "function_call_output"
    # ...and, switched back, its own two reasoning items each with the item that followed
    later = responses_server.requests[2].body["input"]
    reasoning = [p for p, item in enumerate(later) if item["type"] == "reasoning"]
    assert len(reasoning) == 2
    assert all(later[p + 1].get("id") for p in reasoning)

    # Anthropic and Bedrock never got a Responses reasoning token as a signature
    def signatures(body: Any) -> list[str]:
        return [s for s in _walk(body, "signature") if isinstance(s, str)]

    for request in [*anthropic_server.requests, *bedrock_server.requests]:
        assert not any(":" in s for s in signatures(request.body))
    assert "c2lnbmF0dXJl" in signatures(anthropic_server.requests[-1].body)  # its own: kept
    # Chat Completions got no reasoning at all, and the image as a data URL
    chat_body = json.dumps(chat_server.requests[0].body)
    assert "GPT thinks" not in chat_body and "Claude thinks" not in chat_body
    assert "data:image/png;base64," in chat_body


def _walk(node: Any, key: str) -> Iterator[Any]:
    """Every value stored under ``key`` anywhere in ``node``."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key:
                yield value
            yield from _walk(value, key)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, key)
