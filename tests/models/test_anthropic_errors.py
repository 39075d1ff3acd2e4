"""AnthropicModel error mapping, through the real SDK against the local SSE fake.

HTTP error bodies, mid-stream ``event: error``, malformed and truncated streams, dropped
connections: each becomes the documented :class:`~agent_sync.errors.ModelError` with the
right ``retryable``, ``status`` and ``retry_after``, and never shows the API key.
"""

from __future__ import annotations

import logging

import anthropic
import pytest

from agent_sync.cancel import CancelScope
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
)
from agent_sync.messages import StreamEvent
from agent_sync.models import AnthropicModel, ModelRequest
from agent_sync.testing.anthropic_server import AnthropicServer

from .test_anthropic import API_KEY, HELLO, assemble, collect, model, server

__all__ = ["model", "server"]  # fixtures, imported for pytest


def test_400_maps_to_non_retryable_http_error_with_the_provider_message(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"status": 400, "error_message": "max_tokens: must be positive"})
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    error = info.value
    assert (error.status, error.retryable, error.provider) == (400, False, "anthropic")
    assert "invalid_request_error" in str(error) and "max_tokens: must be positive" in str(error)
    assert isinstance(error.__cause__, anthropic.BadRequestError)


def test_prompt_too_long_maps_to_context_window_overflow(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {"status": 400, "error_message": "prompt is too long: 208310 tokens > 200000 maximum"}
    )
    with pytest.raises(ContextWindowOverflowError, match="prompt is too long"):
        collect(model)


@pytest.mark.parametrize(("status", "hint"), [(401, "API key"), (403, "permission")])
def test_auth_errors_are_clear_and_never_show_the_key(
    server: AnthropicServer, model: AnthropicModel, caplog: pytest.LogCaptureFixture,
    status: int, hint: str,
) -> None:  # fmt: skip
    server.add_turns({"status": status, "error_message": "invalid x-api-key"})
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    error = info.value
    assert error.status == status and error.retryable is False
    assert hint in str(error)
    for text in (str(error), repr(error), str(error.body), caplog.text, repr(model)):
        assert API_KEY not in text
    assert server.requests[0].headers["authorization"] == "***" or API_KEY not in str(
        server.requests[0].headers
    )


def test_429_is_throttled_with_retry_after(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"status": 429, "retry_after": 7, "error_message": "slow down"})
    with pytest.raises(ModelThrottledError) as info:
        collect(model)
    assert (info.value.status, info.value.retry_after, info.value.retryable) == (429, 7.0, True)
    assert "request-id req_" in str(info.value)


def test_529_overloaded_is_throttled(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"status": 529, "error_message": "Overloaded"})
    with pytest.raises(ModelThrottledError) as info:
        collect(model)
    assert info.value.status == 529 and info.value.retryable


def test_500_is_a_retryable_http_error(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"status": 500, "error_message": "Internal server error"})
    with pytest.raises(ModelHTTPError) as info:
        collect(model)
    assert not isinstance(info.value, ModelThrottledError)
    assert info.value.status == 500 and info.value.retryable


def test_overloaded_error_event_mid_stream_is_throttled(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {"text": "partial answer", "error_event_after": 3, "error_message": "Overloaded"}
    )
    events: list[StreamEvent] = []
    with pytest.raises(ModelThrottledError) as info:
        for event in model.stream(ModelRequest(messages=HELLO), cancel=CancelScope()):
            events.append(event)
    assert info.value.status == 529 and "Overloaded" in str(info.value)
    assert events[0] == {"messageStart": {"role": "assistant"}}


def test_api_error_event_mid_stream_is_a_stream_error(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"text": "abc", "error_event_after": 2, "error_type": "api_error"})
    with pytest.raises(ModelStreamError, match="api_error"):
        collect(model)


def test_malformed_event_is_a_stream_error(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"text": "hello world", "corrupt_after": 3})
    with pytest.raises(ModelStreamError, match="malformed"):
        collect(model)


def test_truncated_stream_is_a_retryable_stream_error(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"text": "hello world", "truncate_after": 4}, "next one works")
    with pytest.raises(ModelStreamError, match="truncated") as info:
        collect(model)
    assert info.value.retryable
    assert assemble(collect(model)).message["content"] == [{"text": "next one works"}]


def test_connection_dropped_mid_stream(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"text": "hello world", "drop_after": 3}, "recovered")
    with pytest.raises((ModelConnectionError, ModelStreamError)) as info:
        collect(model)
    assert info.value.retryable and info.value.provider == "anthropic"
    assert assemble(collect(model)).message["content"] == [{"text": "recovered"}]


def test_connection_refused_is_a_connection_error() -> None:
    with AnthropicServer() as srv:
        url = srv.base_url  # a port that is closed once the server is gone
    model = AnthropicModel("claude-test", client_args={"base_url": url, "api_key": API_KEY})
    with pytest.raises(ModelConnectionError, match="connection to Anthropic failed") as info:
        collect(model)
    assert info.value.retryable
    model.close()
