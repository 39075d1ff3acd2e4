"""The three wires of the output-stage tests: the real anthropic, boto3 and openai clients
against the local wire servers of :mod:`agent_sync.testing` (which refuse what the real
APIs refuse, so a history replayed through them is valid for that provider); and what
those tests share: the secret, its pattern, a tool a tripped message's call names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from agent_sync import tool
from agent_sync.guardrails import PatternGuard
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.openai_server import OpenAIServer
from tests.models._bedrock_fixtures import aws_session

__all__ = ["GUARD", "SECRET", "WIRES", "Wire", "lookup"]

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
"""``(server, model)``."""


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
    # response_format refused: the model falls back to the output tool, as a server
    # without it makes it do (for structured output; a plain call never sends it)
    with OpenAIServer(rejected_fields=["response_format"]) as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="guard-key", timeout=(5, 30))
        yield server, model
        model.close()


WIRES: dict[str, Callable[[], Iterator[Wire]]] = {
    "anthropic": _anthropic,
    "bedrock": _bedrock,
    "openai": _openai,
}
