"""Structured output through the real SDKs (requests, anthropic, boto3) against the local
wire servers: each request carries its wire's mechanism, the answer parses, a plain call
afterwards carries none of it and is accepted, re-asks, partials, cancel, fallbacks."""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
import requests

from agent_sync import Agent, tool, validate_history
from agent_sync.events import PartialOutput
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel, _output
from agent_sync.models._output import response_format
from agent_sync.models.base import OutputSchema
from agent_sync.output._spec import output_spec
from agent_sync.testing._output_rules import anthropic_problem, bedrock_problem, openai_problem
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.openai_server import OpenAIServer
from tests.models._bedrock_fixtures import aws_session


class City(pydantic.BaseModel):
    """A city and its country."""

    name: str
    country: str
    population: int


class Loose(pydantic.BaseModel):
    name: str
    note: str = ""  # optional: OpenAI strict mode cannot express it


OSLO = {"name": "Oslo", "country": "Norway", "population": 709000}
ANSWER = City(**OSLO)  # type: ignore[arg-type]


def _final(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "final_result", "input": value}]}


@tool
def lookup(city: str) -> str:
    """Look up facts about a city.

    Args:
        city: The city.
    """
    return "Oslo, Norway, 709000 people"


# -- OpenAI-compatible: response_format json_schema --


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


def _openai(server: OpenAIServer) -> OpenAIModel:
    return OpenAIModel("gpt-test", base_url=server.url, api_key="sk-output-test", timeout=(5, 30))


def test_openai_asks_with_a_strict_json_schema_and_reads_the_text(
    openai_server: OpenAIServer,
) -> None:
    openai_server.add_turns(json.dumps(OSLO), "plain")
    model = _openai(openai_server)
    agent = Agent(model)
    result = agent.invoke("Tell me about Oslo", output_type=City)
    assert result.output == ANSWER
    body = openai_server.requests[0].body
    spec = body["response_format"]["json_schema"]
    assert body["response_format"]["type"] == "json_schema" and spec["strict"] is True
    assert spec["name"] == "final_result"
    assert spec["schema"]["additionalProperties"] is False
    assert "tools" not in body and "tool_choice" not in body
    assert agent.invoke("Thanks").output == "plain"
    assert "response_format" not in openai_server.requests[1].body
    assert len(openai_server.requests) == 2  # one model call per structured answer
    assert validate_history(agent.messages) == []
    model.close()


def test_openai_sends_a_schema_it_cannot_make_strict_as_not_strict(
    openai_server: OpenAIServer,
) -> None:
    openai_server.add_turns('{"name": "x"}')
    model = _openai(openai_server)
    assert Agent(model).invoke("x", output_type=Loose).output == Loose(name="x")
    spec = openai_server.requests[0].body["response_format"]["json_schema"]
    assert spec["strict"] is False and "additionalProperties" not in spec["schema"]
    model.close()


def test_the_strict_form_is_made_once_per_schema_object_and_never_shared_by_another() -> None:
    """A typed agent's requests reuse the strict schema made for the first (it was deep-copied
    and closed on every request); another schema, equal or not, gets its own; the output
    type's own schema is never changed."""
    schema = output_spec(City).schema
    before = copy.deepcopy(schema)

    def strict_of(schema: dict[str, Any]) -> Any:
        output = OutputSchema(name="final_result", description="d", schema=schema)
        return response_format(output)["json_schema"]["schema"]

    first = strict_of(schema)
    assert strict_of(schema) is first and first["additionalProperties"] is False
    assert schema == before  # closed in a copy
    equal = copy.deepcopy(schema)
    assert strict_of(equal) == first and strict_of(equal) is not first
    loose = output_spec(Loose).schema
    assert strict_of(loose) is loose  # not strict: sent as it is
    for _ in range(300):  # kept for a bounded number of schema objects
        strict_of({"type": "object", "properties": {}, "required": []})
    assert len(_output._strict_made) <= _output._STRICT_KEPT
    assert strict_of(schema) == first


def test_openai_falls_back_to_the_output_tool_once_per_model_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent_sync.models.openai")
    with OpenAIServer(rejected_fields=["response_format"]) as server:
        server.add_turns(_final(OSLO), _final(OSLO), "plain")
        model = _openai(server)
        agent = Agent(model, output_type=City)
        assert agent.invoke("Oslo?").output == ANSWER
        assert agent.invoke("Again?").output == ANSWER
        assert agent.invoke("Talk", output_type=None).output == "plain"
        bodies = [request.body for request in server.requests]
        model.close()
    assert "response_format" in bodies[0]  # refused with a 400 naming it
    assert [("response_format" in body) for body in bodies[1:]] == [False] * 3
    for body in bodies[1:3]:
        assert body["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}
        assert [t["function"]["name"] for t in body["tools"]] == ["final_result"]
    assert "tools" not in bodies[3] and "tool_choice" not in bodies[3]
    said = [r for r in caplog.records if "rejected response_format" in r.getMessage()]
    assert len(said) == 1
    assert validate_history(agent.messages) == []


def test_openai_re_asks_with_a_user_message_naming_the_problem(
    openai_server: OpenAIServer,
) -> None:
    openai_server.add_turns('{"name": "Oslo"}', json.dumps(OSLO))
    model = _openai(openai_server)
    agent = Agent(model, output_type=City)
    assert agent.invoke("Oslo?").output == ANSWER
    resent = openai_server.requests[1].body["messages"]
    assert resent[-1]["role"] == "user" and "country: Field required" in resent[-1]["content"]
    assert "response_format" in openai_server.requests[1].body
    model.close()


# -- Anthropic: the forced output tool --


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


def _anthropic(server: AnthropicServer, **params: Any) -> AnthropicModel:
    return AnthropicModel(
        "claude-test",
        client_args={"base_url": server.base_url, "api_key": "sk-ant-output"},
        **params,
    )


def test_anthropic_forces_the_output_tool_and_the_history_stays_valid(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.add_turns(_final(OSLO), "plain")
    model = _anthropic(anthropic_server)
    agent = Agent(model, output_type=City)
    assert agent.invoke("Oslo?").output == ANSWER
    body = anthropic_server.requests[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "final_result"}
    assert [t["name"] for t in body["tools"]] == ["final_result"]
    assert body["tools"][0]["input_schema"]["required"] == ["name", "country", "population"]
    assert agent.invoke("Thanks", output_type=None).output == "plain"
    second = anthropic_server.requests[1].body
    assert "tool_choice" not in second and "tools" not in second
    # the API refuses tool blocks in a request without tools: they go as text
    sent = [[b["type"] for b in m["content"]] for m in second["messages"]]
    assert sent == [["text"]] * 5
    assert second["messages"][1]["content"][0]["text"].startswith("[called tool final_result")
    assert "toolUse" in agent.messages[1]["content"][0]  # the history itself keeps them
    assert validate_history(agent.messages) == []
    model.close()


def test_anthropic_with_the_agents_tools_forces_any_tool_and_runs_them_first(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.add_turns(
        {"tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}]}, _final(OSLO)
    )
    model = _anthropic(anthropic_server)
    agent = Agent(model, tools=[lookup], output_type=City)
    assert agent.invoke("Oslo?").output == ANSWER
    for request in anthropic_server.requests:
        assert request.body["tool_choice"] == {"type": "any"}
        assert [t["name"] for t in request.body["tools"]] == ["lookup", "final_result"]
    model.close()


def test_anthropic_with_thinking_offers_the_tool_without_forcing_it(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.add_turns(_final(OSLO))
    model = _anthropic(anthropic_server, thinking={"type": "enabled", "budget_tokens": 1024})
    assert Agent(model).invoke("Oslo?", output_type=City).output == ANSWER
    assert anthropic_server.requests[0].body["tool_choice"] == {"type": "auto"}
    model.close()


def test_anthropic_re_asks_through_the_tools_error_result(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.add_turns(_final({**OSLO, "population": "many"}), _final(OSLO))
    model = _anthropic(anthropic_server)
    agent = Agent(model, output_type=City)
    assert agent.invoke("Oslo?").output == ANSWER
    result_block = anthropic_server.requests[1].body["messages"][-1]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["is_error"] is True
    assert "population: Input should be a valid integer" in json.dumps(result_block)
    model.close()


def test_anthropic_cancel_while_the_answer_streams_leaves_a_valid_history(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.add_turns({**_final(OSLO), "stall_after": 5}, _final(OSLO))
    model = _anthropic(anthropic_server)
    agent = Agent(model, output_type=City)
    seen = threading.Event()
    with agent.stream("Oslo?") as stream:
        for event in stream:
            if isinstance(event, PartialOutput) and not seen.is_set():
                seen.set()
                stream.cancel("enough")
    assert seen.is_set() and stream.result is not None
    assert stream.result.stop_reason == "cancelled" and stream.result.output is None
    assert agent.messages[-1]["content"][-1] == {"text": CANCELLED_TEXT}
    assert validate_history(agent.messages) == []
    assert agent.invoke("Again").output == ANSWER  # the server accepts the history
    model.close()


# -- Bedrock: the forced output tool (toolChoice) --


@pytest.fixture
def bedrock() -> Iterator[tuple[BedrockServer, BedrockModel]]:
    with BedrockServer() as server:
        session = aws_session("AKIDOUTPUTTEST", "output-secret")
        model = BedrockModel(
            "test-model", endpoint_url=server.base_url, boto_session=session, read_timeout=30
        )
        yield server, model
        model.close()


def test_bedrock_forces_the_output_tool_and_streams_partials(
    bedrock: tuple[BedrockServer, BedrockModel],
) -> None:
    server, model = bedrock
    server.add_turns({**_final(OSLO), "chunk_size": 7}, "plain")
    agent = Agent(model, output_type=City)
    events = list(agent.stream("Oslo?"))
    partials = [e.partial for e in events if isinstance(e, PartialOutput)]
    assert partials[-1] == OSLO and len(partials) > 2
    assert {"name": "Oslo"} in partials
    assert agent.messages[-1]["content"] == [{"text": json.dumps(OSLO)}]
    config = server.requests[0].body["toolConfig"]
    assert config["toolChoice"] == {"tool": {"name": "final_result"}}
    assert config["tools"][0]["toolSpec"]["name"] == "final_result"
    assert agent.invoke("Thanks", output_type=None).output == "plain"
    assert "toolConfig" not in server.requests[1].body
    assert validate_history(agent.messages) == []


def test_bedrock_with_thinking_does_not_force_the_tool(
    bedrock: tuple[BedrockServer, BedrockModel],
) -> None:
    server, model = bedrock
    server.add_turns(_final(OSLO))
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    agent = Agent(model, params={"additional_model_request_fields": thinking})
    assert agent.invoke("Oslo?", output_type=City).output == ANSWER
    assert server.requests[0].body["toolConfig"]["toolChoice"] == {"auto": {}}


# -- what the servers refuse, as the real APIs do --


def test_the_servers_refuse_what_the_real_apis_refuse() -> None:
    loose_schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": []}
    strict = {
        "type": "json_schema",
        "json_schema": {"name": "final_result", "schema": loose_schema, "strict": True},
    }
    assert "additionalProperties" in str(openai_problem({"response_format": strict}))
    closed = {**loose_schema, "additionalProperties": False}
    strict["json_schema"]["schema"] = closed  # type: ignore[index]
    assert "Missing 'a'" in str(openai_problem({"response_format": strict}))
    choice = {"type": "function", "function": {"name": "nope"}}
    assert "nope" in str(openai_problem({"tool_choice": choice, "tools": []}))
    forced = {
        "tools": [{"name": "final_result"}],
        "tool_choice": {"type": "any"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    assert "Thinking may not be enabled" in str(anthropic_problem(forced))
    bedrock_request = {
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "final_result"}}],
            "toolChoice": {"tool": {"name": "final_result"}},
        },
        "additionalModelRequestFields": {"thinking": {"type": "enabled"}},
    }
    assert "Thinking may not be enabled" in str(bedrock_problem(bedrock_request))
    bedrock_request["toolConfig"]["toolChoice"] = {"tool": {"name": "other"}}  # type: ignore[index]
    assert "not defined" in str(bedrock_problem(bedrock_request))


def test_an_openai_server_refuses_a_strict_schema_over_the_wire(
    openai_server: OpenAIServer,
) -> None:
    openai_server.add_turns("not used: the request is refused")
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": schema, "strict": True},
        },
    }
    answer = requests.post(f"{openai_server.url}/chat/completions", json=body, timeout=10)
    assert answer.status_code == 400
    assert "Invalid schema for response_format 'out'" in answer.json()["error"]["message"]
