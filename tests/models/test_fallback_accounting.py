"""FallbackModel's accounting (issue 31 item 6, loose ends): a cost limit prices each call
with the model that answered it, and a call's span names the models (the one asked first,
the one that answered) and where it was sent.

Before: ``UsageLimits(cost_usd=...)`` refused a FallbackModel outright ("needs a model
genai-prices can price"), and the chat span of a call through the chain had no
``gen_ai.request.model``, no ``server.address``, a provider named ``fallbackmodel``, and no
``gen_ai.response.model`` when the model that answered was Bedrock (its wire names none).

Real servers: the primary is an ``AnthropicModel`` answering 429 before its content (the
chain moves on at once), the fallback the model that answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_sync import Agent, UsageError, UsageLimits, _tracing, tool, validate_history
from agent_sync.models import AnthropicModel, BedrockModel, FallbackModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from tests.models._bedrock_fixtures import aws_session

KEY = "sk-ant-accounting-test-secret"
# genai-prices, 1000 input and 100 output tokens: claude-opus-4 $0.0225, claude-sonnet-4 $0.0045
OPUS, SONNET = "claude-opus-4-20250514", "claude-sonnet-4-20250514"
USAGE = {"inputTokens": 1000, "outputTokens": 100}

ran: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    ran.append(text)
    return "noted"


@pytest.fixture
def servers() -> Iterator[tuple[AnthropicServer, AnthropicServer]]:
    ran.clear()
    with AnthropicServer() as first, AnthropicServer() as second:
        yield first, second


@pytest.fixture
def models() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for model in made:
        model.close()


def _anthropic(server: AnthropicServer, model_id: str, models: list[Any]) -> AnthropicModel:
    model = AnthropicModel(model_id, client_args={"base_url": server.base_url, "api_key": KEY})
    models.append(model)
    return model


def _call(text: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "note", "input": {"text": text}}], "usage": USAGE}


def test_cost_is_priced_with_the_cheaper_model_that_answered(
    servers: tuple[AnthropicServer, AnthropicServer], models: list[Any]
) -> None:
    # opus fails, sonnet answers both calls: $0.009 < $0.01. Priced as opus (the chain's
    # first) the first answer alone ($0.0225) would stop the run.
    failing, answering = servers
    failing.add_turns({"status": 429}, {"status": 429})
    answering.add_turns(_call("a"), {"text": "done", "usage": USAGE})
    chain = FallbackModel(_anthropic(failing, OPUS, models), _anthropic(answering, SONNET, models))
    agent = Agent(chain, tools=[note], usage_limits=UsageLimits(cost_usd=0.01))
    result = agent.invoke("go")
    assert (result.stop_reason, result.usage_limit, ran) == ("end_turn", None, ["a"])
    assert result.metrics.model_ids == (SONNET, SONNET)


def test_cost_is_priced_with_the_dearer_model_that_answered(
    servers: tuple[AnthropicServer, AnthropicServer], models: list[Any]
) -> None:
    # sonnet fails, opus answers: $0.0225 passes $0.01, so the call it asked for never runs.
    # Priced as sonnet ($0.0045) the tool would run and a second call be made.
    failing, answering = servers
    failing.add_turns({"status": 429})
    answering.add_turns(_call("a"), "never asked")
    chain = FallbackModel(_anthropic(failing, SONNET, models), _anthropic(answering, OPUS, models))
    agent = Agent(chain, tools=[note], usage_limits=UsageLimits(cost_usd=0.01))
    result = agent.invoke("go")
    assert (result.stop_reason, result.usage_limit, ran) == ("usage_limit", "cost_usd", [])
    assert len(answering.requests) == 1
    validate_history(agent.messages)


def test_a_chain_with_a_model_genai_prices_cannot_price_is_refused(
    servers: tuple[AnthropicServer, AnthropicServer], models: list[Any]
) -> None:
    first, second = servers
    chain = FallbackModel(
        _anthropic(first, SONNET, models), _anthropic(second, "claude-from-the-future-9", models)
    )
    with pytest.raises(UsageError, match="claude-from-the-future-9"):
        Agent(chain, usage_limits=UsageLimits(cost_usd=1.0))
    assert first.requests == [] and second.requests == []


def test_a_call_through_the_chain_names_its_models_and_server(models: list[Any]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracing.use_provider(provider)
    try:
        with AnthropicServer([{"status": 429}]) as failing, BedrockServer(["hello"]) as bedrock:
            session = aws_session("AKIDACCOUNTING", "accounting-secret")
            answering = BedrockModel(
                "bedrock-test-model", endpoint_url=bedrock.base_url, boto_session=session
            )
            models.append(answering)
            chain = FallbackModel(_anthropic(failing, "claude-primary", models), answering)
            Agent(chain).invoke("hi")
            port = int(bedrock.base_url.rstrip("/").rsplit(":", 1)[1])
    finally:
        _tracing.use_provider(None)
    (chat,) = [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]
    found = dict(chat.attributes or {})
    assert chat.name == "chat claude-primary"
    assert found["gen_ai.request.model"] == "claude-primary"  # asked first
    # who answered: the model, its provider and its server
    assert found["gen_ai.response.model"] == "bedrock-test-model"
    assert found["gen_ai.provider.name"] == "aws.bedrock"
    assert (found["server.address"], found["server.port"]) == ("127.0.0.1", port)
