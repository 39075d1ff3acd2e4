"""The local Responses API fake is faithful: the official ``openai`` SDK reads every event it
streams (each one validates against the SDK's own types), and it refuses what the real API
refuses."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import requests
from openai.types.responses import ResponseStreamEvent

from agent_sync.testing import ResponsesServer

EVENT_CLASSES = set(typing.get_args(typing.get_args(ResponseStreamEvent)[0]))
"""Every stream event class of the SDK (its union of event types)."""

TURN = {
    "reasoning": "Think about Oslo.",
    "text": "Calling the tool now.",
    "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}, "id": "call_1"}],
    "chunk_size": 4,
    "usage": {"inputTokens": 30, "outputTokens": 12, "cacheReadInputTokens": 8,
              "reasoningTokens": 5},
}  # fmt: skip
TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "description": "Weather.", "strict": False,
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
]  # fmt: skip


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    with ResponsesServer() as s:
        yield s


@pytest.fixture(scope="module")
def refusing() -> Iterator[ResponsesServer]:
    """One server for the refusal cases: a refused request uses up no turn."""
    with ResponsesServer(["unused"]) as s:
        yield s


@pytest.fixture
def client(server: ResponsesServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url, api_key="sk-sdk-test", max_retries=0) as c:
        yield c


def test_the_sdk_parses_every_event_the_server_streams(
    server: ResponsesServer, client: openai.OpenAI
) -> None:
    server.add_turns(TURN, {"text": "cut", "stop_reason": "max_output_tokens"},
                     {"error_type": "server_error", "error_message": "boom"})  # fmt: skip
    seen: dict[str, int] = {}
    for _ in range(3):
        stream = client.responses.create(
            model="gpt-test", input="Weather in Oslo?", tools=TOOLS, stream=True,
            include=["reasoning.encrypted_content"],
        )  # fmt: skip
        with stream:
            for event in stream:
                # the SDK picked the event's own class, and the event validates against it
                # (every required field present, with its type), not only constructed
                assert type(event) in EVENT_CLASSES, event.type
                type(event).model_validate(event.to_dict())
                seen[event.type] = seen.get(event.type, 0) + 1
    assert set(seen) == {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
        "response.output_item.done", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.completed",
        "response.incomplete", "response.failed",
    }  # fmt: skip


def test_the_sdk_stream_helper_assembles_the_response(
    server: ResponsesServer, client: openai.OpenAI
) -> None:
    server.add_turns(TURN)
    with client.responses.stream(
        model="gpt-test", input="Weather in Oslo?", tools=TOOLS,
        include=["reasoning.encrypted_content"],
    ) as stream:  # fmt: skip
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Calling the tool now."
    reasoning, message, call = final.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert reasoning.summary[0].text == "Think about Oslo."
    assert message.type == "message" and message.id == "msg_test0001"
    assert call.type == "function_call" and (call.call_id, call.name) == ("call_1", "get_weather")
    assert call.arguments == '{"city": "Oslo"}'
    assert final.usage is not None
    assert final.usage.input_tokens_details.cached_tokens == 8
    assert final.usage.output_tokens_details.reasoning_tokens == 5


def test_the_sdk_reads_errors_and_plain_json(
    server: ResponsesServer, client: openai.OpenAI
) -> None:
    server.add_turns({"status": 429, "retry_after": 3, "error_message": "Rate limit reached"},
                     "not streamed")  # fmt: skip
    with pytest.raises(openai.RateLimitError) as info:
        client.responses.create(model="gpt-test", input="hi", stream=True)
    assert info.value.code == "rate_limit_exceeded"
    assert info.value.response.headers["retry-after"] == "3"
    assert client.responses.create(model="gpt-test", input="hi").output_text == "not streamed"


def _post(server: ResponsesServer, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{server.url}/responses", json=body, timeout=10)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}


@pytest.mark.parametrize(
    ("body", "refusal"),
    [
        ({"input": "hi"}, "Missing required parameter: 'model'"),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "Invalid value: 'tool'"),
        ({"model": "m", "input": [_user("hi"), {"type": "function_call_output",
          "call_id": "call_9", "output": "x"}]}, "No tool call found"),
        ({"model": "m", "input": [_user("hi"), CALL]}, "No tool output found"),
        ({"model": "m", "input": [{"role": "assistant", "content": [
          {"type": "input_text", "text": "x"}]}]}, "Supported values are: 'output_text'"),
        ({"model": "m", "input": [_user("hi"), {"type": "reasoning", "id": "rs_x",
          "summary": []}, {"role": "assistant", "content": "a"}]}, "not found"),
        ({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f",
          "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}]},
         "additionalProperties"),
        ({"model": "m", "input": "hi", "tool_choice": {"type": "function", "name": "g"}},
         "not found in 'tools'"),
        ({"model": "m", "input": "hi", "text": {"format": {"type": "json_schema",
          "name": "bad name", "schema": {}}}}, "text.format.name"),
    ],
    ids=["no-model", "bad-role", "orphan-output", "unanswered-call", "assistant-input-part",
         "unknown-reasoning", "tools-strict-by-default", "tool-choice", "format-name"],
)  # fmt: skip
def test_the_server_refuses_what_the_api_refuses(
    refusing: ResponsesServer, body: dict[str, Any], refusal: str
) -> None:
    answer = _post(refusing, body)
    assert answer.status_code == 400
    assert refusal in answer.json()["error"]["message"]
    assert refusing.turns_left == 1  # a refusal does not use up the turn


def test_the_server_refuses_reasoning_it_issued_without_its_follower(
    server: ResponsesServer,
) -> None:
    server.add_turns({"reasoning": "r", "text": "a"}, "b", "c")
    first = _post(server, {"model": "m", "input": "q", "stream": False}).json()
    reasoning, message = first["output"]
    history = [_user("q"), {"type": "reasoning", "id": reasoning["id"], "summary": []}]
    without = _post(server, {"model": "m", "input": [*history, _user("next")]})
    assert "without its required following item" in without.json()["error"]["message"]
    follower = {"type": "message", "role": "assistant", "id": message["id"],
                "content": [{"type": "output_text", "text": "a"}]}  # fmt: skip
    accepted = _post(server, {"model": "m", "input": [*history, follower, _user("next")]})
    assert accepted.status_code == 200
    stateless = _post(server, {"model": "m", "store": False,
                               "input": [*history, follower, _user("next")]})  # fmt: skip
    assert "Items are not persisted" in stateless.json()["error"]["message"]
