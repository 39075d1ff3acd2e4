"""GeminiModel errors and keys: Google's error bodies mapped to the typed errors, broken
streams, and the API key kept out of every surface. Real requests against the local fake."""

from __future__ import annotations

from typing import Any

import pytest

from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
)
from agent_sync.models import GeminiModel
from agent_sync.models._gemini_errors import http_error
from agent_sync.testing.gemini_server import GeminiServer
from tests.fixtures.logs import RootRecords
from tests.fixtures.streams import assemble, collect

from ._gemini_fixtures import gemini_fixtures

KEY = "gemini-errors-SECRET-5e4d3c2b1a"

server, model = gemini_fixtures(KEY)


def _text(events: list[Any]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


# -- errors --------------------------------------------------------------------------------


def test_rate_limit_carries_the_retry_info_delay(server: GeminiServer, model: GeminiModel) -> None:
    server.add_turns({"status": 429, "retry_after": 37, "error_message": "Quota exceeded"})
    with pytest.raises(ModelThrottledError) as info:
        collect(model)
    assert info.value.retry_after == 37 and info.value.retryable
    assert "RESOURCE_EXHAUSTED" in str(info.value)


@pytest.mark.parametrize("status", [500, 503, 504])
def test_server_errors_are_retryable(server: GeminiServer, model: GeminiModel, status: int) -> None:
    server.add_turns({"status": status, "error_message": "The model is overloaded."})
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    assert info.value.retryable and info.value.status == status


def test_too_many_input_tokens_is_a_context_overflow(
    server: GeminiServer, model: GeminiModel
) -> None:
    message = (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    )
    server.add_turns({"status": 400, "error_message": message})
    with pytest.raises(ContextWindowOverflowError):
        collect(model)


def test_other_bad_requests_are_not_retryable(server: GeminiServer, model: GeminiModel) -> None:
    server.add_turns({"status": 400, "error_message": "Request contains an invalid argument."})
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    assert not info.value.retryable
    assert not isinstance(info.value, ContextWindowOverflowError)


def test_mid_stream_error_event(server: GeminiServer, model: GeminiModel) -> None:
    server.add_turns({"text": "partial answer", "error_type": "INTERNAL", "error_message": "boom"})
    with pytest.raises(ModelStreamError) as info:
        collect(model)
    assert "boom" in str(info.value) and info.value.retryable


def test_truncated_corrupt_and_dropped_streams(server: GeminiServer, model: GeminiModel) -> None:
    server.add_turns(
        {"text": "abcdefghijkl", "chunk_size": 4, "truncate_after": 2},
        {"text": "abcdefghijkl", "chunk_size": 4, "corrupt_after": 1},
        {"text": "abcdefghijkl", "chunk_size": 4, "drop_after": 1},
    )
    with pytest.raises(ModelStreamError, match="no finishReason") as truncated:
        collect(model)
    assert truncated.value.retryable
    with pytest.raises(ModelStreamError, match="malformed"):
        collect(model)
    with pytest.raises(ModelError) as dropped:
        collect(model)
    assert dropped.value.retryable


def test_json_answer_without_alt_sse_is_the_whole_message(server: GeminiServer) -> None:
    server.add_turns({"text": "whole answer", "chunk_size": 3})
    model = GeminiModel("gemini-2.5-flash", base_url=server.url, api_key=KEY)
    model.url = model.url.removesuffix("?alt=sse")  # a proxy that drops the query
    assembled = assemble(collect(model))
    model.close()
    assert assembled.message["content"] == [
        {"text": "whole answer"},
        {"reasoningContent": {"reasoningText": {"text": "", "signature": assembled.message[
            "content"][1]["reasoningContent"]["reasoningText"]["signature"]}}},
    ]  # fmt: skip


# -- keys ----------------------------------------------------------------------------------


def test_a_wrong_key_is_an_auth_error_that_never_shows_the_key(
    server: GeminiServer, root_records: RootRecords
) -> None:
    wrong = "wrong-key-SECRET-0f0f0f0f"
    model = GeminiModel("gemini-2.5-flash", base_url=server.url, api_key=wrong)
    server.add_turns("never")
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    model.close()
    error = info.value
    assert not error.retryable and "GEMINI_API_KEY" in str(error)
    assert "API_KEY_INVALID" in (error.body or "") or "API key not valid" in str(error)
    surfaces = [str(error), repr(error), repr(error.args), error.body or "", repr(model),
                "\n".join(root_records.texts)]  # fmt: skip
    assert root_records.texts
    for text in surfaces:
        assert wrong not in text and KEY not in text


def test_missing_key_is_refused_by_the_server_and_caught_before_sending_to_google(
    server: GeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    local = GeminiModel("gemini-2.5-flash", base_url=server.url)
    server.add_turns("never")
    with pytest.raises(ModelHTTPError) as info:
        collect(local)
    local.close()
    assert info.value.status == 403 and not info.value.retryable
    google = GeminiModel("gemini-2.5-flash")
    with pytest.raises(ModelError, match="GEMINI_API_KEY"):
        collect(google)
    google.close()


def test_key_from_the_environment(server: GeminiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    server.add_turns("env key works")
    env_model = GeminiModel("gemini-2.5-flash", base_url=server.url)
    assert _text(collect(env_model)) == "env key works"
    env_model.close()
    assert KEY not in repr(env_model)


def test_error_body_shapes() -> None:
    listed = '[{"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}]'
    assert http_error(503, listed, {}).retryable
    html = http_error(502, "<html>Bad Gateway</html>", {})
    assert html.retryable and "Bad Gateway" in str(html)
