"""OpenAIResponsesModel through real ``requests`` against the local Responses API fake:
the request (input items, tools, structured output, cache fields), the answer (text, tool
calls, reasoning kept and sent back, usage, stop reasons) and the errors."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, RetryPolicy, tool, validate_history
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
    UsageError,
)
from agent_sync.messages import Message
from agent_sync.models import OpenAIResponsesModel
from agent_sync.models._responses_stream import EventTranslator
from agent_sync.models.base import ModelRequest, OutputSchema
from agent_sync.testing import ResponsesServer
from tests.fixtures.streams import assemble, collect

from ._responses_fixtures import responses_fixtures

KEY = "sk-resp-SECRET-0123456789abcdef"
NO_RETRY = RetryPolicy(max_attempts=1)

server, model = responses_fixtures(KEY)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[ResponsesServer, OpenAIResponsesModel]]:
    """One server and model for the tests that look only at what the model yields (each
    consumes exactly the turns it adds): a server per case would cost more than the case."""
    with ResponsesServer() as one_server:
        one_model = OpenAIResponsesModel("gpt-test", base_url=one_server.url, api_key=KEY)
        yield one_server, one_model
        one_model.close()
        assert one_server.turns_left == 0


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temperature_c": 21}


def text_of(events: list[Any]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


# -- the answer ------------------------------------------------------------------------------


def test_text_and_usage(server: ResponsesServer, model: OpenAIResponsesModel) -> None:
    usage = {"inputTokens": 1200, "outputTokens": 40, "cacheReadInputTokens": 1024,
             "reasoningTokens": 32}  # fmt: skip
    server.add_turns({"text": "Hello from the Responses API", "usage": usage})
    events = collect(model)
    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert text_of(events) == "Hello from the Responses API"
    (stop,) = [e["messageStop"] for e in events if "messageStop" in e]
    assert (stop["stopReason"], stop["providerStopReason"]) == ("end_turn", "completed")
    assert stop["responseId"] and stop["responseModel"]
    # outputTokens includes the reasoning tokens (OpenAI's count); cached tokens are read
    assert events[-1] == {"metadata": {"usage": {"inputTokens": 1200, "outputTokens": 40,
                          "totalTokens": 1240, "cacheReadInputTokens": 1024,
                          "reasoningTokens": 32}}}  # fmt: skip
    body = server.requests[0].body
    assert body["stream"] is True and body["model"] == "gpt-test"
    assert body["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    ]
    assert server.requests[0].headers["authorization"] == "***"


def test_tool_round_trip_sends_function_call_and_its_output(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns(
        {
            "tool_calls": [
                {"name": "get_weather", "input": {"city": "Oslo"}, "id": "call_A"},
                {"name": "get_weather", "input": {"city": "Bergen"}},
            ]
        },  # fmt: skip
        "Oslo 21, Bergen 21.",
    )
    agent = Agent(model, tools=[get_weather], system_prompt="Be brief.")
    result = agent.invoke("Weather in Oslo and Bergen?")
    assert result.text == "Oslo 21, Bergen 21." and result.stop_reason == "end_turn"
    assert validate_history(agent.messages) == []
    first, second = (r.body for r in server.requests)
    assert first["instructions"] == "Be brief."
    assert first["tools"] == [{"type": "function", "name": "get_weather",
                               "description": get_weather.spec["description"],
                               "parameters": get_weather.spec["inputSchema"]["json"],
                               "strict": False}]  # fmt: skip
    kinds = [(item["type"], item.get("call_id")) for item in second["input"]]
    assert kinds == [("message", None), ("function_call", "call_A"),
                     ("function_call", "call_1_1"), ("function_call_output", "call_A"),
                     ("function_call_output", "call_1_1")]  # fmt: skip
    calls = [item for item in second["input"] if item["type"] == "function_call"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Oslo"}, {"city": "Bergen"}]
    outputs = [item for item in second["input"] if item["type"] == "function_call_output"]
    assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]
    assert '"temperature_c": 21' in outputs[0]["output"]


def test_tool_call_events_stream_as_tool_use_blocks(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns(
        {
            "text": "Let me check.",
            "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}, "id": "call_X"}],
            "chunk_size": 3,
        }  # fmt: skip
    )
    assembled = assemble(collect(model))
    assert assembled.stop_reason == "tool_use"
    assert assembled.message["content"] == [
        {"text": "Let me check."},
        {"toolUse": {"toolUseId": "call_X", "name": "get_weather", "input": {"city": "Oslo"}}},
    ]


def test_reasoning_is_kept_and_sent_back_with_the_item_that_followed_it(
    server: ResponsesServer,
) -> None:
    # store=False: stateless, so the request asks for the encrypted reasoning and sends it
    model = OpenAIResponsesModel("gpt-test", base_url=server.url, api_key=KEY, store=False,
                                 reasoning={"effort": "low", "summary": "auto"})  # fmt: skip
    server.add_turns(
        {"reasoning": "The user wants Oslo.", "tool_calls": [{"name": "get_weather",
                                                              "input": {"city": "Oslo"}}]},
        {"reasoning": "Now answer.", "text": "21 C in Oslo."},
        "bye",
    )  # fmt: skip
    agent = Agent(model, tools=[get_weather])
    assert agent.invoke("Weather in Oslo?").text == "21 C in Oslo."
    assert agent.invoke("Thanks").text == "bye"
    model.close()
    assistant = agent.messages[1]["content"]
    assert assistant[0]["reasoningContent"]["reasoningText"]["text"] == "The user wants Oslo."
    first = server.requests[0].body
    assert first["include"] == ["reasoning.encrypted_content"] and first["store"] is False
    # each request carries every earlier reasoning item, then the item that followed it
    for request in server.requests[1:]:
        items = request.body["input"]
        for position, item in enumerate(items):
            if item["type"] == "reasoning":
                assert item["encrypted_content"].startswith("enc_")
                assert "id" in items[position + 1]
    third = server.requests[2].body["input"]
    kinds = [item["type"] for item in third]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output",
                     "reasoning", "message", "message"]  # fmt: skip
    assert third[4]["summary"] == [{"type": "summary_text", "text": "Now answer."}]
    assert third[5] == {"type": "message", "role": "assistant", "status": "completed",
                        "id": "msg_test0002", "content": [{"type": "output_text",
                        "text": "21 C in Oslo.", "annotations": []}]}  # fmt: skip


def test_reasoning_without_store_false_goes_back_by_id(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns({"reasoning": "hmm", "text": "one"}, "two")
    agent = Agent(model)
    agent.invoke("a")
    agent.invoke("b")
    assert "include" not in server.requests[0].body
    reasoning = server.requests[1].body["input"][1]
    assert reasoning == {"type": "reasoning", "id": "rs_test0001",
                         "summary": [{"type": "summary_text", "text": "hmm"}]}  # fmt: skip


def test_the_server_refuses_reasoning_sent_without_its_following_item(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    # The rule the item ids are carried for: stripped of the follower's id, the API refuses.
    server.add_turns({"reasoning": "hmm", "text": "one"}, "two")
    agent = Agent(model, retry=NO_RETRY)
    agent.invoke("a")
    signature = agent.messages[1]["content"][0]["reasoningContent"]["reasoningText"]["signature"]
    payload = json.loads(signature.split(":", 1)[1])
    del payload["next"]
    tampered = "openai-responses:" + json.dumps(payload)
    agent.messages[1]["content"][0]["reasoningContent"]["reasoningText"]["signature"] = tampered
    with pytest.raises(ModelHTTPError, match="without its required following item"):
        agent.invoke("b")


def test_reasoning_of_other_providers_and_unfollowed_reasoning_are_dropped(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns("ok")
    history: list[Message] = [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "claude", "signature": "EqQBCkgI"}}},
            {"reasoningContent": {"redactedContent": b"opaque"}},
            {"text": "a"},
        ]},
        {"role": "user", "content": [{"text": "q2"}]},
    ]  # fmt: skip
    collect(model, ModelRequest(messages=history))
    kinds = [item["type"] for item in server.requests[0].body["input"]]
    assert kinds == ["message", "message", "message"]


def test_images_and_documents_become_input_parts(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns("seen", "done")
    png, pdf = b"\x89PNG fake", b"%PDF-1.7 fake"
    history: list[Message] = [
        {"role": "user", "content": [
            {"text": "Look"},
            {"image": {"format": "png", "source": {"bytes": png}}},
            {"document": {"format": "pdf", "name": "report", "source": {"bytes": pdf}}},
            {"document": {"format": "txt", "name": "notes", "source": {"bytes": b"plain"}}},
        ]},
    ]  # fmt: skip
    collect(model, ModelRequest(messages=history))
    parts = server.requests[0].body["input"][0]["content"]
    assert parts == [
        {"type": "input_text", "text": "Look"},
        {"type": "input_image", "detail": "auto",
         "image_url": "data:image/png;base64," + base64.b64encode(png).decode()},
        {"type": "input_file", "filename": "report.pdf",
         "file_data": "data:application/pdf;base64," + base64.b64encode(pdf).decode()},
        {"type": "input_text", "text": "[document notes]\nplain"},
    ]  # fmt: skip
    # an image in a tool result: the output becomes a list of parts; an error is said
    history = [
        {"role": "user", "content": [{"text": "draw"}]},
        {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "call_1", "name": "draw", "input": {}}},
            {"toolUse": {"toolUseId": "call_2", "name": "draw", "input": {}}}]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "call_1", "status": "success", "content": [
                {"text": "here"}, {"image": {"format": "png", "source": {"bytes": png}}}]}},
            {"toolResult": {"toolUseId": "call_2", "status": "error",
                            "content": [{"text": "no ink"}]}}]},
    ]  # fmt: skip
    collect(model, ModelRequest(messages=history))
    outputs = [i for i in server.requests[1].body["input"] if i["type"] == "function_call_output"]
    assert outputs[0]["output"][0] == {"type": "input_text", "text": "here"}
    assert outputs[0]["output"][1]["type"] == "input_image"
    assert outputs[1]["output"] == "Error: no ink"


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("max_output_tokens", "max_tokens"), ("content_filter", "content_filtered")],
)
def test_an_incomplete_response_says_why(
    shared: tuple[ResponsesServer, OpenAIResponsesModel], stop: str, expected: str
) -> None:
    server, model = shared
    server.add_turns({"text": "partial answ", "stop_reason": stop})
    assembled = assemble(collect(model))
    assert assembled.stop_reason == expected
    assert assembled.message["content"] == [{"text": "partial answ"}]


def test_a_json_answer_to_the_stream_request_is_the_whole_response() -> None:
    with ResponsesServer(json_for_streams=True) as server:
        server.add_turns(
            {
                "reasoning": "r",
                "text": "whole",
                "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}, "id": "call_J"}],
            },  # fmt: skip
        )
        model = OpenAIResponsesModel("gpt-test", base_url=server.url, api_key=KEY)
        assembled = assemble(collect(model))
        model.close()
    content = assembled.message["content"]
    assert content[0]["reasoningContent"]["reasoningText"]["text"] == "r"
    assert content[1:] == [
        {"text": "whole"},
        {"toolUse": {"toolUseId": "call_J", "name": "get_weather", "input": {"city": "Oslo"}}},
    ]
    assert assembled.stop_reason == "tool_use" and assembled.usage is not None


# -- structured output and caching -------------------------------------------------------------


def test_structured_output_goes_through_text_format(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns('{"city": "Oslo", "celsius": 21}', "plain")
    schema = {"type": "object", "properties": {"city": {"type": "string"},
              "celsius": {"type": "integer"}}, "required": ["city", "celsius"]}  # fmt: skip
    agent = Agent(model)
    assert agent.invoke("Oslo?", output_type=schema).output == {"city": "Oslo", "celsius": 21}
    spec = server.requests[0].body["text"]["format"]
    assert spec["type"] == "json_schema" and spec["name"] == "final_result"
    assert spec["strict"] is True and spec["schema"]["additionalProperties"] is False
    assert "tools" not in server.requests[0].body
    assert agent.invoke("Thanks").output == "plain"
    assert "text" not in server.requests[1].body
    assert validate_history(agent.messages) == []


def test_a_server_refusing_text_format_gets_the_output_tool_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent_sync.models.responses")
    output = OutputSchema(name="final_result", description="The answer.",
                          schema={"type": "object", "properties": {}})  # fmt: skip
    request = ModelRequest(messages=[{"role": "user", "content": [{"text": "q"}]}], output=output)
    with ResponsesServer(rejected_fields=["text"]) as server:
        server.add_turns({"tool_calls": [{"name": "final_result", "input": {}}]}, "x")
        model = OpenAIResponsesModel("gpt-test", base_url=server.url, api_key=KEY)
        assert assemble(collect(model, request)).stop_reason == "tool_use"
        collect(model, request)
        model.close()
    bodies = [r.body for r in server.requests]
    assert "text" in bodies[0] and all("text" not in body for body in bodies[1:])
    assert bodies[1]["tool_choice"] == {"type": "function", "name": "final_result"}
    assert len([r for r in caplog.records if "rejected text.format" in r.getMessage()]) == 1


def test_cache_long_sends_retention_and_key_and_a_refusing_server_gets_neither() -> None:
    request = ModelRequest(messages=[{"role": "user", "content": [{"text": "q"}]}],
                           cache="long", cache_key="conv-42")  # fmt: skip
    with ResponsesServer(["a"]) as server:
        model = OpenAIResponsesModel("gpt-test", base_url=server.url, api_key=KEY)
        collect(model, request)
        model.close()
    body = server.requests[0].body
    assert (body["prompt_cache_retention"], body["prompt_cache_key"]) == ("24h", "conv-42")
    with ResponsesServer(["a", "b"], rejected_fields=["prompt_cache_retention"]) as server:
        model = OpenAIResponsesModel("gpt-test", base_url=server.url, api_key=KEY)
        collect(model, request)
        collect(model, request)
        model.close()
    assert [("prompt_cache_key" in r.body) for r in server.requests] == [True, False, False]


# -- errors ---------------------------------------------------------------------------------


def test_rate_limit_carries_retry_after(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns({"status": 429, "retry_after": 7, "error_message": "Rate limit reached"})
    with pytest.raises(ModelThrottledError) as info:
        collect(model)
    assert info.value.retry_after == 7 and info.value.retryable
    assert "req_resp" in str(info.value)  # the request id is named


def test_server_errors_are_retried_by_the_agent(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns({"status": 503}, {"error_type": "server_error"}, "third")
    agent = Agent(model, retry=RetryPolicy(max_attempts=3, initial_delay=0.001, jitter=0))
    result = agent.invoke("hi")
    assert result.text == "third" and result.metrics.retries == 2


@pytest.mark.parametrize(
    ("turn", "error", "retryable"),
    [
        ({"status": 400, "error_type": "context_length_exceeded",
          "error_message": "Your input exceeds the context window of this model."},
         ContextWindowOverflowError, False),
        ({"status": 401, "error_message": "Incorrect API key provided"}, ModelHTTPError, False),
        ({"status": 400, "error_message": "Invalid value"}, ModelHTTPError, False),
        ({"text": "x", "error_type": "rate_limit_exceeded"}, ModelThrottledError, True),
        ({"text": "abc", "corrupt_after": 6}, ModelStreamError, False),
        ({"text": "abc", "truncate_after": 6}, ModelStreamError, True),
        ({"text": "abcdefgh" * 4, "drop_after": 6}, ModelStreamError, True),
    ],
    ids=["overflow", "auth", "bad-request", "failed-rate-limit", "corrupt", "truncated",
         "dropped"],
)  # fmt: skip
def test_errors_are_mapped(
    shared: tuple[ResponsesServer, OpenAIResponsesModel],
    turn: dict[str, Any],
    error: type[Exception],
    retryable: bool,
) -> None:
    server, model = shared
    server.add_turns(turn)
    with pytest.raises(error) as info:
        collect(model)
    assert getattr(info.value, "retryable", None) is retryable
    if turn.get("status") == 401:
        assert "OPENAI_API_KEY" in str(info.value)


def test_connection_refused_is_a_connection_error() -> None:
    with ResponsesServer() as server:
        url = server.url
    model = OpenAIResponsesModel("gpt-test", base_url=url, api_key=KEY, timeout=(2, 2))
    with pytest.raises(ModelConnectionError):
        collect(model)
    model.close()


def test_no_key_for_openai_fails_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIResponsesModel("gpt-5")  # construction does no network I/O
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        collect(model)
    assert "SECRET" not in repr(model)
    model.close()


def test_a_malformed_history_is_a_usage_error_and_sends_nothing(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    bad: list[Any] = [{"role": "user", "content": [{"image": {"format": "png"}}]}]
    with pytest.raises(UsageError, match=r"messages\[0\]"):
        collect(model, ModelRequest(messages=bad))
    assert server.requests == []


# -- the translator at its boundary ------------------------------------------------------------


def _translate(*events: dict[str, Any]) -> list[Any]:
    translator = EventTranslator()
    out = [e for event in events for e in translator.add(event)]
    return out + translator.finish()


def test_a_text_delta_without_its_item_is_still_text() -> None:
    events = _translate(
        {"type": "response.output_text.delta", "output_index": 0, "delta": "hi"},
        {"type": "response.completed", "response": {"status": "completed"}},
    )
    assert assemble(events).message["content"] == [{"text": "hi"}]


@pytest.mark.parametrize(
    ("event", "error"),
    [
        ({"type": "response.output_text.delta", "output_index": 0, "delta": 5}, ModelStreamError),
        ({"type": "response.function_call_arguments.delta", "output_index": 3, "delta": "{"},
         ModelStreamError),
        ({"type": "response.output_item.added", "output_index": 0,
          "item": {"type": "function_call", "call_id": 7, "name": "f"}}, ModelStreamError),
        ({"type": "error", "code": "rate_limit_exceeded", "message": "slow down"},
         ModelThrottledError),
        ({"type": "error", "error": {"code": "context_length_exceeded", "message": "too long"}},
         ContextWindowOverflowError),
        ({"type": "response.failed", "response": {"error": {"code": "server_error",
          "message": "oops"}}}, ModelStreamError),
    ],
    ids=["non-string-text", "arguments-without-item", "numeric-call-id", "error-event",
         "nested-error-overflow", "failed"],
)  # fmt: skip
def test_unreadable_or_failing_events_raise_mapped_errors(
    event: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        _translate(event)
