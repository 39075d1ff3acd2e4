"""GeminiServer is faithful: the official ``google-genai`` SDK, pointed at it, parses what it
streams (text, thoughts, function calls, signatures, usage, finish and block reasons,
errors), and a conversation the SDK builds by the book is accepted while what the real API
refuses is refused, with the API's error shape."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from agent_sync.testing.gemini_server import GeminiServer

KEY = "gemini-sdk-key"
MODEL = "gemini-3-pro-preview"  # the signature rules of Gemini 3 apply
WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description="Weather for a city.",
            parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        )
    ]
)


@pytest.fixture
def server() -> Iterator[GeminiServer]:
    with GeminiServer(api_key=KEY) as s:
        yield s


def _client(server: GeminiServer, key: str = KEY) -> genai.Client:
    options = types.HttpOptions(base_url=server.base_url, retry_options=None)
    return genai.Client(api_key=key, http_options=options)


def test_text_thoughts_usage_and_finish_reason(server: GeminiServer) -> None:
    usage = {"inputTokens": 11, "outputTokens": 5, "reasoningTokens": 3}
    server.add_turns({"text": "Hello there", "reasoning": "think", "chunk_size": 4, "usage": usage})
    client = _client(server)  # held: a collected client closes its connection pool
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    parts = [p for c in chunks for p in c.candidates[0].content.parts]  # type: ignore[index,union-attr]
    assert "".join(p.text or "" for p in parts if p.thought) == "think"
    assert "".join(p.text or "" for p in parts if not p.thought) == "Hello there"
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert last.usage_metadata is not None
    assert last.usage_metadata.prompt_token_count == 11
    assert last.usage_metadata.candidates_token_count == 5
    assert last.usage_metadata.thoughts_token_count == 3
    assert last.response_id and last.model_version == "gemini-test-001"
    assert server.requests[0].path.endswith(f"/models/{MODEL}:streamGenerateContent?alt=sse")


def test_a_function_call_round_trip_built_by_the_sdk_is_accepted(server: GeminiServer) -> None:
    server.add_turns(
        {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]}, "Mild in Oslo."
    )
    client = _client(server)
    config = types.GenerateContentConfig(tools=[WEATHER])
    user = types.Content(role="user", parts=[types.Part(text="Weather in Oslo?")])
    chunks = list(
        client.models.generate_content_stream(model=MODEL, contents=[user], config=config)
    )
    model_turn = chunks[-1].candidates[0].content  # type: ignore[index]
    assert model_turn is not None and model_turn.parts
    call_part = model_turn.parts[0]
    assert call_part.function_call is not None
    assert (call_part.function_call.name, call_part.function_call.args) == (
        "get_weather",
        {"city": "Oslo"},
    )
    assert call_part.thought_signature is not None  # bytes, decoded by the SDK
    assert server.issued(base64.b64encode(call_part.thought_signature).decode())
    answer = types.Content(
        role="user",
        parts=[types.Part.from_function_response(name="get_weather", response={"output": "mild"})],
    )
    again = client.models.generate_content_stream(
        model=MODEL, contents=[user, model_turn, answer], config=config
    )
    assert "".join(c.text or "" for c in again) == "Mild in Oslo."


def test_what_the_api_refuses_is_refused_in_its_shape(server: GeminiServer) -> None:
    client = _client(server)
    server.add_turns("unused")
    user = types.Content(role="user", parts=[types.Part(text="hi")])
    call = types.Content(
        role="model",
        parts=[types.Part(function_call=types.FunctionCall(name="get_weather", args={}))],
    )  # unsigned: Gemini 3 refuses it in the current turn
    answer = types.Content(
        role="user",
        parts=[types.Part.from_function_response(name="get_weather", response={"output": "x"})],
    )
    orphan = types.Content(
        role="user",
        parts=[types.Part.from_function_response(name="get_weather", response={"output": "x"})],
    )
    cases = [
        ([user, call, answer], "thought_signature"),
        ([orphan], "function response turn comes immediately after a function call turn"),
        ([user, call], "ends with a user role"),
    ]
    for contents, message in cases:
        with pytest.raises(genai_errors.ClientError) as info:
            list(client.models.generate_content_stream(model=MODEL, contents=contents))
        assert info.value.code == 400 and info.value.status == "INVALID_ARGUMENT"
        assert message in str(info.value.message)
    wrong = _client(server, "wrong")
    with pytest.raises(genai_errors.ClientError) as bad_key:
        list(wrong.models.generate_content_stream(model=MODEL, contents="hi"))
    assert bad_key.value.code == 400 and "API key not valid" in str(bad_key.value.message)
    assert server.turns_left == 1  # refused requests use no turn


def test_errors_and_blocked_prompts_parse(server: GeminiServer) -> None:
    client = _client(server)
    server.add_turns(
        {"status": 429, "retry_after": 7, "error_message": "Quota exceeded"},
        {"status": 503, "error_message": "The model is overloaded."},
        {"stop_reason": "prompt:SAFETY"},
        {"text": "no", "stop_reason": "SAFETY"},
    )
    with pytest.raises(genai_errors.ClientError) as throttled:
        list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert throttled.value.code == 429 and throttled.value.status == "RESOURCE_EXHAUSTED"
    assert any(d.get("retryDelay") == "7s" for d in throttled.value.details["error"]["details"])
    with pytest.raises(genai_errors.ServerError) as overloaded:
        list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert overloaded.value.code == 503 and overloaded.value.status == "UNAVAILABLE"
    blocked = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert blocked[0].prompt_feedback is not None
    assert blocked[0].prompt_feedback.block_reason == types.BlockedReason.SAFETY
    unsafe = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert unsafe[-1].candidates[0].finish_reason == types.FinishReason.SAFETY  # type: ignore[index]


def test_tool_and_schema_configs_the_api_refuses(server: GeminiServer) -> None:
    client = _client(server)
    server.add_turns("unused")
    forced_unknown = types.GenerateContentConfig(
        tools=[WEATHER],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["nope"]
            )
        ),
    )
    schema_without_json = types.GenerateContentConfig(response_json_schema={"type": "object"})
    for config, message in [(forced_unknown, "not declared"), (schema_without_json, "json")]:
        with pytest.raises(genai_errors.ClientError) as info:
            list(client.models.generate_content_stream(model=MODEL, contents="hi", config=config))
        assert info.value.code == 400 and message in str(info.value.message)
    native = types.GenerateContentConfig(
        response_mime_type="application/json", response_json_schema={"type": "object"}
    )
    answer = client.models.generate_content_stream(model=MODEL, contents="hi", config=native)
    assert "".join(c.text or "" for c in answer) == "unused"  # a valid request is answered
