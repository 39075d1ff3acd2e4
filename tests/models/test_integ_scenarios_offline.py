"""The integration scenarios (integ_tests/_scenarios.py), run offline on every provider.

The same checks the real services must pass, here through the real SDK clients against the
local protocol-faithful servers, so the scenarios cannot rot unnoticed between runs with
credentials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_sync.models import (
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    Model,
    OpenAIModel,
    OpenAIResponsesModel,
)
from agent_sync.testing import (
    AnthropicServer,
    BedrockServer,
    GeminiServer,
    OpenAIServer,
    ResponsesServer,
    ScriptedServer,
)
from integ_tests._scenarios import (
    check_cancel_while_streaming,
    check_text,
    check_tool_round_trip,
)

from ._bedrock_fixtures import aws_session

COUNTING = {"text": "\n".join(str(n) for n in range(1, 301)), "chunk_size": 4, "chunk_delay": 0.002}

SCRIPTS: dict[str, list[Any]] = {
    "text": ["Oslo"],
    "tool": [
        {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
        "It is 17 degrees C and overcast in Oslo.",
    ],
    "cancel": [COUNTING, "done"],
}

CHECKS: dict[str, Callable[[Model], None]] = {
    "text": check_text,
    "tool": check_tool_round_trip,
    "cancel": check_cancel_while_streaming,
}


def _anthropic(server: ScriptedServer) -> Model:
    return AnthropicModel("claude-test", client_args={"base_url": server.base_url, "api_key": "k"})


def _openai(server: ScriptedServer) -> Model:
    return OpenAIModel("gpt-test", base_url=f"{server.base_url}/v1", api_key="k", timeout=(5, 30))


def _responses(server: ScriptedServer) -> Model:
    url = f"{server.base_url}/v1"
    return OpenAIResponsesModel("gpt-test", base_url=url, api_key="k", timeout=(5, 30))


def _bedrock(server: ScriptedServer) -> Model:
    return BedrockModel(
        "test-model", endpoint_url=server.base_url, boto_session=aws_session("AKIDSCENARIO", "s")
    )


def _gemini(server: ScriptedServer) -> Model:
    return GeminiModel("gemini-test", base_url=f"{server.base_url}/v1beta", api_key="k")


PROVIDERS: dict[str, tuple[type[ScriptedServer], Callable[[ScriptedServer], Model]]] = {
    "anthropic": (AnthropicServer, _anthropic),
    "openai": (OpenAIServer, _openai),
    "bedrock": (BedrockServer, _bedrock),
    "responses": (ResponsesServer, _responses),
    "gemini": (GeminiServer, _gemini),
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[ScriptedServer, Callable[[ScriptedServer], Model]]]:
    server_class, build = PROVIDERS[request.param]
    with server_class() as server:
        yield server, build


@pytest.mark.parametrize("scenario", sorted(CHECKS))
def test_scenario_passes_offline(
    provider: tuple[ScriptedServer, Callable[[ScriptedServer], Model]], scenario: str
) -> None:
    server, build = provider
    server.add_turns(*SCRIPTS[scenario])
    model = build(server)
    try:
        CHECKS[scenario](model)
    finally:
        close = getattr(model, "close", None)
        if close is not None:
            close()
