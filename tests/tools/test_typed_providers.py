"""A typed tool call round trip through each provider's real SDK against its local wire
server: the request carries pydantic's schema in the provider's shape and the call's
``params``, the tool gets real objects (a model, a ``date``) and the ``deps``, its typed
return goes back as JSON, and the history is valid."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.openai_server import OpenAIServer

from ..models._bedrock_fixtures import aws_session


class Trip(BaseModel):
    origin: str
    destination: str


class Booking(BaseModel):
    reference: str
    when: datetime.date
    price: Decimal


SEEN: list[tuple[Trip, int, datetime.date, str]] = []


@tool
def book(
    trip: Trip,
    seats: Annotated[int, Field(ge=1, le=9)],
    when: datetime.date,
    context: ToolContext[str],
) -> Booking:
    """Book seats on a trip."""
    SEEN.append((trip, seats, when, context.deps))
    return Booking(reference="BK1", when=when, price=Decimal("99.50"))


CALL = {
    "id": "call_1",
    "name": "book",
    "input": {"trip": {"origin": "OSL", "destination": "BER"}, "seats": 2, "when": "2026-12-01"},
}
BOOKING = {"reference": "BK1", "when": "2026-12-01", "price": "99.50"}


@pytest.fixture(autouse=True)
def _clear() -> None:
    SEEN.clear()


def _run(model: Any) -> Agent:
    agent = Agent(model, tools=[book], deps="request-42")
    result = agent.invoke("Two seats OSL-BER on Dec 1", params={"temperature": 0})
    assert result.text == "Booked."
    assert SEEN == [
        (Trip(origin="OSL", destination="BER"), 2, datetime.date(2026, 12, 1), "request-42")
    ]
    assert validate_history(agent.messages) == []
    return agent


def _check_schema(schema: dict[str, Any]) -> None:
    assert schema["properties"]["seats"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert schema["properties"]["when"] == {"type": "string", "format": "date"}
    assert schema["properties"]["trip"] == {"$ref": "#/$defs/Trip"}
    assert schema["$defs"]["Trip"]["required"] == ["origin", "destination"]
    assert "context" not in schema["properties"]


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


@pytest.fixture
def bedrock_server() -> Iterator[BedrockServer]:
    with BedrockServer() as server:
        yield server


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


def test_anthropic(anthropic_server: AnthropicServer) -> None:
    anthropic_server.add_turns({"tool_calls": [CALL]}, "Booked.")
    model = AnthropicModel(
        "claude-test",
        client_args={"base_url": anthropic_server.base_url, "api_key": "sk-ant-typed"},
    )
    try:
        _run(model)
    finally:
        model.close()
    first, second = (r.body for r in anthropic_server.requests)
    _check_schema(first["tools"][0]["input_schema"])
    assert first["temperature"] == 0 and second["temperature"] == 0
    (result,) = second["messages"][-1]["content"]
    assert result["type"] == "tool_result" and not result.get("is_error")
    assert [json.loads(piece["text"]) for piece in result["content"]] == [BOOKING]


def test_bedrock(bedrock_server: BedrockServer) -> None:
    bedrock_server.add_turns({"tool_calls": [CALL]}, "Booked.")
    model = BedrockModel(
        "test-model",
        endpoint_url=bedrock_server.base_url,
        boto_session=aws_session("AKIDTYPEDTEST", "typed-secret"),
    )
    try:
        _run(model)
    finally:
        model.close()
    first, second = (r.body for r in bedrock_server.requests)
    _check_schema(first["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"])
    assert first["inferenceConfig"]["temperature"] == 0
    assert second["inferenceConfig"]["temperature"] == 0
    result = second["messages"][2]["content"][0]["toolResult"]
    assert result["status"] == "success" and result["content"] == [{"json": BOOKING}]


def test_openai(openai_server: OpenAIServer) -> None:
    openai_server.add_turns({"tool_calls": [CALL]}, "Booked.")
    model = OpenAIModel("gpt-test", base_url=openai_server.url, api_key="sk-typed", timeout=(5, 30))
    try:
        _run(model)
    finally:
        model.close()
    first, second = (r.body for r in openai_server.requests)
    _check_schema(first["tools"][0]["function"]["parameters"])
    assert first["temperature"] == 0 and second["temperature"] == 0
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and json.loads(tool_message["content"]) == BOOKING
