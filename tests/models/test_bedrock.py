"""BedrockModel through the real boto3 client against the local event-stream fake.

Covers the wire: request translation, event mapping, non-streaming converse, and the
error map (HTTP errors, mid-stream exception messages, corrupt and truncated streams).
Cancellation lives in test_bedrock_cancel.py, Agent-level behaviour in test_bedrock_agent.py.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.eventstream import EventStreamBuffer

from agent_sync.cancel import CancelScope
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
    UsageError,
)
from agent_sync.messages import Message, StreamEvent
from agent_sync.models import BedrockModel, ModelRequest
from agent_sync.testing.bedrock_server import BedrockServer, encode_message
from tests.fixtures.streams import collect

from ._bedrock_fixtures import aws_session, server


def _stops(events: list[StreamEvent]) -> list[dict[str, Any]]:
    """The ``messageStop`` events, each checked to carry the response's request id (AWS's
    ``x-amzn-RequestId``, which the server sends on every stream) and shown without it."""
    stops = [dict(event["messageStop"]) for event in events if "messageStop" in event]
    for stop in stops:
        assert isinstance(stop.pop("responseId", None), str), stop
    return stops


__all__ = ["server"]  # fixture, imported for pytest

ACCESS_KEY = "AKIDBEDROCKTEST0001"
SECRET_KEY = "bedrock-test-secret-key-do-not-leak"
HELLO: list[Message] = [{"role": "user", "content": [{"text": "hi"}]}]
WEATHER_SPEC: Any = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


@pytest.fixture
def session() -> boto3.Session:
    return aws_session(ACCESS_KEY, SECRET_KEY)


@pytest.fixture
def model(server: BedrockServer, session: boto3.Session) -> Iterator[BedrockModel]:
    bedrock = BedrockModel("test.model-v1:0", endpoint_url=server.base_url, boto_session=session)
    yield bedrock
    bedrock.close()


def text_of(events: list[StreamEvent]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


def tool_input(events: list[StreamEvent]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "contentBlockDelta" in e and "toolUse" in e["contentBlockDelta"]["delta"]
    )


# --- responses -----------------------------------------------------------------------------


def test_text_streams_in_order_with_usage(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns(
        {"text": "Hello from Bedrock!", "usage": {"inputTokens": 7, "outputTokens": 5}}
    )

    events = collect(model)

    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert text_of(events) == "Hello from Bedrock!"
    assert {"stopReason": "end_turn"} in _stops(events)
    assert events[-1]["metadata"]["usage"] == {
        "inputTokens": 7,
        "outputTokens": 5,
        "totalTokens": 12,
    }


def test_tool_use_input_arrives_in_fragments_that_form_json(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns(
        {"tool_calls": [{"id": "tu-1", "name": "get_weather", "input": {"city": "Oslo"}}]}
    )

    events = collect(model)

    starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
    assert starts == [
        {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tu-1", "name": "get_weather"}}}
    ]
    fragments = [e for e in events if "contentBlockDelta" in e]
    assert len(fragments) > 1  # really streamed in pieces
    assert json.loads(tool_input(events)) == {"city": "Oslo"}
    assert {"stopReason": "tool_use"} in _stops(events)


def test_tool_input_that_is_not_json_is_passed_through_verbatim(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns(
        {"tool_calls": [{"name": "get_weather"}], "raw_tool_input": {0: '{"city": Os'}}
    )

    events = collect(model)

    assert tool_input(events) == '{"city": Os'  # the loop decides what invalid input means


def test_reasoning_deltas_carry_text_and_signature(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"reasoning": "Let me think.", "text": "42", "signature": "sig-abc"})

    events = collect(model)

    reasoning = [
        e["contentBlockDelta"]["delta"]["reasoningContent"]
        for e in events
        if "contentBlockDelta" in e and "reasoningContent" in e["contentBlockDelta"]["delta"]
    ]
    assert "".join(r.get("text", "") for r in reasoning) == "Let me think."
    assert reasoning[-1] == {"signature": "sig-abc"}
    assert text_of(events) == "42"


@pytest.mark.parametrize("reason", ["max_tokens", "stop_sequence", "model_context_window_exceeded"])
def test_stop_reason_is_reported_as_sent(
    server: BedrockServer, model: BedrockModel, reason: str
) -> None:
    server.add_turns({"text": "partial", "stop_reason": reason})

    assert {"stopReason": reason} in _stops(collect(model))


def test_non_streaming_converse_yields_the_same_events(
    server: BedrockServer, session: boto3.Session
) -> None:
    turn = {
        "reasoning": "think",
        "text": "Sunny.",
        "tool_calls": [{"id": "tu-9", "name": "get_weather", "input": {"city": "Oslo"}}],
        "usage": {"inputTokens": 3, "outputTokens": 4},
    }
    server.add_turns(turn, turn)
    streaming = BedrockModel("m", endpoint_url=server.base_url, boto_session=session)
    plain = BedrockModel("m", endpoint_url=server.base_url, boto_session=session, streaming=False)

    streamed, converse = collect(streaming), collect(plain)

    assert server.requests[1].path.endswith("/converse")
    for events in (streamed, converse):
        assert text_of(events) == "Sunny."
        assert json.loads(tool_input(events)) == {"city": "Oslo"}
        assert {"stopReason": "tool_use"} in _stops(events)
        assert events[-1]["metadata"]["usage"]["totalTokens"] == 7
    assert [next(iter(e)) for e in converse if "contentBlockStop" in e] == ["contentBlockStop"] * 3


# --- requests ------------------------------------------------------------------------------


def test_request_translation(server: BedrockServer, session: boto3.Session) -> None:
    server.add_turns("ok")
    model = BedrockModel(
        "anthropic.claude-3:0",
        endpoint_url=server.base_url,
        boto_session=session,
        max_tokens=256,
        temperature=0.2,
        top_p=0.9,
        stop_sequences=["END"],
        additional_model_request_fields={"top_k": 5},
    )
    request = ModelRequest(
        messages=HELLO,
        system_prompt="Be brief.",
        tool_specs=[WEATHER_SPEC],
        tool_choice={"auto": {}},
        params={"temperature": 0.5},
    )

    collect(model, request)

    recorded = server.requests[0]
    assert recorded.path == "/model/anthropic.claude-3%3A0/converse-stream"
    assert recorded.body == {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "Be brief."}],
        "toolConfig": {"tools": [{"toolSpec": WEATHER_SPEC}], "toolChoice": {"auto": {}}},
        "inferenceConfig": {
            "maxTokens": 256,
            "temperature": 0.5,  # the per-request value wins
            "topP": 0.9,
            "stopSequences": ["END"],
        },
        "additionalModelRequestFields": {"top_k": 5},
    }
    assert recorded.headers["authorization"] == "***"


def test_history_is_cleaned_of_what_bedrock_rejects(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns("ok", "ok")
    history: list[Any] = [
        {"role": "user", "content": [{"text": "weather?"}, {"text": ""}]},
        {
            "role": "assistant",
            "content": [
                {"reasoningContent": {"reasoningText": {"text": "unsigned, from elsewhere"}}},
                {"text": "checking"},
                {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "t1",
                        "status": "success",
                        "content": [{"text": "sunny"}],
                    }
                }
            ],
        },
    ]

    collect(model, ModelRequest(messages=history, tool_specs=[WEATHER_SPEC]))
    collect(model, ModelRequest(messages=history))  # no tools this time

    with_tools, without_tools = server.requests[0].body, server.requests[1].body
    assert with_tools["messages"][0]["content"] == [{"text": "weather?"}]
    assert with_tools["messages"][1]["content"] == [
        {"text": "checking"},
        {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}},
    ]
    assert with_tools["messages"][2]["content"][0]["toolResult"]["content"] == [{"text": "sunny"}]
    # Without a toolConfig Bedrock rejects tool blocks: they become text.
    assert "toolConfig" not in without_tools
    assert all("text" in b for m in without_tools["messages"] for b in m["content"])
    assert "sunny" in without_tools["messages"][2]["content"][0]["text"]


def test_unknown_parameter_is_a_usage_error_at_construction(session: boto3.Session) -> None:
    with pytest.raises(UsageError, match="max_token"):
        BedrockModel("m", region_name="us-east-1", boto_session=session, max_token=10)


def test_construction_needs_a_region_but_no_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    offline = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name=None)
    model = BedrockModel("m", endpoint_url="http://10.255.255.1:1", boto_session=offline,
                         region_name="eu-west-1")  # fmt: skip
    assert "eu-west-1" in repr(model)
    with pytest.raises(UsageError, match="region"):
        BedrockModel("m", boto_session=boto3.Session(region_name=None, profile_name=None))


def test_fake_server_frames_decode_with_botocore() -> None:
    frame = encode_message({":event-type": "messageStart", ":message-type": "event"}, b"{}")
    buffer = EventStreamBuffer()
    buffer.add_data(frame * 2)
    messages = list(buffer)
    assert len(messages) == 2
    assert messages[0].headers[":event-type"] == "messageStart"
    assert messages[0].payload == b"{}"


# --- errors --------------------------------------------------------------------------------


def test_botocore_makes_exactly_one_attempt(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns({"status": 429, "error_message": "Too many requests"}, "not reached")

    with pytest.raises(ModelThrottledError):
        collect(model)

    assert len(server.requests) == 1  # the agent's policy retries, not botocore


@pytest.mark.parametrize(
    ("status", "error_type", "expected", "retryable"),
    [
        (429, None, ModelThrottledError, True),
        (503, None, ModelThrottledError, True),
        (500, None, ModelHTTPError, True),
        (400, None, ModelHTTPError, False),
        (404, None, ModelHTTPError, False),
        (424, None, ModelHTTPError, False),
        (408, None, ModelHTTPError, True),
        (429, "ModelNotReadyException", ModelHTTPError, True),
    ],
)
def test_http_errors_map_to_model_errors(
    server: BedrockServer,
    model: BedrockModel,
    status: int,
    error_type: str | None,
    expected: type[ModelError],
    retryable: bool,
) -> None:
    server.add_turns({"status": status, "error_type": error_type, "error_message": "boom here"})

    with pytest.raises(expected) as caught:
        collect(model)

    error = caught.value
    assert isinstance(error, ModelHTTPError)
    assert error.retryable is retryable
    assert error.status == status
    assert error.body == "boom here"
    assert error.provider == "bedrock"
    assert isinstance(error.__cause__, Exception)


def test_validation_error_keeps_the_service_message(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"status": 400, "error_message": "The model returned: messages.0 is bad"})

    with pytest.raises(ModelHTTPError, match="ValidationException: The model returned") as caught:
        collect(model)

    assert caught.value.retryable is False
    assert not isinstance(caught.value, ContextWindowOverflowError)


@pytest.mark.parametrize(
    "message",
    [
        "Input is too long for requested model.",
        "input is too long",
        "The request has too many input tokens (210000 > 200000)",
    ],
)
def test_context_overflow_is_its_own_error(
    server: BedrockServer, model: BedrockModel, message: str
) -> None:
    server.add_turns(
        {"status": 400, "error_message": message},
        {"text": "x", "exception_type": "validationException", "error_message": message},
    )

    for _ in range(2):  # before the stream, then as a mid-stream exception message
        with pytest.raises(ContextWindowOverflowError):
            collect(model)


def test_retry_after_header_is_honoured(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns({"status": 429, "retry_after": 3})

    with pytest.raises(ModelThrottledError) as caught:
        collect(model)

    assert caught.value.retry_after == 3.0


def test_access_denied_is_clear_and_leaks_no_secret(
    server: BedrockServer, model: BedrockModel, caplog: pytest.LogCaptureFixture
) -> None:
    server.add_turns(
        {"status": 403, "error_message": "You don't have access to the model with this ID."},
        {"status": 403, "error_type": "UnrecognizedClientException",
         "error_message": "The security token included in the request is invalid."},
    )  # fmt: skip
    caplog.set_level(logging.DEBUG)

    errors = []
    for _ in range(2):
        with pytest.raises(ModelHTTPError) as caught:
            collect(model)
        errors.append(caught.value)

    assert [e.retryable for e in errors] == [False, False]
    assert "AccessDeniedException" in str(errors[0])
    assert "UnrecognizedClientException" in str(errors[1])
    assert "credentials" in str(errors[1])
    for text in [caplog.text, repr(model), *(f"{e!s} {e!r} {e.body}" for e in errors)]:
        assert SECRET_KEY not in text
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("agent_sync")]
    assert ours and not any(ACCESS_KEY in m or SECRET_KEY in m for m in ours)


@pytest.mark.parametrize(
    ("exception_type", "expected", "retryable"),
    [
        ("throttlingException", ModelThrottledError, True),
        ("serviceUnavailableException", ModelThrottledError, True),
        ("internalServerException", ModelHTTPError, True),
        ("modelStreamErrorException", ModelStreamError, True),
        ("validationException", ModelHTTPError, False),
    ],
)
def test_mid_stream_exception_messages_map_like_http_errors(
    server: BedrockServer,
    model: BedrockModel,
    exception_type: str,
    expected: type[ModelError],
    retryable: bool,
) -> None:
    server.add_turns(
        {"text": "Hello there", "exception_type": exception_type, "exception_after": 2}
    )
    seen: list[StreamEvent] = []

    with pytest.raises(expected) as caught:
        for event in model.stream(ModelRequest(messages=HELLO), cancel=CancelScope()):
            seen.append(event)

    assert caught.value.retryable is retryable
    assert exception_type in str(caught.value)
    assert text_of(seen) == "Hello th"  # what arrived before the exception was delivered


def test_corrupt_frame_is_a_stream_error(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns({"text": "Hello there", "corrupt_after": 2})

    with pytest.raises(ModelStreamError, match="malformed"):
        collect(model)


def test_truncated_stream_is_a_retryable_stream_error(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"text": "Hello there", "truncate_after": 2})

    with pytest.raises(ModelStreamError, match="truncated") as caught:
        collect(model)

    assert caught.value.retryable is True


def test_dropped_connection_is_a_connection_error(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"text": "Hello there", "drop_after": 2}, "after the drop")

    with pytest.raises(ModelConnectionError):
        collect(model)

    assert text_of(collect(model)) == "after the drop"  # the pool recovered


def test_connection_refused_is_a_connection_error(session: boto3.Session) -> None:
    with BedrockServer() as gone:
        url = gone.base_url
    model = BedrockModel("m", endpoint_url=url, boto_session=session, connect_timeout=2)

    with pytest.raises(ModelConnectionError) as caught:
        collect(model)

    assert caught.value.retryable is True


# --- docs ----------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "providers" / "bedrock.md"


@pytest.mark.parametrize(
    "code",
    [
        c
        for c in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
        if "# requires:" not in c
    ],
)
def test_doc_examples_run(code: str) -> None:
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})


def test_signed_and_redacted_reasoning_are_sent_back(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns("ok")
    signed = {"reasoningContent": {"reasoningText": {"text": "thought", "signature": "s1"}}}
    history: list[Any] = [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [signed, {"unknownBlock": {}}, {"text": "a"}]},
        {"role": "user", "content": [{"text": "q2"}]},
    ]

    collect(model, ModelRequest(messages=history))

    assert server.requests[0].body["messages"][1]["content"] == [signed, {"text": "a"}]


def test_non_streaming_errors_map_the_same_way(
    server: BedrockServer, session: boto3.Session
) -> None:
    server.add_turns({"status": 429}, {"status": 400, "error_message": "Input is too long"})
    plain = BedrockModel("m", endpoint_url=server.base_url, boto_session=session, streaming=False)

    with pytest.raises(ModelThrottledError):
        collect(plain)
    with pytest.raises(ContextWindowOverflowError):
        collect(plain)


def test_missing_credentials_is_a_clear_error(
    server: BedrockServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    model = BedrockModel("m", region_name="us-east-1", endpoint_url=server.base_url)

    with pytest.raises(ModelError, match="credentials") as caught:
        collect(model)

    assert caught.value.retryable is False
    assert server.requests == []
