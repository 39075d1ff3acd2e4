"""OpenAIModel.stream through real requests against the local Chat Completions fake."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

from agent_sync import Agent
from agent_sync.cancel import CancelledError, CancelScope
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
)
from agent_sync.messages import StreamEvent
from agent_sync.models import OpenAIModel
from agent_sync.models.base import ModelRequest
from agent_sync.testing.openai_server import OpenAIServer
from tests.fixtures.bounds import HANG_BOUND, SLOW_ALTERNATIVE, cut_short_of
from tests.fixtures.streams import assemble, collect

from ._openai_fixtures import openai_fixtures
from .test_urllib3_abort import _connect_hangs, _unanswered_listener

KEY = "sk-test-SECRET-0123456789abcdef"
PROMPT = ModelRequest(messages=[{"role": "user", "content": [{"text": "hi"}]}])


server, model = openai_fixtures(KEY)


# -- responses -----------------------------------------------------------------------------


def test_text_stream_becomes_converse_events(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns(
        {"text": "Hello from the fake server", "usage": {"inputTokens": 7, "outputTokens": 5}}
    )
    events = collect(model)
    assert events[0] == {"messageStart": {"role": "assistant"}}
    text = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
    )
    assert text == "Hello from the fake server"
    (stop,) = [e["messageStop"] for e in events if "messageStop" in e]
    assert stop == {  # with the wire's own reason, the response's id and model (tracing)
        "stopReason": "end_turn",
        "providerStopReason": "stop",
        "responseId": stop["responseId"],
        "responseModel": server.model,
    }
    assert stop["responseId"].startswith("chatcmpl-")
    assert events[-1] == {
        "metadata": {"usage": {"inputTokens": 7, "outputTokens": 5, "totalTokens": 12}}
    }


def test_connection_is_reused_across_calls(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns("one", "two", "three")
    for _ in range(3):
        collect(model)
    assert server.open_connections == 1  # one keep-alive socket served all three
    model.close()
    assert server.wait_for_idle()


def test_reasoning_tokens_are_reported_apart_and_summed_over_the_run(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    usage = {"inputTokens": 7, "outputTokens": 25, "reasoningTokens": 20}
    server.add_turns({"text": "thought first", "usage": usage}, {"text": "again", "usage": usage})
    assert collect(model)[-1] == {
        "metadata": {"usage": {"inputTokens": 7, "outputTokens": 25, "totalTokens": 32,
                               "reasoningTokens": 20}}
    }  # fmt: skip
    result = Agent(model).invoke("hi")
    assert result.usage["reasoningTokens"] == 20  # part of outputTokens, as the wire counts


def test_parallel_tool_calls_interleaved_by_index() -> None:
    calls = [
        {"name": "get_weather", "input": {"city": "Oslo", "unit": "celsius"}, "id": "call_a"},
        {"name": "get_time", "input": {"zone": "Europe/Oslo"}, "id": "call_b"},
        {"name": "noop", "input": {}, "id": "call_c"},
    ]
    with OpenAIServer(
        [{"text": "Checking.", "tool_calls": calls, "chunk_size": 3}], interleave_tool_calls=True
    ) as server:
        model = OpenAIModel("gpt-test", base_url=server.url)
        assembled = assemble(collect(model))
        model.close()
    assert assembled.stop_reason == "tool_use"
    assert assembled.message["content"] == [
        {"text": "Checking."},
        {
            "toolUse": {
                "toolUseId": "call_a",
                "name": "get_weather",
                "input": {"city": "Oslo", "unit": "celsius"},
            }
        },
        {"toolUse": {"toolUseId": "call_b", "name": "get_time", "input": {"zone": "Europe/Oslo"}}},
        {"toolUse": {"toolUseId": "call_c", "name": "noop", "input": {}}},
    ]


def test_tool_arguments_that_are_not_json_reach_the_assembler_as_invalid(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns({"tool_calls": [{"name": "f", "input": {}}], "raw_tool_input": {0: "{oops"}})
    assembled = assemble(collect(model))
    tool_use = assembled.message["content"][0]["toolUse"]
    assert tool_use["input"] == {}
    assert "not valid JSON" in assembled.invalid_tool_inputs[tool_use["toolUseId"]]


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "content_filtered"),
        ("eos_token", "eos_token"),  # unknown reasons pass through
    ],
)
def test_finish_reasons(
    server: OpenAIServer, model: OpenAIModel, finish: str, stop_reason: str
) -> None:
    server.add_turns({"text": "x", "stop_reason": finish})
    (stop,) = [e["messageStop"] for e in collect(model) if "messageStop" in e]
    assert (stop["stopReason"], stop["providerStopReason"]) == (stop_reason, finish)


def test_reasoning_content_streams_as_reasoning(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"reasoning": "think first", "text": "answer"})
    message = assemble(collect(model)).message
    assert message["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "think first"}}},
        {"text": "answer"},
    ]


def test_body_left_open_after_done_does_not_hang_the_call(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns({"text": "complete", "stall_after": 99}, "next")  # [DONE], then silence
    started = time.monotonic()
    assert assemble(collect(model)).message["content"] == [{"text": "complete"}]
    assert time.monotonic() - started < cut_short_of(30)  # the read timeout is 30 s
    assert server.wait_for_idle()  # that connection was dropped, not pooled
    assert assemble(collect(model)).message["content"] == [{"text": "next"}]


def test_sse_comments_are_ignored() -> None:
    with OpenAIServer(["fine"], comments=True) as server:
        model = OpenAIModel("gpt-test", base_url=server.url)
        assert assemble(collect(model)).message["content"] == [{"text": "fine"}]
        model.close()


# -- request translation (asserted on the bodies the server received) --------------------------


def test_request_body_translation(server: OpenAIServer) -> None:
    server.add_turns("ok")
    model = OpenAIModel(
        "gpt-test", base_url=server.url, api_key=KEY, temperature=0.2, max_tokens=64
    )
    history: list[Any] = [
        {
            "role": "user",
            "content": [
                {"text": "Weather?"},
                {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "reasoningContent": {
                        "reasoningText": {"text": "secret thoughts", "signature": "s"}
                    }
                },
                {"text": "Let me check."},
                {"toolUse": {"toolUseId": "t1", "name": "weather", "input": {"city": "Oslo"}}},
                {"toolUse": {"toolUseId": "t2", "name": "weather", "input": {"city": "Rome"}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "t1",
                        "status": "success",
                        "content": [{"json": {"c": 3}}],
                    }
                },
                {
                    "toolResult": {
                        "toolUseId": "t2",
                        "status": "error",
                        "content": [{"text": "no data"}],
                    }
                },
                {"text": "And tomorrow?"},
            ],
        },
    ]
    request = ModelRequest(
        messages=history,
        system_prompt="Be brief.",
        tool_specs=[
            {
                "name": "weather",
                "description": "Get weather",
                "inputSchema": {"json": {"type": "object", "properties": {}}},
            }
        ],
        tool_choice={"tool": {"name": "weather"}},
        params={"top_p": 0.5, "stop": ["END"]},
    )
    collect(model, request)
    model.close()
    body = server.requests[0].body
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "***"  # sent (and redacted by the fake)
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["top_p"], body["stop"]) == (
        0.2,
        64,
        0.5,
        ["END"],
    )
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Get weather",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "t2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": '{"c": 3}'},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no data"},
        {"role": "user", "content": "And tomorrow?"},
    ]


@pytest.mark.parametrize(("choice", "wire"), [({"auto": {}}, "auto"), ({"any": {}}, "required")])
def test_tool_choice_mapping(
    server: OpenAIServer, model: OpenAIModel, choice: Any, wire: Any
) -> None:
    server.add_turns("ok")
    spec: Any = {"name": "f", "description": "d", "inputSchema": {"json": {"type": "object"}}}
    collect(model, ModelRequest(messages=PROMPT.messages, tool_specs=[spec], tool_choice=choice))
    assert server.requests[0].body["tool_choice"] == wire


def test_stream_cannot_be_turned_off_and_stream_options_can_be_dropped(
    server: OpenAIServer,
) -> None:
    server.add_turns("ok")
    model = OpenAIModel("gpt-test", base_url=server.url, stream=False, stream_options=None)
    assert assemble(collect(model)).message["content"] == [{"text": "ok"}]
    model.close()
    assert server.requests[0].body["stream"] is True
    assert "stream_options" not in server.requests[0].body


def test_api_key_from_environment(server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.add_turns("ok")
    model = OpenAIModel("gpt-test", base_url=server.url)
    collect(model)
    model.close()
    assert server.requests[0].headers["authorization"] == "***"
    assert KEY not in repr(model)


def test_no_network_at_construction() -> None:
    model = OpenAIModel("gpt-test", base_url="http://192.0.2.1:9/v1", api_key=KEY)  # unroutable
    assert "192.0.2.1" in repr(model)
    model.close()


# -- errors -----------------------------------------------------------------------------------


def test_malformed_data_line(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"text": "abcdefgh" * 3, "corrupt_after": 2})
    with pytest.raises(ModelStreamError, match="malformed data line"):
        collect(model)


def test_truncated_stream_without_done(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"text": "abcdefgh" * 3, "truncate_after": 2})
    with pytest.raises(ModelStreamError, match="ended before the response was complete") as info:
        collect(model)
    assert info.value.retryable


def test_dropped_connection(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"text": "abcdefgh" * 3, "drop_after": 2}, "after the drop")
    with pytest.raises((ModelStreamError, ModelConnectionError)) as info:
        collect(model)
    assert info.value.retryable
    assert assemble(collect(model)).message["content"] == [{"text": "after the drop"}]


def test_connection_refused_is_a_retryable_connection_error() -> None:
    with OpenAIServer() as server:
        url = server.url
    model = OpenAIModel("gpt-test", base_url=url, timeout=(2, 2))  # the server is gone
    with pytest.raises(ModelConnectionError) as info:
        collect(model)
    assert info.value.retryable
    model.close()


def test_context_length_exceeded(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns(
        {
            "status": 400,
            "error_type": "context_length_exceeded",
            "error_message": "This model's maximum context length is 8192 tokens.",
        }
    )
    with pytest.raises(ContextWindowOverflowError, match="maximum context length") as info:
        collect(model)
    assert not info.value.retryable


def test_bad_request_is_not_retryable(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"status": 400, "error_message": "Invalid value for 'temperature'"})
    with pytest.raises(ModelHTTPError, match="temperature") as info:
        collect(model)
    assert info.value.status == 400
    assert not info.value.retryable


def test_invalid_key_error_is_clear_and_never_shows_the_key(
    server: OpenAIServer, model: OpenAIModel, caplog: pytest.LogCaptureFixture
) -> None:
    # OpenAI echoes (a masked form of) the key; the fake echoes all of it to be strict.
    server.add_turns({"status": 401, "error_message": f"Incorrect API key provided: {KEY}."})
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    error = info.value
    assert error.status == 401
    assert not error.retryable
    assert "api_key" in str(error) and "OPENAI_API_KEY" in str(error)
    for text in (str(error), repr(error), error.body or "", repr(model), caplog.text):
        assert KEY not in text
        assert "SECRET" not in text


def test_server_error_is_retryable(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"status": 503, "error_message": "overloaded"})
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    assert info.value.status == 503 and info.value.retryable


def test_rate_limit_carries_retry_after(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"status": 429, "retry_after": 7, "error_message": "Rate limit reached"})
    with pytest.raises(ModelThrottledError, match="Rate limit reached") as info:
        collect(model)
    assert info.value.retry_after == 7.0
    assert info.value.retryable


def test_mid_stream_error_object(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"text": "partial", "error_type": "server_error", "error_message": "boom"})
    with pytest.raises(ModelStreamError, match="boom"):
        collect(model)


def test_mid_stream_rate_limit_is_throttling(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"error_type": "rate_limit_exceeded", "error_message": "slow down"})
    with pytest.raises(ModelThrottledError, match="slow down"):
        collect(model)


# -- cancellation -----------------------------------------------------------------------------


def _cancel_on_stall(
    server: OpenAIServer, scope: CancelScope, cancelled_at: list[float]
) -> threading.Thread:
    def run() -> None:
        if server.wait_for_stall(1, timeout=HANG_BOUND):
            cancelled_at.append(time.monotonic())
            scope.cancel("user")

    thread = threading.Thread(target=run, name="test-canceller")
    thread.start()
    return thread


def test_cancel_while_stream_is_silent(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"text": "abcdefgh" * 4, "stall_after": 3}, "next call works")
    scope = CancelScope()
    cancelled_at: list[float] = []
    seen: list[StreamEvent] = []
    canceller: threading.Thread | None = None
    with pytest.raises(CancelledError):
        for event in model.stream(PROMPT, cancel=scope):
            seen.append(event)
            if canceller is None and "contentBlockDelta" in event:
                # Cancel once this thread has consumed content and the server went silent.
                canceller = _cancel_on_stall(server, scope, cancelled_at)
    returned_at = time.monotonic()
    assert canceller is not None
    canceller.join(HANG_BOUND)
    assert returned_at - cancelled_at[0] < cut_short_of(30)  # the read timeout is 30 s
    assert any("contentBlockDelta" in e for e in seen)
    assert server.wait_for_idle()
    assert assemble(collect(model)).message["content"] == [{"text": "next call works"}]


def test_cancel_before_headers(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"stall_headers": True}, "next call works")
    scope = CancelScope()
    cancelled_at: list[float] = []
    canceller = _cancel_on_stall(server, scope, cancelled_at)
    with pytest.raises(CancelledError):
        collect_with(model, scope)
    returned_at = time.monotonic()
    canceller.join(HANG_BOUND)
    assert returned_at - cancelled_at[0] < cut_short_of(30)  # the read timeout is 30 s
    assert server.wait_for_idle()
    assert assemble(collect(model)).message["content"] == [{"text": "next call works"}]


def collect_with(model: OpenAIModel, scope: CancelScope) -> list[StreamEvent]:
    return list(model.stream(PROMPT, cancel=scope))


def test_closing_the_generator_early_releases_the_connection(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns({"text": "abcdefgh" * 4, "stall_after": 3})
    stream = model.stream(PROMPT, cancel=CancelScope())
    assert isinstance(stream, Generator)
    next(stream)
    next(stream)
    stream.close()
    assert server.wait_for_idle()


def test_cancel_while_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    listener, fillers = _unanswered_listener()
    try:
        host, port = listener.getsockname()
        if not _connect_hangs((host, port)):
            pytest.skip("this OS answers connects to a full backlog; cannot stage SYN_SENT")
        connecting = threading.Event()
        guarded_connect_ex = socket.socket.connect_ex

        def observed_connect_ex(sock: socket.socket, target: Any) -> int:
            code = guarded_connect_ex(sock, target)
            connecting.set()  # the SYN is out: the socket is in SYN_SENT
            return code

        monkeypatch.setattr(socket.socket, "connect_ex", observed_connect_ex)
        model = OpenAIModel("gpt-test", base_url=f"http://{host}:{port}/v1",
                            timeout=(SLOW_ALTERNATIVE, SLOW_ALTERNATIVE))  # fmt: skip
        scope = CancelScope()
        canceller = threading.Thread(
            target=lambda: connecting.wait(HANG_BOUND) and scope.cancel(), name="test-canceller"
        )
        canceller.start()
        started = time.monotonic()
        with pytest.raises(CancelledError):
            collect_with(model, scope)
        assert time.monotonic() - started < cut_short_of(SLOW_ALTERNATIVE)  # the connect timeout
        canceller.join(HANG_BOUND)
        model.close()
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_already_cancelled_scope_sends_nothing(server: OpenAIServer, model: OpenAIModel) -> None:
    scope = CancelScope()
    scope.cancel()
    with pytest.raises(CancelledError):
        collect_with(model, scope)
    assert server.requests == []


def test_shared_model_cancel_hits_only_its_own_call(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns(
        {"stall_headers": True}, {"text": "y" * 200, "chunk_size": 10, "chunk_delay": 0.002}
    )
    stalled_scope = CancelScope()
    outcome: list[BaseException] = []

    def stalled_call() -> None:
        try:
            collect_with(model, stalled_scope)
        except BaseException as exc:  # noqa: BLE001 (recorded for the assertion)
            outcome.append(exc)

    worker = threading.Thread(target=stalled_call, name="test-stalled-call")
    worker.start()
    assert server.wait_for_stall(1)
    text = ""
    for index, event in enumerate(model.stream(PROMPT, cancel=CancelScope())):
        if index == 5:
            stalled_scope.cancel()
        if "contentBlockDelta" in event:
            text += event["contentBlockDelta"]["delta"].get("text", "")
    worker.join(HANG_BOUND)
    assert text == "y" * 200
    assert len(outcome) == 1 and isinstance(outcome[0], CancelledError)
