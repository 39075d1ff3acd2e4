"""A stale pooled keep-alive connection is re-sent at once, and only when that is safe.

llama.cpp-style servers answer with ``Connection: keep-alive`` and then close the socket.
A client that reuses the pooled connection before it sees the close gets nothing back.
``agent_sync.testing._keepalive_server`` makes that race deterministic: after answering, a
connection waits for the next request and closes without a byte (or, for the negative
cases, with a few bytes, or closes a fresh connection). Real boto3 client, real urllib3
pool; no mocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from agent_sync import Agent, RetryPolicy
from agent_sync.errors import ModelConnectionError, ModelError
from agent_sync.events import Done, ModelRetry
from agent_sync.models import BedrockModel
from agent_sync.testing._http_server import ServerTurn
from agent_sync.testing._keepalive_server import KeepAliveServer, Mode, chunked_response
from agent_sync.testing.bedrock_server import BedrockServer
from tests.fixtures.streams import collect

from ._bedrock_fixtures import aws_session

CALLS = 5
# A back-off long enough that paying it even once fails the test's own bound.
SLOW_RETRY = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)
JOIN = 10.0


def _pong(path: str, number: int) -> bytes:
    """Every request is answered with the event-stream frames of the text "pong"."""
    frames = BedrockServer().render_frames(ServerTurn(text="pong"), None, "")
    return chunked_response(frames, "application/vnd.amazon.eventstream")


@pytest.fixture
def session() -> boto3.Session:
    return aws_session("AKIDKEEPALIVE", "keepalive-secret")


@pytest.fixture
def stale_server() -> Iterator[KeepAliveServer]:
    with KeepAliveServer(_pong, timeout=JOIN) as srv:
        yield srv


def _call(model: BedrockModel) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "")
        for e in collect(model)
        if "contentBlockDelta" in e
    )


@pytest.mark.parametrize("mode", ["close_on_reuse", "reset_on_reuse"])
def test_sequential_calls_survive_a_server_that_closes_kept_alive_connections(
    session: boto3.Session, mode: Mode
) -> None:
    with KeepAliveServer(_pong, mode, timeout=JOIN) as stale_server:
        model = BedrockModel("m", endpoint_url=stale_server.url, boto_session=session)
        answers = [_call(model) for _ in range(CALLS)]
        model.close()

    assert answers == ["pong"] * CALLS
    # every call after the first met a stale connection and was re-sent on a new one
    assert stale_server.connections == CALLS
    assert stale_server.received == 2 * CALLS - 1


def test_the_agent_pays_no_back_off_and_counts_no_retry(
    stale_server: KeepAliveServer, session: boto3.Session
) -> None:
    model = BedrockModel("m", endpoint_url=stale_server.url, boto_session=session)
    agent = Agent(model, retry=SLOW_RETRY)

    results: list[Any] = []
    retries: list[ModelRetry] = []
    for _ in range(CALLS):
        for event in agent.stream("ping"):
            if isinstance(event, ModelRetry):
                retries.append(event)
                agent.cancel("a retry is the failure this test is about")
            if isinstance(event, Done):
                results.append(event.result)
    model.close()

    assert retries == []
    assert [r.metrics.retries for r in results] == [0] * CALLS
    assert [r.text for r in results] == ["pong"] * CALLS


@pytest.mark.parametrize("mode", ["partial_on_reuse", "close_fresh"])
def test_no_resend_after_a_byte_came_back_or_on_a_fresh_connection(
    session: boto3.Session, mode: Mode
) -> None:
    with KeepAliveServer(_pong, mode, timeout=JOIN, partial=b"HTTP/1.1 2") as srv:
        model = BedrockModel("m", endpoint_url=srv.url, boto_session=session)
        if mode == "partial_on_reuse":
            assert _call(model) == "pong"
        with pytest.raises(ModelError) as caught:
            _call(model)
        model.close()

    assert isinstance(caught.value, ModelConnectionError)
    # one request per connection was answered, the failing one was sent exactly once
    assert srv.received == (2 if mode == "partial_on_reuse" else 1)
    assert srv.connections == 1
