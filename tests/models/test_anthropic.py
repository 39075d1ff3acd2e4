"""AnthropicModel through the real ``anthropic`` SDK against the local SSE fake.

Covers the stream translation (text, tool use, thinking, usage, stop reasons), the request
translation (asserted on the JSON body the server received) and the error mapping.
Cancellation lives in test_anthropic_cancel.py, agent-level runs in test_anthropic_agent.py.
"""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import pytest

from agent_sync.cancel import CancelScope
from agent_sync.errors import (
    ModelError,
    UsageError,
)
from agent_sync.messages import Message, StreamEvent, ToolSpec
from agent_sync.models import AnthropicModel, ModelRequest
from agent_sync.models._anthropic_stream import EventTranslator
from agent_sync.run._assemble import AssembledMessage, MessageAssembler
from agent_sync.testing.anthropic_server import AnthropicServer

from ._anthropic_fixtures import anthropic_fixtures

API_KEY = "sk-ant-test-SECRET-0123456789"
HELLO: list[Message] = [{"role": "user", "content": [{"text": "hi"}]}]
WEATHER: ToolSpec = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


server, model = anthropic_fixtures(API_KEY)


def collect(model: AnthropicModel, request: ModelRequest | None = None) -> list[StreamEvent]:
    return list(model.stream(request or ModelRequest(messages=HELLO), cancel=CancelScope()))


def assemble(events: list[StreamEvent]) -> AssembledMessage:
    assembler = MessageAssembler()
    for event in events:
        assembler.add(event)
    return assembler.finish()


# --- response stream -------------------------------------------------------------------


def test_text_turn_streams_deltas_and_assembles(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"text": "Hello from the fake Claude!", "chunk_size": 5})
    events = collect(model)
    assert events[0] == {"messageStart": {"role": "assistant"}}
    deltas = [e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e]
    assert len(deltas) == 6 and "".join(deltas) == "Hello from the fake Claude!"
    result = assemble(events)
    assert result.message == {
        "role": "assistant",
        "content": [{"text": "Hello from the fake Claude!"}],
    }
    assert result.stop_reason == "end_turn"


def test_usage_reported_as_converse_metadata(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"text": "ok", "usage": {"inputTokens": 321, "outputTokens": 45}})
    events = collect(model)
    metadata = [e["metadata"] for e in events if "metadata" in e]
    # message_start's input figures at once (a call cancelled mid-stream still counts them),
    # then the whole call's after messageStop: the last one is the call's usage
    assert len(metadata) == 2
    assert metadata[0]["usage"] == {"inputTokens": 321, "outputTokens": 1, "totalTokens": 322}
    assert events[1] == {"metadata": metadata[0]}  # right after messageStart
    assert metadata[1]["usage"] == {"inputTokens": 321, "outputTokens": 45, "totalTokens": 366}
    assert "messageStop" in events[-2]  # Converse order: messageStop, then metadata


def test_tool_use_input_is_assembled_from_json_deltas(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    tool_input = {"city": "Oslo", "days": [1, 2, 3], "units": "metric"}
    server.add_turns(
        {
            "text": "Let me check.",
            "tool_calls": [{"id": "toolu_1", "name": "get_weather", "input": tool_input}],
        }  # fmt: skip
    )
    events = collect(model, ModelRequest(messages=HELLO, tool_specs=[WEATHER]))
    starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
    assert starts == [
        {
            "contentBlockIndex": 1,
            "start": {"toolUse": {"toolUseId": "toolu_1", "name": "get_weather"}},
        }
    ]
    pieces = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})
    ]
    assert len(pieces) > 1  # really streamed in fragments
    result = assemble(events)
    assert result.stop_reason == "tool_use"
    assert result.message["content"] == [
        {"text": "Let me check."},
        {"toolUse": {"toolUseId": "toolu_1", "name": "get_weather", "input": tool_input}},
    ]


def test_invalid_tool_json_is_passed_on_for_the_loop_to_answer(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {
            "tool_calls": [{"id": "toolu_bad", "name": "get_weather", "input": {}}],
            "raw_tool_input": {0: '{"city": "Osl'},
        }  # fmt: skip
    )
    result = assemble(collect(model, ModelRequest(messages=HELLO, tool_specs=[WEATHER])))
    assert result.message["content"] == [
        {"toolUse": {"toolUseId": "toolu_bad", "name": "get_weather", "input": {}}}
    ]
    assert "not valid JSON" in result.invalid_tool_inputs["toolu_bad"]


def test_thinking_with_signature_becomes_reasoning_content(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {
            "reasoning": "The user greets me; greet back warmly.",
            "signature": "sig-abc",
            "text": "Hello!",
        }  # fmt: skip
    )
    result = assemble(collect(model))
    assert result.message["content"] == [
        {"reasoningContent": {"reasoningText": {
            "text": "The user greets me; greet back warmly.", "signature": "sig-abc"}}},
        {"text": "Hello!"},
    ]  # fmt: skip


def test_redacted_thinking_round_trips(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"redacted_thinking": "opaque-blob", "text": "Done."}, "again")
    result = assemble(collect(model))
    assert result.message["content"][0] == {"reasoningContent": {"redactedContent": b"opaque-blob"}}
    more: Message = {"role": "user", "content": [{"text": "more"}]}
    history: list[Message] = [*HELLO, result.message, more]
    collect(model, ModelRequest(messages=history))
    sent = server.requests[1].body["messages"][1]["content"]
    assert sent == [{"type": "redacted_thinking", "data": "opaque-blob"},
                    {"type": "text", "text": "Done."}]  # fmt: skip


@pytest.mark.parametrize(
    ("wire", "converse"),
    [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "content_filtered"),
        ("model_context_window_exceeded", "max_tokens"),
        ("pause_turn", "pause_turn"),
        ("a_reason_from_the_future", "a_reason_from_the_future"),
    ],
)
def test_stop_reasons_map_to_converse(
    server: AnthropicServer, model: AnthropicModel, wire: str, converse: str
) -> None:
    server.add_turns({"text": "x", "stop_reason": wire, "stop_sequence": "###"})
    assert assemble(collect(model)).stop_reason == converse


def test_tool_use_stop_reason(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"tool_calls": [{"name": "get_weather", "input": {"city": "Rome"}}]})
    events = collect(model, ModelRequest(messages=HELLO, tool_specs=[WEATHER]))
    (stop,) = [e["messageStop"] for e in events if "messageStop" in e]
    assert (stop["stopReason"], stop["providerStopReason"]) == ("tool_use", "tool_use")
    assert stop["responseId"].startswith("msg_") and stop["responseModel"] == model.model_id


# --- request translation ---------------------------------------------------------------


def test_request_translation_of_a_full_conversation(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("ok")
    history: list[Message] = [
        {"role": "user", "content": [
            {"text": "Look at this"}, {"text": "   "},
            {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}},
            {"document": {"format": "txt", "name": "notes", "source": {"bytes": b"line one"}}},
        ]},
        {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "think", "signature": "s1"}}},
            {"reasoningContent": {"reasoningText": {"text": "unsigned, from elsewhere"}}},
            {"text": ""},
            {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}},
            {"toolUse": {"toolUseId": "t2", "name": "get_weather", "input": {"city": "Rome"}}},
        ]},
        {"role": "user", "content": [
            {"text": "and also"},
            {"toolResult": {"toolUseId": "t1", "status": "success",
                            "content": [{"text": "sunny"}, {"json": {"temp": 21}}]}},
            {"toolResult": {"toolUseId": "t2", "status": "error",
                            "content": [{"text": "Cancelled by user"}]}},
        ]},
    ]  # fmt: skip
    request = ModelRequest(
        messages=history,
        system_prompt="Be brief.",
        tool_specs=[WEATHER],
        tool_choice={"any": {}},
        params={"temperature": 0.2, "topP": 0.9, "stopSequences": ["END"], "maxTokens": 77,
                "metadata": {"user_id": "u-1"}},
    )  # fmt: skip
    collect(model, request)
    body = server.requests[0].body
    assert body["model"] == "claude-test" and body["stream"] is True
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 77
    assert (body["temperature"], body["top_p"], body["stop_sequences"]) == (0.2, 0.9, ["END"])
    assert body["metadata"] == {"user_id": "u-1"}  # unknown params pass through
    assert body["tools"] == [{"name": "get_weather", "description": "Weather for a city.",
                              "input_schema": WEATHER["inputSchema"]["json"]}]  # fmt: skip
    assert body["tool_choice"] == {"type": "any"}
    user, assistant, results = body["messages"]
    assert user["content"] == [
        {"type": "text", "text": "Look at this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw=="}},
        {"type": "document", "title": "notes",
         "source": {"type": "text", "media_type": "text/plain", "data": "line one"}},
    ]  # fmt: skip
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "think", "signature": "s1"},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    assert results["content"] == [  # tool results first, as the API requires
        {"type": "tool_result", "tool_use_id": "t1",
         "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": '{"temp": 21}'}]},
        {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
         "content": [{"type": "text", "text": "Cancelled by user"}]},
        {"type": "text", "text": "and also"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ({"auto": {}}, {"type": "auto"}),
        ({"any": {}}, {"type": "any"}),
        ({"tool": {"name": "get_weather"}}, {"type": "tool", "name": "get_weather"}),
    ],
)
def test_tool_choice_shapes(
    server: AnthropicServer, model: AnthropicModel, choice: dict[str, Any], wire: dict[str, Any]
) -> None:
    server.add_turns("ok")
    collect(model, ModelRequest(messages=HELLO, tool_specs=[WEATHER], tool_choice=choice))
    assert server.requests[0].body["tool_choice"] == wire


def test_blank_messages_are_dropped_and_same_roles_merged(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("ok")
    history: list[Message] = [
        {"role": "user", "content": [{"text": "first"}]},
        {"role": "assistant", "content": [{"text": " "}]},
        {"role": "user", "content": [{"text": "second"}]},
    ]
    collect(model, ModelRequest(messages=history, system_prompt="  "))
    body = server.requests[0].body
    assert "system" not in body
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}]  # fmt: skip


def test_model_params_and_call_options(server: AnthropicServer) -> None:
    server.add_turns("ok")
    model = AnthropicModel(
        "claude-test",
        max_tokens=123,
        client_args={"base_url": server.base_url, "api_key": API_KEY},
        temperature=0.5,
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_headers={"anthropic-beta": "some-beta"},
    )
    collect(model, ModelRequest(messages=HELLO, params={"temperature": 0.1}))
    recorded = server.requests[0]
    assert recorded.body["max_tokens"] == 123
    assert recorded.body["temperature"] == 0.1  # per-call params win
    assert recorded.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert recorded.headers["anthropic-beta"] == "some-beta"
    assert "extra_headers" not in recorded.body
    model.close()


def test_unsupported_document_format_is_a_clear_model_error(model: AnthropicModel) -> None:
    history: list[Message] = [{"role": "user", "content": [
        {"document": {"format": "docx", "name": "d", "source": {"bytes": b"x"}}}]}]  # fmt: skip
    with pytest.raises(ModelError, match="docx") as info:
        collect(model, ModelRequest(messages=history))
    assert info.value.retryable is False


# --- construction ----------------------------------------------------------------------


def test_construction_makes_no_request_and_repr_hides_the_key(server: AnthropicServer) -> None:
    model = AnthropicModel(
        "claude-test", client_args={"base_url": server.base_url, "api_key": API_KEY}
    )
    assert server.requests == []
    assert API_KEY not in repr(model) and "claude-test" in repr(model)
    assert model.client.max_retries == 0
    model.close()


def test_own_client_gets_sdk_retries_switched_off(server: AnthropicServer) -> None:
    server.add_turns("via your client")
    client = anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=5)
    model = AnthropicModel("claude-test", client=client)
    assert model.client.max_retries == 0
    assert assemble(collect(model)).message["content"] == [{"text": "via your client"}]
    model.close()  # leaves the caller's client usable
    server.add_turns("still open")
    assert assemble(collect(AnthropicModel("claude-test", client=client))).stop_reason == "end_turn"
    with pytest.raises(UsageError):
        AnthropicModel("m", client=client, client_args={"api_key": "x"})
    client.close()


def test_successful_call_logs_nothing_secret(
    server: AnthropicServer, model: AnthropicModel, caplog: pytest.LogCaptureFixture
) -> None:
    server.add_turns("fine")
    caplog.set_level(logging.DEBUG)  # the SDK and httpx2 log requests at DEBUG
    collect(model, ModelRequest(messages=[{"role": "user", "content": [{"text": "PROMPT-XYZ"}]}]))
    ours = [r for r in caplog.records if r.name.startswith("agent_sync")]
    assert ours, "the model logs its requests at DEBUG"
    assert API_KEY not in caplog.text
    assert all("PROMPT-XYZ" not in r.getMessage() for r in ours)  # prompts are not logged


def test_translator_skips_server_tool_blocks_and_takes_whole_tool_input() -> None:
    translator = EventTranslator()
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "server_tool_use", "id": "srv", "name": "web_search"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_delta", "index": 2,
         "delta": {"type": "citations_delta", "citation": {}}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
         "usage": {"output_tokens": 9}},
        {"type": "a_future_event"},
        {"type": "message_stop"},
    ]  # fmt: skip
    converted = [out for event in events for out in translator.translate(event)]
    result = assemble(converted)
    assert result.message["content"] == [
        {"toolUse": {"toolUseId": "t", "name": "f", "input": {"a": 1}}}
    ]
    assert result.usage == {"inputTokens": 5, "outputTokens": 9, "totalTokens": 14}
    assert translator.finished and translator.stop_reason == "tool_use"
