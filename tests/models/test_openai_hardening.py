"""OpenAIModel hardening (issue 10): secrets, context overflow wordings, usage cache figures,
request ids, prompt caching, malformed content, JSON answers to stream requests, and stale
keep-alive connections. Real ``requests`` against local servers speaking the wire protocol.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, RetryPolicy, validate_history
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    UsageError,
)
from agent_sync.models import OpenAIModel
from agent_sync.models._openai_stream import ChunkTranslator
from agent_sync.models.base import CacheMode, ModelRequest
from agent_sync.testing._keepalive_server import KeepAliveServer, Mode, chunked_response
from agent_sync.testing.openai_server import ErrorShape, OpenAIServer
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.keepalive import (
    check_failure_after_a_byte_not_resent,
    check_fresh_failure_not_resent,
    check_stale_connection_resent,
)
from tests.fixtures.logs import RootRecords
from tests.fixtures.streams import assemble, collect

KEY = "local-token-SECRET-4f9a8b7c6d5e"  # no well-known shape: only registration hides it
AZURE_KEY = "azure-SECRET-0a1b2c3d4e5f6a7b"  # an extra credential header (Azure's api-key)
PROMPT = ModelRequest(messages=[{"role": "user", "content": [{"text": "hi"}]}])
SLOW_RETRY = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)
"""A retry would wait 30 s: a test that passes with it did not retry."""


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as s:
        yield s


def make_model(server: OpenAIServer, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel("gpt-test", base_url=server.url, api_key=KEY, timeout=(5, 30), **kwargs)


# -- item 9: secrets ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "turn",
    [
        {"status": 401, "error_message": f"Incorrect API key provided: {KEY} / {AZURE_KEY}."},
        {"status": 400, "error_message": f"bad header api-key={AZURE_KEY} with key {KEY}"},
        {"text": "partial", "error_type": "server_error", "error_message": f"{KEY} {AZURE_KEY}"},
    ],
    ids=["401-body", "400-body", "mid-stream"],
)
def test_echoed_credentials_reach_no_surface(
    server: OpenAIServer, root_records: RootRecords, turn: dict[str, Any]
) -> None:
    server.add_turns(turn)
    model = make_model(server, headers={"api-key": AZURE_KEY})
    with pytest.raises(ModelError) as info:
        collect(model)
    model.close()
    error = info.value
    surfaces = {
        "str": str(error),
        "repr": repr(error),
        "args": repr(error.args),
        "body": str(getattr(error, "body", "")),
        "model repr": repr(model),
        "logs": "\n".join(root_records.texts),
    }
    assert root_records.texts  # the capture works: urllib3 and the fake log at DEBUG
    for name, text in surfaces.items():
        assert KEY not in text, name
        assert AZURE_KEY not in text, name
        assert "SECRET" not in text, name


def test_openai_masked_key_stays_masked_and_the_hint_stays(server: OpenAIServer) -> None:
    masked = "sk-proj-" + "*" * 40 + "wxyz"
    server.add_turns({"status": 401, "error_message": f"Incorrect API key provided: {masked}."})
    model = make_model(server)
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    model.close()
    assert "Incorrect API key provided: sk-***." in str(info.value)
    assert "OPENAI_API_KEY" in str(info.value)
    assert "wxyz" not in str(info.value) and "wxyz" not in (info.value.body or "")


# -- item 13: context overflow, every wording of DESIGN 4a -----------------------------------

OVERFLOWS: list[tuple[ErrorShape, int, str | None, str]] = [
    ("openai", 400, "context_length_exceeded", "Your input is too large for this model."),
    ("openai", 400, "string_above_max_length", "Invalid 'messages[0].content': too long."),
    ("openai", 400, None, "This model's maximum context length is 8192 tokens."),
    ("openai", 400, None, "prompt is too long: 210012 tokens > 200000 maximum"),  # Anthropic
    ("litellm", 400, None, "BedrockException - Input is too long for requested model."),
    ("litellm", 400, None, "ValidationException: too many input tokens"),
    (
        "llama.cpp",
        400,
        "exceed_context_size_error",
        "request (6033 tokens) exceeds the available context size (4096 tokens)",
    ),  # fmt: skip
    ("llama.cpp", 400, "exceed_context_size_error", "the request does not fit"),  # type only
    ("llama.cpp", 400, None, "request (6033 tokens) exceeds the available context size"),
    (
        "vllm",
        400,
        None,
        "This model's maximum context length is 4096 tokens. However, you "
        "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
    ),  # fmt: skip
    ("ollama", 400, None, "input length exceeds the context length"),
    ("ollama", 500, None, "the input length exceeds maximum context length"),
    (
        "litellm",
        400,
        None,
        "litellm.ContextWindowExceededError: litellm.BadRequestError: "
        "OpenAIException - context window exceeded",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("shape", "status", "error_type", "message"), OVERFLOWS)
def test_context_overflow_wordings(
    shape: ErrorShape, status: int, error_type: str | None, message: str
) -> None:
    turn = {"status": status, "error_type": error_type, "error_message": message}
    with OpenAIServer([turn], error_shape=shape) as server:
        model = make_model(server)
        with pytest.raises(ContextWindowOverflowError) as info:
            collect(model)
        model.close()
    assert not info.value.retryable
    assert message.split()[0] in str(info.value)


def test_context_overflow_mid_stream_llama_cpp(server: OpenAIServer) -> None:
    server.add_turns(
        {
            "text": "",
            "error_type": "exceed_context_size_error",
            "error_message": "request (6033 tokens) exceeds the available context size",
        }
    )
    model = make_model(server)
    with pytest.raises(ContextWindowOverflowError):
        collect(model)
    model.close()


def test_ordinary_bad_request_is_not_an_overflow() -> None:
    turn = {"status": 400, "error_message": "Invalid value for 'temperature': 7"}
    with OpenAIServer([turn], error_shape="vllm") as server:
        model = make_model(server)
        with pytest.raises(ModelHTTPError) as info:
            collect(model)
        model.close()
    assert not isinstance(info.value, ContextWindowOverflowError)


# -- item 15: request ids without placeholder -------------------------------------------------


def test_request_id_named_when_sent_and_absent_otherwise() -> None:
    turn = {"status": 400, "error_message": "nope"}
    with OpenAIServer([turn]) as openai, OpenAIServer([turn], error_shape="llama.cpp") as llama:
        messages = []
        for server in (openai, llama):
            model = make_model(server)
            with pytest.raises(ModelHTTPError) as info:
                collect(model)
            model.close()
            messages.append(str(info.value))
    assert "(request-id req_test0001)" in messages[0]
    assert "request-id" not in messages[1]
    assert "nope" in messages[1]


# -- item 14: usage cache figures --------------------------------------------------------------


def test_cached_tokens_become_cache_read_input_tokens(server: OpenAIServer) -> None:
    usage = {"inputTokens": 1200, "outputTokens": 5, "cacheReadInputTokens": 1024}
    server.add_turns({"text": "cached", "usage": usage}, "uncached")
    model = make_model(server)
    cached, uncached = collect(model), collect(model)
    model.close()
    assert server.requests[0].body["stream_options"] == {"include_usage": True}
    # inputTokens is OpenAI's prompt_tokens: it includes the cached tokens.
    assert cached[-1] == {
        "metadata": {
            "usage": {
                "inputTokens": 1200,
                "outputTokens": 5,
                "totalTokens": 1205,
                "cacheReadInputTokens": 1024,
            }
        }
    }
    reported = uncached[-1]["metadata"]["usage"]  # not reported by the server: not added
    assert "cacheReadInputTokens" not in reported and reported["inputTokens"] == 10


# -- item 17: prompt caching ------------------------------------------------------------------


def _body_for(cache: CacheMode | None, cache_key: str | None = None) -> dict[str, Any]:
    with OpenAIServer(["ok"]) as server:
        model = make_model(server)
        collect(model, ModelRequest(messages=PROMPT.messages, cache=cache, cache_key=cache_key))
        model.close()
    body: dict[str, Any] = server.requests[0].body
    return body


def test_cache_fields_per_mode() -> None:
    plain = _body_for(None)
    assert not any(name.startswith("prompt_cache") for name in plain)
    assert _body_for("short") == plain  # automatic caching: nothing new
    assert _body_for("long") == {**plain, "prompt_cache_retention": "24h"}
    assert _body_for("long", "conv-42") == {
        **plain,
        "prompt_cache_retention": "24h",
        "prompt_cache_key": "conv-42",
    }


def test_agent_cache_long_reaches_the_wire(server: OpenAIServer) -> None:
    server.add_turns("one", "two")
    agent = Agent(make_model(server), cache="long")
    agent.invoke("a")
    agent.invoke("b", cache=None)
    assert server.requests[0].body["prompt_cache_retention"] == "24h"
    assert "prompt_cache_retention" not in server.requests[1].body


def test_rejected_cache_fields_are_dropped_once_with_a_debug_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fields = ("prompt_cache_retention", "prompt_cache_key")
    with OpenAIServer(["one", "two"], rejected_fields=fields) as server:
        model = make_model(server)
        agent = Agent(model, cache="long", retry=SLOW_RETRY)
        caplog.set_level(logging.DEBUG, logger="agent_sync.models.openai")
        assert agent.invoke("a").text == "one"
        assert agent.invoke("b").text == "two"
        model.close()
    sent = [[name for name in fields if name in r.body] for r in server.requests]
    assert sent == [["prompt_cache_retention"], [], []]  # refused once, then never sent
    assert agent.messages[-1]["content"] == [{"text": "two"}]
    drops = [r for r in caplog.records if "rejected the prompt cache fields" in r.getMessage()]
    assert len(drops) == 1 and drops[0].levelno == logging.DEBUG


def test_cache_field_drop_is_remembered_once_across_threads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    threads_n = 4
    fields = ("prompt_cache_retention",)
    with OpenAIServer(["ok"] * threads_n, rejected_fields=fields) as server:
        model = make_model(server)
        start = threading.Barrier(threads_n)
        texts: list[str] = []
        errors: list[BaseException] = []
        caplog.set_level(logging.DEBUG, logger="agent_sync.models.openai")

        def call() -> None:
            try:
                start.wait(HANG_BOUND)
                request = ModelRequest(messages=PROMPT.messages, cache="long")
                texts.append(assemble(collect(model, request)).message["content"][0]["text"])
            except BaseException as exc:  # noqa: BLE001 (asserted below)
                errors.append(exc)

        workers = [threading.Thread(target=call, name=f"test-call-{i}") for i in range(threads_n)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(10)
        model.close()
    assert errors == [] and texts == ["ok"] * threads_n
    refused = [r for r in server.requests if "prompt_cache_retention" in r.body]
    assert 1 <= len(refused) <= threads_n  # each call refused at most once, then never again
    assert len(server.requests) == threads_n + len(refused)
    drops = [r for r in caplog.records if "rejected the prompt cache fields" in r.getMessage()]
    assert len(drops) == 1


def test_rejection_of_other_fields_is_an_error() -> None:
    with OpenAIServer(["never"], rejected_fields=["temperature"]) as server:
        model = make_model(server, temperature=0)
        with pytest.raises(ModelHTTPError, match="temperature"):
            collect(model, ModelRequest(messages=PROMPT.messages, cache="long"))
        model.close()
    assert len(server.requests) == 1


# -- item 12: a chat.completion JSON answer to stream: true --------------------------------


def test_json_answer_to_a_stream_request_is_the_whole_message() -> None:
    turn = {
        "text": "Checking.",
        "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}, "id": "call_9"}],
        "usage": {"inputTokens": 40, "outputTokens": 9, "cacheReadInputTokens": 32},
    }
    with OpenAIServer([turn], json_for_streams=True) as server:
        model = make_model(server)
        events = collect(model)
        model.close()
    assert server.requests[0].body["stream"] is True
    assembled = assemble(events)
    assert assembled.stop_reason == "tool_use"
    assert assembled.message["content"] == [
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "call_9", "name": "get_weather", "input": {"city": "Oslo"}}},
    ]
    assert events[-1] == {
        "metadata": {
            "usage": {
                "inputTokens": 40,
                "outputTokens": 9,
                "totalTokens": 49,
                "cacheReadInputTokens": 32,
            }
        }
    }


def test_json_answer_through_the_agent() -> None:
    with OpenAIServer(["plain answer"], json_for_streams=True) as server:
        agent = Agent(make_model(server), retry=SLOW_RETRY)
        result = agent.invoke("hi")
    assert result.text == "plain answer" and result.stop_reason == "end_turn"
    assert validate_history(agent.messages) == []


# -- item 8: nothing malformed escapes as a raw TypeError/KeyError ---------------------------

MALFORMED_HISTORIES: list[list[Any]] = [
    [{"role": "user", "content": [{"text": 42}]}],
    [{"role": "user", "content": [{"text": "hi"}, {"text": None}]}],
    [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f"}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": []}}]},
    ],
    [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"text": 5}]},
        {"role": "user", "content": [{"text": "again"}]},
    ],
    [
        {"role": "user", "content": [{"text": "hi"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {"x": {1, 2}}}}],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": 5}]}}],
        },
    ],
    [{"role": "user"}],
    ["not a message"],
]


@pytest.mark.parametrize("history", MALFORMED_HISTORIES)
def test_malformed_history_is_a_usage_error_and_sends_nothing(
    server: OpenAIServer, history: list[Any]
) -> None:
    model = make_model(server)
    with pytest.raises(UsageError, match=r"messages\[\d\]"):
        collect(model, ModelRequest(messages=history))
    model.close()
    assert server.requests == []


MALFORMED_CHUNKS: list[Any] = [
    {"choices": "x"},
    {"choices": [{"delta": "text"}]},
    {"choices": [{"delta": {"content": 5}}]},
    {"choices": [{"delta": {"role": "assistant", "content": ["a"]}}]},
    {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": 7}]}}]},
    {"choices": [{"delta": {"tool_calls": ["call"]}}]},
    {"choices": [{"delta": {"reasoning_content": {"x": 1}}}]},
    {"choices": [None]},
]


@pytest.mark.parametrize("chunk", MALFORMED_CHUNKS)
def test_malformed_chunk_is_a_stream_error(chunk: Any) -> None:
    translator = ChunkTranslator()
    with pytest.raises(ModelStreamError, match="malformed stream chunk"):
        translator.add(chunk)
        translator.finish()


def test_malformed_usage_is_a_stream_error() -> None:
    translator = ChunkTranslator()
    translator.add({"choices": [], "usage": {"prompt_tokens": "many"}})
    with pytest.raises(ModelStreamError):
        translator.finish()


# -- item 11: stale keep-alive connections ----------------------------------------------------


def _sse_response(path: str, number: int) -> bytes:
    """An OpenAI chat.completion stream answering ``answer <number>``."""
    return chunked_response(
        [
            b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"'
            + f"answer {number}".encode()
            + b'"},"finish_reason":null}]}\n\n',
            b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
            b'"finish_reason":"stop"}]}\n\n',
            b"data: [DONE]\n\n",
        ]
    )


@pytest.fixture
def keepalive_server(request: pytest.FixtureRequest) -> Iterator[KeepAliveServer]:
    mode: Mode = getattr(request, "param", "close_on_reuse")
    with KeepAliveServer(_sse_response, mode) as server:
        yield server


def keepalive_model(server: KeepAliveServer) -> OpenAIModel:
    return OpenAIModel("llama", base_url=f"{server.url}/v1", timeout=(5, 10))


def test_stale_pooled_connection_is_resent_at_once_and_not_counted(
    keepalive_server: KeepAliveServer,
) -> None:
    check_stale_connection_resent(keepalive_model(keepalive_server), keepalive_server)


@pytest.mark.parametrize("keepalive_server", ["close_fresh"], indirect=True)
def test_fresh_connection_failure_is_not_resent(keepalive_server: KeepAliveServer) -> None:
    check_fresh_failure_not_resent(
        keepalive_model(keepalive_server), keepalive_server, ModelConnectionError
    )


@pytest.mark.parametrize("keepalive_server", ["partial_on_reuse"], indirect=True)
def test_failure_after_a_response_byte_is_not_resent(keepalive_server: KeepAliveServer) -> None:
    check_failure_after_a_byte_not_resent(keepalive_model(keepalive_server), keepalive_server)
