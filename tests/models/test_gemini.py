"""GeminiModel.stream through real requests against the local Gemini API fake: the request
and answer mapping, thought signatures, usage, finish reasons, errors and secrets."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agent_sync import Agent, RetryPolicy, validate_history
from agent_sync.errors import (
    ModelStreamError,
)
from agent_sync.messages import Message
from agent_sync.models import GeminiModel
from agent_sync.models._gemini_stream import ResponseTranslator
from agent_sync.models.base import ModelRequest, OutputSchema
from agent_sync.testing.gemini_server import GeminiServer
from tests.fixtures.streams import assemble, collect

from ._gemini_fixtures import gemini_fixtures

KEY = "gemini-key-SECRET-7d1c0b9a8f"
PNG = b"\x89PNG\r\n\x1a\n-image-bytes"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
}

server, model = gemini_fixtures(KEY)


def _text(events: list[Any]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


# -- the request ---------------------------------------------------------------------------


def test_request_shape_path_key_system_roles_media_and_tools(
    server: GeminiServer, model: GeminiModel
) -> None:
    server.add_turns("ok")
    history: list[Message] = [
        {
            "role": "user",
            "content": [
                {"text": "Look"},
                {"image": {"format": "png", "source": {"bytes": PNG}}},
                {"document": {"format": "pdf", "name": "a", "source": {"bytes": b"%PDF-1"}}},
                {"document": {"format": "docx", "name": "b", "source": {"bytes": b"PK"}}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"text": "Checking."},
                {
                    "toolUse": {
                        "toolUseId": "toolu_01",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    }
                },
            ],
        },  # fmt: skip
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "toolu_01",
                        "status": "error",
                        "content": [{"text": "down"}],
                    }
                },
                {"text": "and now?"},
            ],
        },  # fmt: skip
    ]
    request = ModelRequest(
        messages=history,
        system_prompt="Be brief.",
        tool_specs=[WEATHER],
        tool_choice={"tool": {"name": "get_weather"}},
        params={"temperature": 0, "max_tokens": 50, "safetySettings": []},
    )
    assemble(collect(model, request))
    sent = server.requests[0]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == "***"  # recorded redacted: it was sent
    body = sent.body
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    user = body["contents"][0]["parts"]
    assert user[1] == {
        "inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    }
    assert user[2]["inlineData"]["mimeType"] == "application/pdf"
    assert "not shown" in user[3]["text"]  # no Office files inline: said, not failed
    call = body["contents"][1]["parts"][1]
    assert call["functionCall"] == {
        "id": "toolu_01",
        "name": "get_weather",
        "args": {"city": "Oslo"},
    }
    # Another provider's call gets Google's documented placeholder signature.
    assert call["thoughtSignature"] == "skip_thought_signature_validator"
    answer = body["contents"][2]["parts"]
    assert answer[0] == {
        "functionResponse": {"id": "toolu_01", "name": "get_weather", "response": {"error": "down"}}
    }
    assert answer[1] == {"text": "and now?"}
    assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["type"] == "object"
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
    }
    assert body["generationConfig"] == {"temperature": 0, "maxOutputTokens": 50}
    assert body["safetySettings"] == []


@pytest.mark.parametrize(
    ("choice", "mode"), [({"auto": {}}, "AUTO"), ({"any": {}}, "ANY"), ({"none": {}}, "NONE")]
)
def test_tool_choice_modes(
    server: GeminiServer, model: GeminiModel, choice: dict[str, Any], mode: str
) -> None:
    server.add_turns("ok")
    collect(model, ModelRequest(messages=_hello(), tool_specs=[WEATHER], tool_choice=choice))
    assert server.requests[0].body["toolConfig"]["functionCallingConfig"] == {"mode": mode}


def _hello() -> list[Message]:
    return [{"role": "user", "content": [{"text": "hi"}]}]


# -- the answer ----------------------------------------------------------------------------


def test_connection_is_reused_across_calls(server: GeminiServer, model: GeminiModel) -> None:
    # Gemini's stream has no end sentinel: the body's end is the answer's, read to it, so
    # the response goes back to the pool rather than being closed with its socket.
    server.add_turns({"text": "one"}, {"text": "two"}, {"text": "three"})
    for _ in range(3):
        collect(model)
    assert server.open_connections == 1  # one keep-alive socket served all three
    model.close()
    assert server.wait_for_idle()


def test_text_streams_with_usage(server: GeminiServer, model: GeminiModel) -> None:
    usage = {
        "inputTokens": 120,
        "outputTokens": 7,
        "reasoningTokens": 30,
        "cacheReadInputTokens": 64,
    }
    server.add_turns({"text": "Hello from Gemini", "chunk_size": 5, "usage": usage})
    events = collect(model)
    assert events[0] == {"messageStart": {"role": "assistant"}}
    deltas = [e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e]
    assert sum("text" in d for d in deltas) == 4
    assembled = assemble(events)
    assert _text(events) == "Hello from Gemini"
    assert assembled.stop_reason == "end_turn"
    # promptTokenCount includes the cached tokens; thinking is billed as output.
    assert assembled.usage == {
        "inputTokens": 120, "outputTokens": 37, "totalTokens": 157, "cacheReadInputTokens": 64,
        "reasoningTokens": 30,
    }  # fmt: skip


def test_function_calls_signature_and_ids_round_trip(
    server: GeminiServer, model: GeminiModel
) -> None:
    """Gemini 2.x sends no call ids: ours are made and sent back in the call and its
    response; a call with an id keeps it; the signature comes back on its call, untagged."""
    server.add_turns(
        {"reasoning": "Need weather.", "tool_calls": [
            {"name": "get_weather", "input": {"city": "Oslo"}},
            {"name": "get_weather", "input": {"city": "Bergen"}, "id": "fc-7"},
        ]},
        "Both mild.",
    )  # fmt: skip
    first = assemble(collect(model))
    content = first.message["content"]
    assert first.stop_reason == "tool_use"  # Gemini said STOP
    assert content[0] == {"reasoningContent": {"reasoningText": {"text": "Need weather."}}}
    signed = content[1]["reasoningContent"]["reasoningText"]
    assert signed["text"] == "" and signed["signature"].startswith("gemini:")
    uses = [b["toolUse"] for b in content if "toolUse" in b]
    assert uses[0]["toolUseId"].startswith("gcall_") and uses[1]["toolUseId"] == "fc-7"
    history: list[Message] = [
        *_hello(),
        first.message,
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": u["toolUseId"], "content": [{"json": {"c": 9}}]}}
            for u in uses
        ]},
    ]  # fmt: skip
    assert validate_history(history) == []
    assert _text(collect(model, ModelRequest(messages=history))) == "Both mild."
    sent = server.requests[1].body["contents"]
    parts = sent[1]["parts"]
    assert [p.get("thought") for p in parts] == [None, None]  # unsigned thoughts are not sent
    assert parts[0]["thoughtSignature"] == signed["signature"].removeprefix("gemini:")
    assert server.issued(parts[0]["thoughtSignature"])
    assert [p["functionCall"]["id"] for p in parts] == [u["toolUseId"] for u in uses]
    assert [p["functionResponse"]["id"] for p in sent[2]["parts"]] == [u["toolUseId"] for u in uses]
    assert sent[2]["parts"][0]["functionResponse"]["response"] == {"output": {"c": 9}}


def test_signed_text_and_signed_thought_parts_are_replayed_in_place() -> None:
    translator = ResponseTranslator()
    chunks = [
        {"candidates": [{"content": {"parts": [
            {"text": "plan", "thought": True, "thoughtSignature": "c2lnLXQ="}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "Answer "}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "done", "thoughtSignature": "c2lnLXg="}]},
                         "finishReason": "STOP"}]},
    ]  # fmt: skip
    events = [e for chunk in chunks for e in translator.add(chunk)] + translator.finish()
    message = assemble(events).message
    assert message["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "plan", "signature": "gemini:c2lnLXQ="}}},
        {"text": "Answer done"},
        {"reasoningContent": {"reasoningText": {"text": "", "signature": "gemini:c2lnLXg="}}},
    ]
    from agent_sync.models._gemini_format import build_request_body

    body = build_request_body(
        [*_hello(), message, {"role": "user", "content": [{"text": "more"}]}],
        system_prompt=None, tool_specs=(), tool_choice=None, params={},
    )  # fmt: skip
    assert body["contents"][1]["parts"] == [
        {"text": "plan", "thought": True, "thoughtSignature": "c2lnLXQ="},
        {"text": "Answer done", "thoughtSignature": "c2lnLXg="},
    ]


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "content_filtered"),
        ("RECITATION", "content_filtered"),
        ("BLOCKLIST", "content_filtered"),
        ("PROHIBITED_CONTENT", "content_filtered"),
        ("OTHER", "other"),
    ],
)
def test_finish_reasons(
    server: GeminiServer, model: GeminiModel, finish: str, stop_reason: str
) -> None:
    server.add_turns({"text": "partial", "stop_reason": finish})
    assert assemble(collect(model)).stop_reason == stop_reason


def test_blocked_prompt_is_content_filtered_and_the_history_stays_valid(
    server: GeminiServer, model: GeminiModel
) -> None:
    server.add_turns({"stop_reason": "prompt:PROHIBITED_CONTENT"}, "fine now")
    agent = Agent(model)
    result = agent.invoke("something bad")
    assert result.stop_reason == "content_filtered"
    assert validate_history(agent.messages) == []
    assert agent.invoke("something good").text == "fine now"


def test_malformed_function_call_is_a_retried_stream_error(
    server: GeminiServer, model: GeminiModel
) -> None:
    server.add_turns({"stop_reason": "MALFORMED_FUNCTION_CALL"})
    with pytest.raises(ModelStreamError) as info:
        collect(model)
    assert info.value.retryable
    server.add_turns({"stop_reason": "MALFORMED_FUNCTION_CALL"}, "second try")
    agent = Agent(model, retry=RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0))
    assert agent.invoke("go").text == "second try"
    assert len(server.requests) == 3


def test_structured_output_is_native_without_tools_and_a_tool_with_them(
    server: GeminiServer, model: GeminiModel
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    output = OutputSchema(name="final_result", description="The answer.", schema=schema)
    server.add_turns('{"city": "Oslo"}', {"tool_calls": [{"name": "final_result", "input": {}}]})
    collect(model, ModelRequest(messages=_hello(), output=output))
    config = server.requests[0].body["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    collect(model, ModelRequest(messages=_hello(), output=output, tool_specs=[WEATHER]))
    body = server.requests[1].body
    assert "generationConfig" not in body  # Gemini 2.x refuses JSON mode beside tools
    names = [d["name"] for d in body["tools"][0]["functionDeclarations"]]
    assert names == ["get_weather", "final_result"]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


def test_a_server_refusing_the_json_schema_gets_the_output_tool_once(
    server: GeminiServer, model: GeminiModel
) -> None:
    refusal = (
        'Invalid JSON payload received. Unknown name "responseJsonSchema" at '
        "'generation_config': Cannot find field."
    )
    output = OutputSchema(name="final_result", description="d", schema={"type": "object"})
    server.add_turns({"status": 400, "error_message": refusal}, "{}", "{}")
    collect(model, ModelRequest(messages=_hello(), output=output))
    collect(model, ModelRequest(messages=_hello(), output=output))
    bodies = [r.body for r in server.requests]
    assert "responseJsonSchema" in bodies[0]["generationConfig"]
    assert all("generationConfig" not in b and "toolConfig" in b for b in bodies[1:])


# -- edges ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "chunk",
    [
        {"candidates": [{"content": {"parts": [{"text": 5}]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]},
        {"candidates": [{"content": {"parts": "text"}}]},
        {"candidates": [{"content": {"parts": [{"text": "x", "thoughtSignature": 7}]}}]},
    ],
    ids=["text-not-str", "call-without-name", "parts-not-list", "signature-not-str"],
)
def test_a_malformed_chunk_is_a_stream_error(chunk: dict[str, Any]) -> None:
    with pytest.raises(ModelStreamError, match="malformed"):
        ResponseTranslator().add(chunk)


def test_a_history_gemini_cannot_express_is_a_usage_error_and_sends_nothing(
    server: GeminiServer, model: GeminiModel
) -> None:
    from agent_sync.errors import UsageError

    broken: list[Any] = [
        *_hello(),
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t", "name": "f", "input": 3}}],
        },
        {"role": "user", "content": [{"text": "?"}]},
    ]
    with pytest.raises(UsageError, match=r"messages\[1\]"):
        collect(model, ModelRequest(messages=broken))
    assert server.requests == []


def test_params_split_between_generation_config_and_top_level(
    server: GeminiServer, model: GeminiModel
) -> None:
    server.add_turns("ok")
    params = {
        "thinkingConfig": {"thinkingBudget": 0},
        "generationConfig": {"topK": 3},
        "stop": ["END"],
        "tools": [{"googleSearch": {}}],
        "cachedContent": "cachedContents/abc",
    }
    collect(model, ModelRequest(messages=_hello(), tool_specs=[WEATHER], params=params))
    body = server.requests[0].body
    assert body["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 0}, "topK": 3, "stopSequences": ["END"]
    }  # fmt: skip
    assert body["tools"][1] == {"googleSearch": {}}  # added beside the function declarations
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"
    assert body["cachedContent"] == "cachedContents/abc"


def test_structured_output_through_the_agent(server: GeminiServer, model: GeminiModel) -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    server.add_turns('{"name": "Oslo", "population": 709000}')
    agent = Agent(model)
    result = agent.invoke("Biggest Norwegian city?", output_type=City)
    assert result.output == City(name="Oslo", population=709000)
    config = server.requests[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["name", "population"]
    assert validate_history(agent.messages) == []


def test_traces_name_the_provider_as_the_genai_conventions_do() -> None:
    from agent_sync._tracing._providers import provider_name, usage_attributes

    gemini = GeminiModel("gemini-2.5-flash", api_key=KEY)
    assert provider_name(gemini) == "gcp.gemini"
    usage = {"inputTokens": 100, "outputTokens": 5, "cacheReadInputTokens": 60}
    # promptTokenCount already includes the cached tokens: not added twice.
    assert usage_attributes(usage, "gcp.gemini")["gen_ai.usage.input_tokens"] == 100
    gemini.close()
