"""AnthropicModel hardening (issue 10): secrets, overflow wordings, request ids, cache
figures, prompt caching, JSON answers to stream requests and malformed content.

Real ``anthropic`` SDK against the local SSE fake (:class:`AnthropicServer`); stale
keep-alive connections and proxies are in test_anthropic_wire.py.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, cast

import anthropic
import pytest

from agent_sync import Agent, RetryPolicy, tool, validate_history
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    UsageError,
)
from agent_sync.messages import Message, StreamEvent, ToolSpec
from agent_sync.models import AnthropicModel
from agent_sync.models._anthropic_stream import EventTranslator
from agent_sync.models.base import CacheMode, ModelRequest
from agent_sync.testing.anthropic_server import AnthropicServer
from tests.fixtures.logs import RootRecords
from tests.fixtures.streams import HELLO, assemble, collect

from ._anthropic_fixtures import anthropic_fixtures

# No well-known secret shape: only registration at construction can hide it.
KEY = "local-anthropic-SECRET-7e1f2a9c4b"
SLOW_RETRY = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)
WEATHER: ToolSpec = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
CLOCK: ToolSpec = {
    "name": "clock",
    "description": "The time.",
    "inputSchema": {"json": {"type": "object", "properties": {}}},
}


server, model = anthropic_fixtures(KEY)


# -- item 9: secrets ---------------------------------------------------------------------------

ECHOES = [
    pytest.param({"status": 401, "error_message": f"invalid api key {KEY}"}, id="anthropic-401"),
    pytest.param({"status": 400, "error_message": f"bad request for key {KEY}"}, id="400"),
    pytest.param(
        {"status": 403, "error_body": {"error": {"message": f"key {KEY} is not allowed"}}},
        id="openai-shape",
    ),
    pytest.param({"status": 500, "error_body": f"upstream said {KEY}"}, id="plain-string"),
]


@pytest.mark.parametrize("turn", ECHOES)
@pytest.mark.parametrize("given", ["client_args", "env", "client"])
def test_an_echoed_key_reaches_no_error_surface_and_no_log_record(
    server: AnthropicServer,
    root_records: RootRecords,
    monkeypatch: pytest.MonkeyPatch,
    turn: dict[str, Any],
    given: str,
) -> None:
    if given == "client_args":
        model = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": KEY}
        )
    elif given == "env":
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        model = AnthropicModel("claude-test", client_args={"base_url": server.base_url})
    else:
        client = anthropic.Anthropic(api_key=KEY, base_url=server.base_url)
        model = AnthropicModel("claude-test", client=client)
    server.add_turns(turn)
    agent = Agent(model, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(ModelHTTPError) as info:
        agent.invoke("hello")
    model.close()
    error = info.value
    surfaces = [
        str(error),
        repr(error),
        repr(error.args),
        str(error.body),
        "".join(traceback.format_exception(error)),  # the SDK error chained as __cause__
        *root_records.texts,
    ]
    assert root_records.texts, "the root logger at DEBUG saw no record"
    leaks = [text for text in surfaces if KEY in text]
    assert leaks == []
    assert "***" in str(error) or "***" in str(error.body)


def test_a_key_in_extra_headers_is_not_logged_by_the_sdk(
    server: AnthropicServer, root_records: RootRecords
) -> None:
    server.add_turns("fine")
    model = AnthropicModel(
        "claude-test",
        client_args={"base_url": server.base_url, "api_key": "placeholder-key-1234"},
        extra_headers={"x-api-key": KEY},
    )
    assert assemble(collect(model)).message["content"] == [{"text": "fine"}]
    model.close()
    assert any("Request options" in text for text in root_records.texts)
    assert [text for text in root_records.texts if KEY in text] == []


# -- item 13: context overflow in every known wording ------------------------------------------

OVERFLOWS = [
    pytest.param(
        {"error_message": "prompt is too long: 208310 tokens > 200000 maximum"}, id="anthropic"
    ),
    pytest.param(
        {
            "error_type": "exceed_context_size_error",
            "error_message": "request (6033 tokens) exceeds the available context size "
            "(4096 tokens), try increasing it",
        },
        id="llama.cpp-anthropic",
    ),
    pytest.param(
        {"error_type": "exceed_context_size_error", "error_message": "too big"},
        id="llama.cpp-type-only",
    ),
    pytest.param(
        {
            "error_body": {
                "error": {
                    "code": 400,
                    "message": "request (6033 tokens) exceeds the available context size "
                    "(4096 tokens), try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 6033,
                    "n_ctx": 4096,
                }
            }
        },
        id="llama.cpp-openai-shape",
    ),
    pytest.param(
        {
            "error_body": {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "your messages resulted in 9000 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        },
        id="openai",
    ),
    pytest.param(
        {
            "error_body": {
                "object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 5000 tokens.",
                "type": "BadRequestError",
                "code": 400,
            }
        },
        id="vllm",
    ),
    pytest.param({"error_body": {"error": "input length exceeds the context length"}}, id="ollama"),
    pytest.param(
        {
            "error_body": {
                "error": {
                    "message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
                    "AnthropicException - prompt too long",
                    "type": None,
                    "param": None,
                    "code": "400",
                }
            }
        },
        id="litellm",
    ),
    pytest.param({"error_message": "Input is too long for requested model."}, id="bedrock"),
    pytest.param({"error_message": "too many input tokens: 250000 > 200000"}, id="bedrock-tokens"),
]


@pytest.mark.parametrize("turn", OVERFLOWS)
def test_every_overflow_wording_is_a_context_window_overflow(
    server: AnthropicServer, model: AnthropicModel, turn: dict[str, Any]
) -> None:
    server.add_turns({"status": 400, **turn})
    with pytest.raises(ContextWindowOverflowError) as info:
        collect(model)
    assert info.value.provider == "anthropic"


def test_a_plain_400_is_not_an_overflow(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"status": 400, "error_message": "max_tokens: must be positive"})
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    assert not isinstance(info.value, ContextWindowOverflowError)


# -- item 15: no request-id placeholder --------------------------------------------------------


def test_an_error_without_a_request_id_has_no_placeholder(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    # An `event: error` inside a 200 stream: the fake sends no request-id on 200 answers.
    server.add_turns({"text": "hello there", "error_event_after": 3, "error_type": "api_error"})
    with pytest.raises(ModelStreamError) as info:
        collect(model)
    assert "request-id" not in str(info.value)


def test_an_error_with_a_request_id_names_it(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"status": 400, "error_message": "nope"})
    with pytest.raises(ModelHTTPError, match=r"\(request-id req_[0-9a-f]+\)"):
        collect(model)


# -- item 14: cache figures in usage -----------------------------------------------------------


def usage_of(events: list[StreamEvent]) -> dict[str, int]:
    """The call's usage: the last ``metadata`` (the first carries message_start's figures)."""
    metadata = [e["metadata"] for e in events if "metadata" in e]
    assert "messageStop" in events[-2] and "metadata" in events[-1]
    return cast(dict[str, int], dict(metadata[-1]["usage"]))


def test_cache_figures_are_reported_with_converse_names(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    usage = {
        "inputTokens": 12,
        "outputTokens": 5,
        "cacheReadInputTokens": 1800,
        "cacheWriteInputTokens": 300,
    }
    server.add_turns({"text": "cached", "usage": usage})
    assert usage_of(collect(model)) == {
        "inputTokens": 12,  # Anthropic's input_tokens: the uncached rest of the prompt
        "outputTokens": 5,
        "totalTokens": 12 + 1800 + 300 + 5,
        "cacheReadInputTokens": 1800,
        "cacheWriteInputTokens": 300,
    }


def test_message_delta_updates_input_and_cache_figures(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {
            "text": "late figures",
            "usage": {"inputTokens": 1, "outputTokens": 4},
            "delta_usage": {"input_tokens": 40, "cache_read_input_tokens": 900},
        }
    )
    usage = usage_of(collect(model))
    assert usage["inputTokens"] == 40 and usage["cacheReadInputTokens"] == 900
    assert "cacheWriteInputTokens" not in usage  # never reported: never invented


def test_no_cache_figures_when_the_server_reports_none(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"text": "plain", "usage": {"inputTokens": 7, "outputTokens": 2}})
    assert usage_of(collect(model)) == {"inputTokens": 7, "outputTokens": 2, "totalTokens": 9}


def test_agent_usage_sums_cache_figures(server: AnthropicServer, model: AnthropicModel) -> None:
    usage = {"inputTokens": 3, "outputTokens": 2, "cacheReadInputTokens": 100}
    server.add_turns({"text": "one", "usage": usage}, {"text": "two", "usage": usage})
    agent = Agent(model, cache="short")
    agent.invoke("a")
    result = agent.invoke("b")
    assert result.usage.get("cacheReadInputTokens") == 100


# -- item 17: prompt caching -------------------------------------------------------------------

HISTORY: list[Message] = [
    {"role": "user", "content": [{"text": "weather in Paris?"}]},
    {
        "role": "assistant",
        "content": [
            {"text": "Let me look."},
            {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}},
        ],
    },
    {
        "role": "user",
        "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}}],
    },
]


def cached_request(cache: CacheMode | None) -> ModelRequest:
    return ModelRequest(
        messages=HISTORY, system_prompt="Be brief.", tool_specs=[WEATHER, CLOCK], cache=cache
    )


@pytest.mark.parametrize(
    ("cache", "control"),
    [("short", {"type": "ephemeral"}), ("long", {"type": "ephemeral", "ttl": "1h"})],
)
def test_cache_control_goes_on_system_last_tool_and_last_prior_block(
    server: AnthropicServer,
    model: AnthropicModel,
    cache: CacheMode,
    control: dict[str, str],
) -> None:
    server.add_turns("ok")
    collect(model, cached_request(cache))
    body = server.requests[0].body
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": control}]
    assert [tool.get("cache_control") for tool in body["tools"]] == [None, control]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                    "cache_control": control,
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "sunny"}],
                }
            ],
        },
    ]


def test_no_cache_sends_no_markers(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns("ok")
    collect(model, cached_request(None))
    body = server.requests[0].body
    assert body["system"] == "Be brief."  # a plain string, exactly as before caching existed
    assert "cache_control" not in str(body)


def test_a_single_message_gets_no_message_marker(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("ok")
    collect(model, ModelRequest(messages=HELLO, cache="short"))
    assert server.requests[0].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]


def test_the_marker_skips_a_thinking_block(server: AnthropicServer, model: AnthropicModel) -> None:
    thinking = {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "c2ln"}}}
    messages: list[Message] = [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [{"text": "a"}, thinking]},  # type: ignore[list-item]
        {"role": "user", "content": [{"text": "q2"}]},
    ]
    server.add_turns("ok")
    collect(model, ModelRequest(messages=messages, cache="short"))
    prior = server.requests[0].body["messages"][1]["content"]
    assert prior[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in prior[1]


def test_cache_flag_from_the_agent_reaches_the_wire(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("one", "two")
    agent = Agent(model, system_prompt="sys", cache="long")
    agent.invoke("a")
    agent.invoke("b", cache=None)
    first, second = (request.body for request in server.requests)
    assert first["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" not in str(second)


def test_rejected_cache_fields_are_dropped_once_and_remembered(
    root_records: RootRecords,
) -> None:
    with AnthropicServer(reject_cache_control=True) as server:
        model = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": KEY}
        )
        server.add_turns("first", "second")
        assert assemble(collect(model, cached_request("long"))).message["content"] == [
            {"text": "first"}
        ]
        assert assemble(collect(model, cached_request("long"))).message["content"] == [
            {"text": "second"}
        ]
        model.close()
        bodies = [str(request.body) for request in server.requests]
    # Rejected once, re-sent without the markers, then never sent them again.
    assert ["cache_control" in body for body in bodies] == [True, False, False]
    logged = [text for text in root_records.texts if "rejected the cache_control" in text]
    assert len(logged) == 1 and "DEBUG" in logged[0]


def test_concurrent_calls_drop_the_cache_fields_with_one_log(root_records: RootRecords) -> None:
    callers = 4
    with AnthropicServer(reject_cache_control=True) as server:
        model = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": KEY}
        )
        server.add_turns(*["answer"] * callers)
        barrier = threading.Barrier(callers)
        results: list[object] = []

        def call() -> None:
            barrier.wait(10)
            try:
                results.append(assemble(collect(model, cached_request("short"))).stop_reason)
            except Exception as exc:  # reported by the assertion below
                results.append(exc)

        threads = [threading.Thread(target=call, name=f"cache-{i}") for i in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        model.close()
    assert results == ["end_turn"] * callers
    logged = [text for text in root_records.texts if "rejected the cache_control" in text]
    assert len(logged) == 1


def test_an_unrelated_400_is_not_taken_for_a_cache_rejection(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"status": 400, "error_message": "max_tokens: must be positive"})
    with pytest.raises(ModelHTTPError):
        collect(model, cached_request("short"))
    assert len(server.requests) == 1


# -- item 12: a 200 application/json answer to a stream request --------------------------------


def test_a_json_message_answer_is_the_whole_answer(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {
            "json_answer": True,
            "text": "Looking it up.",
            "tool_calls": [{"id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
            "usage": {"inputTokens": 20, "outputTokens": 9, "cacheReadInputTokens": 4},
        }
    )
    events = collect(model, ModelRequest(messages=HELLO, tool_specs=[WEATHER]))
    result = assemble(events)
    assert result.message == {
        "role": "assistant",
        "content": [
            {"text": "Looking it up."},
            {"toolUse": {"toolUseId": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}},
        ],
    }
    assert result.stop_reason == "tool_use"
    assert usage_of(events) == {
        "inputTokens": 20,
        "outputTokens": 9,
        "totalTokens": 33,
        "cacheReadInputTokens": 4,
    }


def test_an_agent_runs_tools_on_json_answers(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return f"sunny in {city}"

    server.add_turns(
        {"json_answer": True, "tool_calls": [{"name": "get_weather", "input": {"city": "Rome"}}]},
        {"json_answer": True, "text": "It is sunny."},
    )
    agent = Agent(model, tools=[get_weather])
    result = agent.invoke("weather?")
    assert result.stop_reason == "end_turn" and result.text == "It is sunny."
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["content"] == [{"text": "sunny in Rome"}]
    assert validate_history(agent.messages) == []


def test_a_json_error_object_in_a_200_answer_is_an_error(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    server.add_turns({"json_answer": True, "error_body": error})
    with pytest.raises(ModelError, match="busy") as info:
        collect(model)
    assert info.value.retryable


def test_a_json_answer_that_is_no_message_is_a_stream_error(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"json_answer": True, "error_body": {"choices": []}})
    with pytest.raises(ModelStreamError, match="not an Anthropic Message"):
        collect(model)


# -- item 8 (second half): malformed content never escapes as a raw error ----------------------

BAD_HISTORIES: list[Any] = [
    pytest.param([{"role": "user", "content": [{"text": 42}]}], id="non-string-text"),
    pytest.param(
        [
            {"role": "user", "content": [{"text": "q"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "input": {}}}]},
        ],
        id="tool-use-without-name",
    ),
    pytest.param(
        [
            {
                "role": "user",
                "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": 5}]}}],
            }
        ],
        id="tool-result-non-string-text",
    ),
    pytest.param([{"role": "user", "content": None}], id="content-none"),
    pytest.param([{"content": [{"text": "no role"}]}], id="no-role"),
    pytest.param(["not a message"], id="not-a-dict"),
]


@pytest.mark.parametrize("messages", BAD_HISTORIES)
def test_a_malformed_history_is_a_usage_error(
    server: AnthropicServer, model: AnthropicModel, messages: list[Any]
) -> None:
    with pytest.raises(UsageError, match=r"messages\[\d\]"):
        collect(model, ModelRequest(messages=messages))
    assert server.requests == []  # nothing was sent


def test_a_malformed_tool_spec_is_a_usage_error(model: AnthropicModel) -> None:
    bad: Any = {"name": "x"}  # no inputSchema
    with pytest.raises(UsageError, match="tool spec"):
        collect(model, ModelRequest(messages=HELLO, tool_specs=[bad]))


MALFORMED_EVENTS: list[Any] = [
    pytest.param({"type": "content_block_delta"}, id="delta-without-index"),
    pytest.param({"type": "message_start", "message": None}, id="start-without-message"),
    pytest.param(
        {"type": "message_start", "message": {"usage": {"input_tokens": "many"}}}, id="bad-usage"
    ),
    pytest.param({"type": "content_block_start", "index": 0, "content_block": 5}, id="bad-block"),
    pytest.param("not an event", id="not-a-dict"),
    pytest.param(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
        id="text-delta-without-text",
    ),
]


@pytest.mark.parametrize("event", MALFORMED_EVENTS)
def test_a_malformed_stream_event_is_a_stream_error(event: Any) -> None:
    with pytest.raises(ModelStreamError, match="malformed Anthropic stream event"):
        list(EventTranslator().translate(event))
