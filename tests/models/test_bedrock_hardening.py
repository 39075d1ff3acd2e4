"""BedrockModel hardening (issue 10): secrets, context overflow, usage cache figures,
request ids, prompt caching (cachePoint) and malformed content.

Real boto3 client against the local event-stream fake (agent_sync.testing.bedrock_server);
no mocks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from agent_sync import Agent
from agent_sync.errors import (
    AgentSyncError,
    ContextWindowOverflowError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
    UsageError,
)
from agent_sync.messages import Message, StreamEvent
from agent_sync.models import BedrockModel, ModelRequest
from agent_sync.models._wire import CONTEXT_OVERFLOW_MARKERS
from agent_sync.testing._http_server import ServerTurn
from agent_sync.testing.bedrock_server import BedrockServer
from tests.fixtures.logs import RootRecords
from tests.fixtures.streams import HELLO, collect

from ._bedrock_fixtures import aws_session, server

__all__ = ["server"]  # fixture, imported for pytest

ACCESS_KEY = "ASIAHARDENINGTEST01"
SECRET_KEY = "hardening/Secret+Key/wJalrXUtnFEMIK7MDENGbPxRfiCY"
# A temporary credential as STS hands it out (no recognisable shape of its own).
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEHardeningSessionToken0123456789abcdefABCDEF"
SPEC: Any = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
HISTORY: list[Message] = [
    {"role": "user", "content": [{"text": "first question"}]},
    {"role": "assistant", "content": [{"text": "first answer"}]},
    {"role": "user", "content": [{"text": "second question"}]},
]


@pytest.fixture
def temporary_session() -> boto3.Session:
    return aws_session(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)


@pytest.fixture
def model(server: BedrockServer, temporary_session: boto3.Session) -> Iterator[BedrockModel]:
    bedrock = BedrockModel(
        "test-model", endpoint_url=server.base_url, boto_session=temporary_session
    )
    yield bedrock
    bedrock.close()


def usage_of(events: list[StreamEvent]) -> Any:
    return next(e["metadata"]["usage"] for e in events if "metadata" in e)


# --- 10 / 9: secrets -------------------------------------------------------------------------


def test_no_credential_reaches_any_log_record_with_the_root_logger_at_debug(
    server: BedrockServer, model: BedrockModel, root_records: RootRecords
) -> None:
    server.add_turns("hello")

    collect(model)

    texts = root_records.texts
    names = {r.name for r in root_records.records}
    assert {"botocore.auth", "botocore.endpoint"} <= names  # the lines that carried them
    assert any("x-amz-security-token" in t.lower() for t in texts)
    for text in texts:
        assert SESSION_TOKEN not in text
        assert SECRET_KEY not in text


def test_an_error_body_echoing_the_credentials_leaks_them_nowhere(
    server: BedrockServer, model: BedrockModel, root_records: RootRecords
) -> None:
    echo = f"The security token {SESSION_TOKEN} signed with {SECRET_KEY} is invalid."
    server.add_turns(
        {"status": 403, "error_type": "UnrecognizedClientException", "error_message": echo},
        {"text": "x", "exception_type": "validationException", "error_message": echo},
    )

    errors: list[ModelError] = []
    for _ in range(2):  # before the stream, then as a mid-stream exception message
        with pytest.raises(ModelError) as caught:
            collect(model)
        errors.append(caught.value)

    assert isinstance(errors[0], ModelHTTPError) and errors[0].body
    for error in errors:
        surfaces = [str(error), repr(error), repr(error.args), str(getattr(error, "body", ""))]
        for text in surfaces + root_records.texts:
            assert SESSION_TOKEN not in text
            assert SECRET_KEY not in text
        assert "is invalid" in str(error)  # the message itself is kept


# --- 13: context overflow ----------------------------------------------------------------------

OVERFLOW_WORDINGS = [
    # DESIGN.md 4a, one realistic message per wording
    "This model's maximum context length is 8192 tokens, you requested 9000 tokens",
    "context_length_exceeded",
    "prompt is too long: 210000 tokens > 200000 maximum",
    "Input is too long for requested model.",
    "The request has too many input tokens (210000 > 200000)",
    "request (6033 tokens) exceeds the available context size (4096 tokens)",
    "exceed_context_size_error",
    "input length exceeds the context length",
    "litellm.ContextWindowExceededError: litellm.BadRequestError: too long",
    # and the shared table itself, every marker
    *CONTEXT_OVERFLOW_MARKERS,
]


@pytest.mark.parametrize("wording", OVERFLOW_WORDINGS)
def test_every_overflow_wording_is_a_context_window_overflow(
    server: BedrockServer, model: BedrockModel, wording: str
) -> None:
    server.add_turns(
        {"status": 400, "error_message": wording},
        {"status": 424, "error_message": wording},  # ModelErrorException, the model's words
        {"text": "x", "exception_type": "validationException", "error_message": wording},
    )

    for _ in range(3):
        with pytest.raises(ContextWindowOverflowError) as caught:
            collect(model)
        assert caught.value.retryable is False


def test_throttling_about_tokens_is_not_an_overflow(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"status": 429, "error_message": "Too many tokens, please wait."})

    with pytest.raises(ModelThrottledError):
        collect(model)


# --- 14: usage cache figures ---------------------------------------------------------------------

CACHED_USAGE = {
    "inputTokens": 12,
    "outputTokens": 5,
    "totalTokens": 2017,
    "cacheReadInputTokens": 1800,
    "cacheWriteInputTokens": 200,
}


@pytest.mark.parametrize("streaming", [True, False])
def test_cache_figures_pass_through_as_bedrock_reports_them(
    server: BedrockServer, temporary_session: boto3.Session, streaming: bool
) -> None:
    server.add_turns({"text": "hi", "usage": CACHED_USAGE}, {"text": "hi", "usage": {
        "inputTokens": 3, "outputTokens": 4}})  # fmt: skip
    model = BedrockModel(
        "m", endpoint_url=server.base_url, boto_session=temporary_session, streaming=streaming
    )

    assert usage_of(collect(model)) == CACHED_USAGE
    assert usage_of(collect(model)) == {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}
    model.close()


def test_agent_usage_carries_the_cache_figures(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns({"text": "hi", "usage": CACHED_USAGE})

    result = Agent(model).invoke("hello", cache="short")

    assert result.usage["cacheReadInputTokens"] == 1800
    assert result.usage["cacheWriteInputTokens"] == 200
    assert result.usage["inputTokens"] == 12


# --- 15: request ids, no placeholder ---------------------------------------------------------


def test_errors_name_the_request_id_only_when_one_was_sent(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns(
        {"status": 400, "error_message": "bad request"},  # the fake sends x-amzn-RequestId
        {"text": "x", "exception_type": "validationException", "error_message": "bad event"},
    )

    with pytest.raises(ModelHTTPError) as with_id:
        collect(model)
    with pytest.raises(ModelHTTPError) as without_id:
        collect(model)

    assert str(with_id.value).endswith("bad request (request-id req-error)")
    assert str(without_id.value).endswith("bad event")
    assert "request-id" not in str(without_id.value)


# --- 17: prompt caching ----------------------------------------------------------------------

SHORT = {"cachePoint": {"type": "default"}}
LONG = {"cachePoint": {"type": "default", "ttl": "1h"}}


@pytest.mark.parametrize(("cache", "point"), [("short", SHORT), ("long", LONG)])
def test_cache_points_after_system_tools_and_the_prior_message(
    server: BedrockServer, model: BedrockModel, cache: Any, point: dict[str, Any]
) -> None:
    server.add_turns("ok")
    request = ModelRequest(
        messages=HISTORY, system_prompt="Be brief.", tool_specs=[SPEC], cache=cache
    )

    collect(model, request)

    assert server.requests[0].body == {
        "messages": [
            {"role": "user", "content": [{"text": "first question"}]},
            {"role": "assistant", "content": [{"text": "first answer"}, point]},
            {"role": "user", "content": [{"text": "second question"}]},
        ],
        "system": [{"text": "Be brief."}, point],
        "toolConfig": {"tools": [{"toolSpec": SPEC}, point]},
    }


def test_no_cache_sends_no_cache_point(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns("ok")

    collect(model, ModelRequest(messages=HISTORY, system_prompt="Be brief.", tool_specs=[SPEC]))

    assert server.requests[0].body == {
        "messages": HISTORY,
        "system": [{"text": "Be brief."}],
        "toolConfig": {"tools": [{"toolSpec": SPEC}]},
    }


def test_a_first_turn_has_no_prior_message_to_mark(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns("ok")

    collect(model, ModelRequest(messages=HELLO, cache="short"))

    assert server.requests[0].body == {"messages": HELLO}


def test_agent_cache_flag_reaches_the_wire(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns("one", "two")
    agent = Agent(model, system_prompt="Be brief.", cache="long")

    agent.invoke("first")
    agent.invoke("second")

    first, second = (r.body for r in server.requests)
    assert first["system"] == [{"text": "Be brief."}, LONG]
    assert second["messages"][1] == {"role": "assistant", "content": [{"text": "one"}, LONG]}


def test_rejected_cache_points_are_dropped_once_and_remembered(
    server: BedrockServer, model: BedrockModel, caplog: pytest.LogCaptureFixture
) -> None:
    server.add_turns(
        {"status": 400, "error_message": "You invoked an unsupported model or your request "
         "did not allow prompt caching. See the documentation for cachePoint."},
        "answer without caching",
        "later answer",
    )  # fmt: skip
    caplog.set_level(logging.DEBUG, logger="agent_sync.models.bedrock")
    agent = Agent(model, system_prompt="Be brief.", cache="short")

    result = agent.invoke("hello")
    agent.invoke("again")

    assert result.text == "answer without caching"
    assert result.metrics.retries == 0  # re-sent at once, not a retry
    first, resent, later = (r.body for r in server.requests)
    assert first["system"] == [{"text": "Be brief."}, SHORT]
    assert resent["system"] == later["system"] == [{"text": "Be brief."}]
    assert "cachePoint" not in str(later)
    assert any("cachePoint rejected" in r.getMessage() for r in caplog.records)


def test_other_validation_errors_are_not_resent_without_cache(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"status": 400, "error_message": "messages.0 is bad"}, "not reached")

    with pytest.raises(ModelHTTPError):
        collect(model, ModelRequest(messages=HISTORY, system_prompt="s", cache="short"))

    assert len(server.requests) == 1


# --- 8: the translators raise only agent_sync errors ---------------------------------------------

MALFORMED_HISTORIES: list[Any] = [
    ["not a message"],
    [{"role": "user"}],  # no content
    [{"role": "user", "content": [42]}],
    [{"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": 5}}]}],
    [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [{"toolUse": {"name": "get_weather"}}]},  # no id
    ],
    [
        {"role": "user", "content": [{"text": "q"}]},
        {"role": "assistant", "content": [{"toolUse": None}]},
    ],
]


@pytest.mark.parametrize("history", MALFORMED_HISTORIES)
def test_a_malformed_history_is_a_usage_error_naming_the_message(
    server: BedrockServer, model: BedrockModel, history: Any
) -> None:
    with pytest.raises(UsageError, match=r"messages\[\d\] cannot be sent to Bedrock"):
        collect(model, ModelRequest(messages=history, tool_specs=[SPEC]))

    assert server.requests == []


def test_a_malformed_tool_spec_is_a_usage_error(server: BedrockServer, model: BedrockModel) -> None:
    with pytest.raises(UsageError, match="tool spec"):
        collect(model, ModelRequest(messages=HELLO, tool_specs=[42]))  # type: ignore[list-item]


class _MalformedServer(BedrockServer):
    """Answers ``converse`` with a document whose content has the wrong shapes."""

    def converse_body(self, turn: ServerTurn) -> dict[str, Any]:
        return {
            "output": {"message": {"role": "assistant", "content": [{"toolUse": {"name": "x"}}]}},
            "stopReason": "tool_use",  # a toolUse without its toolUseId
            "usage": {"inputTokens": 1, "outputTokens": 1},
        }


@pytest.mark.parametrize("streaming", [False, True])
def test_a_malformed_response_is_a_model_stream_error(
    temporary_session: boto3.Session, streaming: bool
) -> None:
    usage: Any = {"inputTokens": "many", "outputTokens": 1, "totalTokens": 1}
    turn = {"text": "hi", "usage": usage}
    with _MalformedServer([turn]) as bad:
        model = BedrockModel(
            "m", endpoint_url=bad.base_url, boto_session=temporary_session, streaming=streaming
        )
        with pytest.raises(AgentSyncError) as caught:
            collect(model)
        model.close()

    assert isinstance(caught.value, ModelStreamError)
    assert caught.value.retryable is False
