"""Cancel reaches a Gemini call in every I/O state (DESIGN 3 and 14): connecting, before the
headers, a silent stream, chunks flowing, the retry back-off. Each run then leaves a valid
history, releases its socket, and the next call works."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from agent_sync import Agent, AgentResult, RetryPolicy, validate_history
from agent_sync.cancel import CancelledError, CancelScope
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import GeminiModel
from agent_sync.testing.gemini_server import GeminiServer
from tests.fixtures.bounds import HANG_BOUND, SLOW_ALTERNATIVE, cut_short_of
from tests.fixtures.streams import collect

from ._gemini_fixtures import gemini_fixtures
from .test_urllib3_abort import _connect_hangs, _unanswered_listener

KEY = "gemini-cancel-SECRET-42"
CANCEL_BOUND = cut_short_of(30)
"""Milliseconds in practice (bench/bench_gemini.py); the bound only catches a wait that the
cancel did not cut short (each state would otherwise wait 30 s or more)."""

server, model = gemini_fixtures(KEY)


def _streamed(agent: Agent, prompt: str, on_event: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            stream = agent.stream(prompt)
            for event in stream:
                on_event(event)
            box["result"] = stream.result
        except BaseException as exc:  # noqa: BLE001 (asserted by the test)
            box["error"] = exc
        box["returned"] = time.monotonic()

    thread = threading.Thread(target=run, name="test-gemini-run")
    thread.start()
    return thread, box


def _cancel_and_check(
    agent: Agent,
    thread: threading.Thread,
    box: dict[str, Any],
    server: GeminiServer,
    *,
    socket_aborted: bool = True,
) -> AgentResult:
    cancelled_at = time.monotonic()
    assert agent.cancel("user")
    thread.join(HANG_BOUND)
    assert not thread.is_alive() and "error" not in box, box.get("error")
    assert box["returned"] - cancelled_at < CANCEL_BOUND
    result: AgentResult = box["result"]
    assert result.stop_reason == "cancelled"
    assert validate_history(agent.messages) == []
    if socket_aborted:
        assert server.wait_for_idle()  # the aborted socket was released
    return result


def test_cancel_before_headers(server: GeminiServer, model: GeminiModel) -> None:
    server.add_turns({"stall_headers": True}, "next call works")
    agent = Agent(model)
    thread, box = _streamed(agent, "hi", lambda event: None)
    assert server.wait_for_stall(1)
    _cancel_and_check(agent, thread, box, server)
    assert agent.invoke("again").text == "next call works"


def test_cancel_while_the_stream_is_silent(server: GeminiServer, model: GeminiModel) -> None:
    server.add_turns({"text": "The answer is", "chunk_size": 4, "stall_after": 2}, "recovered")
    agent = Agent(model)
    first_text = threading.Event()
    thread, box = _streamed(agent, "q", lambda e: e.type == "text" and first_text.set())
    assert first_text.wait(HANG_BOUND) and server.wait_for_stall(1)
    result = _cancel_and_check(agent, thread, box, server)
    assert result.message["content"][0]["text"].startswith("The")  # streamed text kept
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert agent.invoke("again").text == "recovered"


def test_cancel_while_chunks_flow_keeps_a_history_gemini_accepts(
    server: GeminiServer, model: GeminiModel
) -> None:
    flowing = {"text": "x" * 4000, "chunk_size": 4, "chunk_delay": 0.001}
    server.add_turns(flowing, "recovered")
    agent = Agent(model)
    texts = [0]
    enough = threading.Event()

    def on_event(event: Any) -> None:
        if event.type == "text":
            texts[0] += 1
            if texts[0] == 20:
                enough.set()

    thread, box = _streamed(agent, "count", on_event)
    assert enough.wait(HANG_BOUND)
    _cancel_and_check(agent, thread, box, server)
    assert agent.invoke("again").text == "recovered"  # the fake refuses invalid contents


def test_cancel_during_the_back_off_of_a_rate_limit(
    server: GeminiServer, model: GeminiModel
) -> None:
    server.add_turns({"status": 429, "retry_after": 30, "error_message": "Quota exceeded"})
    agent = Agent(model, retry=RetryPolicy(max_attempts=3, max_delay=60))
    retrying = threading.Event()
    thread, box = _streamed(agent, "hi", lambda e: e.type == "retry" and retrying.set())
    assert retrying.wait(HANG_BOUND)
    _cancel_and_check(agent, thread, box, server, socket_aborted=False)  # 429 read whole
    assert len(server.requests) == 1  # the 30 s wait (RetryInfo) was cut short


def test_cancel_while_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    listener, fillers = _unanswered_listener()
    try:
        host, port = listener.getsockname()
        if not _connect_hangs((host, port)):
            pytest.skip("this OS answers connects to a full backlog; cannot stage SYN_SENT")
        connecting = threading.Event()
        real_connect_ex = socket.socket.connect_ex

        def observed_connect_ex(sock: socket.socket, target: Any) -> int:
            code = real_connect_ex(sock, target)
            connecting.set()  # the SYN is out: the socket is in SYN_SENT
            return code

        monkeypatch.setattr(socket.socket, "connect_ex", observed_connect_ex)
        gemini = GeminiModel("gemini-2.5-flash", base_url=f"http://{host}:{port}/v1beta",
                             api_key=KEY, timeout=(SLOW_ALTERNATIVE, SLOW_ALTERNATIVE))  # fmt: skip
        scope = CancelScope()
        canceller = threading.Thread(
            target=lambda: connecting.wait(HANG_BOUND) and scope.cancel(), name="test-canceller"
        )
        canceller.start()
        started = time.monotonic()
        with pytest.raises(CancelledError):
            collect(gemini, cancel=scope)
        assert time.monotonic() - started < cut_short_of(SLOW_ALTERNATIVE)  # the connect timeout
        canceller.join(HANG_BOUND)
        gemini.close()
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
