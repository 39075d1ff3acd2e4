"""cancel() reaches OpenAIResponsesModel in every I/O state (connecting, before headers, a
silent stream, chunks flowing, retry back-off), leaves a history the Responses API (the
local fake, which refuses what the real one refuses) takes on the next call, and leaves the
connection pool healthy.

Each test blocks the run where the server says it is, cancels from another thread, and
checks the run returns promptly (a bound that only catches hangs; the figures are in
bench/bench_responses.py).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

from agent_sync import Agent, AgentResult, RetryPolicy, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import OpenAIResponsesModel
from agent_sync.models.base import ModelRequest
from agent_sync.testing import ResponsesServer
from tests.fixtures.bounds import HANG_BOUND, SLOW_ALTERNATIVE, cut_short_of
from tests.fixtures.streams import collect

from ._responses_fixtures import responses_fixtures
from .test_urllib3_abort import _connect_hangs, _unanswered_listener

KEY = "sk-resp-cancel-0123456789"

server, model = responses_fixtures(KEY)


def cancel_when(
    agent: Agent, ready: Callable[[], bool], *, trigger: str | None = None
) -> tuple[AgentResult, float]:
    """Stream a run in a thread; once ``ready()`` (and, with ``trigger``, that event was
    seen) cancel it; return its result and seconds from cancel() to its return."""
    seen = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        stream = agent.stream("go")
        for event in stream:
            if event.type == trigger:
                seen.set()
        box["result"], box["ended"] = stream.result, time.monotonic()

    thread = threading.Thread(target=run, name="test-run")
    thread.start()
    assert trigger is None or seen.wait(HANG_BOUND), "the run never reached the state"
    assert ready(), "the run never reached the state"
    cancelled_at = time.monotonic()
    assert agent.cancel("test")
    thread.join(HANG_BOUND)
    assert not thread.is_alive(), "the run did not return after cancel()"
    result: AgentResult = box["result"]
    assert result.stop_reason == "cancelled"
    assert validate_history(agent.messages) == []
    return result, box["ended"] - cancelled_at


def test_cancel_in_a_silent_stream_keeps_finished_reasoning_and_the_api_takes_it(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    # the reasoning item is done, the message's first text came, then silence
    server.add_turns({"reasoning": "think", "text": "The answer is 42", "chunk_size": 4,
                      "stall_after": 12}, "next")  # fmt: skip
    agent = Agent(model)
    result, took = cancel_when(agent, server.wait_for_stall, trigger="text")
    assert took < HANG_BOUND
    content = result.message["content"]
    assert content[0]["reasoningContent"]["reasoningText"]["text"] == "think"
    assert content[1]["text"].startswith("The") and content[-1] == {"text": CANCELLED_TEXT}
    assert server.wait_for_idle(), "the aborted socket was leaked"
    assert agent.invoke("again").text == "next"  # the fake refuses a bad history
    assert [i["type"] for i in server.requests[1].body["input"]][:3] == [
        "message", "reasoning", "message"]  # fmt: skip


def test_cancel_while_chunks_flow(server: ResponsesServer, model: OpenAIResponsesModel) -> None:
    server.add_turns({"text": "x" * 4000, "chunk_size": 4, "chunk_delay": 0.001}, "next")
    agent = Agent(model)
    result, took = cancel_when(agent, lambda: True, trigger="text")
    assert took < HANG_BOUND
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert server.wait_for_idle()
    assert agent.invoke("again").text == "next"


def test_cancel_while_a_reasoning_item_streams_drops_it(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns({"reasoning": "long thoughts here", "chunk_size": 4, "text": "unseen",
                      "stall_after": 5}, "next")  # fmt: skip
    agent = Agent(model)
    result, _ = cancel_when(agent, server.wait_for_stall, trigger="reasoning")
    assert result.message["content"] == [{"text": CANCELLED_TEXT}]  # unfinished: dropped
    assert agent.invoke("again").text == "next"


def test_cancel_before_headers(server: ResponsesServer, model: OpenAIResponsesModel) -> None:
    server.add_turns({"stall_headers": True}, "next")
    agent = Agent(model)
    _, took = cancel_when(agent, server.wait_for_stall)
    assert took < HANG_BOUND
    assert server.wait_for_idle()
    assert agent.invoke("again").text == "next"


def test_cancel_during_retry_back_off(server: ResponsesServer, model: OpenAIResponsesModel) -> None:
    server.add_turns({"status": 429, "retry_after": 30}, "unused")
    agent = Agent(model, retry=RetryPolicy(max_attempts=3, max_delay=60))
    _, took = cancel_when(agent, lambda: True, trigger="retry")
    assert took < cut_short_of(30)  # the back-off asked for 30 s
    assert len(server.requests) == 1


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
        model = OpenAIResponsesModel(
            "gpt-test",
            base_url=f"http://{host}:{port}/v1",
            api_key=KEY,
            timeout=(SLOW_ALTERNATIVE, SLOW_ALTERNATIVE),
        )
        agent = Agent(model)
        _, took = cancel_when(agent, lambda: connecting.wait(HANG_BOUND))
        assert took < cut_short_of(SLOW_ALTERNATIVE)  # the connect timeout
        model.close()
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_closing_the_generator_early_releases_the_connection(
    server: ResponsesServer, model: OpenAIResponsesModel
) -> None:
    server.add_turns({"text": "abcdefgh" * 4, "stall_after": 8}, "next")
    request = ModelRequest(messages=[{"role": "user", "content": [{"text": "hi"}]}])
    stream = model.stream(request, cancel=CancelScope())
    assert isinstance(stream, Generator)
    next(stream)
    next(stream)
    stream.close()
    assert server.wait_for_idle()
    assert any("contentBlockDelta" in e for e in collect(model))
