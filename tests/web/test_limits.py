"""One worker serves everyone: its live runs are capped (``max_live_runs``: 503 with
``Retry-After``, nothing started), and a client that stops reading has its stream closed
(``write_timeout``) and catches up by reconnecting. Real werkzeug servers and sockets."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import select
import socket
from typing import Any

import flask
import pytest

from agent_sync import Agent
from agent_sync._run_log._local_log import HELD
from agent_sync.errors import UsageError
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web import _sse
from agent_sync.web.flask import chat_blueprint, sse_response
from tests.run._gates import Gate, gate_call

from ._chat_sites import FRAMEWORKS, serve_routes
from ._client import Frame, SSEConnection, frames_until, request_json, serve
from ._run_threads import run_threads
from .test_chat_routes import chat_app

ASKS = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
_CLOSED = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


pytestmark = pytest.mark.usefixtures("no_runs_left")


def _ui_body(cid: str, text: str) -> dict[str, object]:
    return {
        "id": cid,
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    }


def test_past_max_live_runs_a_new_run_gets_503_with_retry_after_and_nothing_starts() -> None:
    with chat_app(
        {"tool_calls": [gate_call()]}, {"tool_calls": [gate_call()]}, "one", "two", "three",
        max_live_runs=2,
    ) as app:  # fmt: skip
        app.allowed.update({"c3", "c4"})
        for cid in ("c1", "c2"):  # two runs go on after their clients left
            conn = app.chat(cid=cid)
            frames_until(conn, "tool_start")
            conn.drop()
        threads = len(run_threads())
        full = app.chat(cid="c3")
        assert full.status == 503 and full.headers["retry-after"].isdigit()
        assert full.json()["error"] == "busy_worker"
        status, body = request_json(app.port, "POST", "/api/chat", _ui_body("c4", "hello"))
        assert status == 503 and body["error"] == "busy_worker"  # AI SDK mode too
        assert app.store.load("c3").run is None and app.store.load("c4").run is None
        assert list(app.store.load("c3").messages) == [] and len(run_threads()) == threads
        app.gate.opened.set()  # both runs end: their slots come back
        for thread in run_threads():
            thread.join(10)
        again = app.chat(cid="c3")
        assert again.status == 200 and frames_until(again, "done")[-1].data["text"] == "three"


def test_a_decision_that_would_resume_a_run_past_the_cap_gets_503_and_it_stays_paused() -> None:
    with chat_app(
        ASKS, {"tool_calls": [gate_call()]}, "gate done", "deleted", max_live_runs=1
    ) as app:
        paused = app.chat(cid="c1")
        request = frames_until(paused, "approval_required")[-1].data  # a pause frees its slot
        for thread in run_threads():
            thread.join(10)
        busy = app.chat(cid="c2")
        frames_until(busy, "tool_start")
        decision = {"decisions": {request["approval_id"]: True}}
        path = f"/runs/{request['run_id']}/decisions"
        status, body = app.post(path, decision)
        assert (status, body["error"]) == (503, "busy_worker")
        assert app.store.get(request["run_id"]).status == "paused"  # type: ignore[union-attr]
        app.gate.opened.set()
        frames_until(busy, "done")
        for thread in run_threads():
            thread.join(10)
        assert app.post(path, decision)[0] == 202
        assert frames_until(paused, "done")[-1].data["text"] == "deleted"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_cap_and_its_retry_after_in_both_frameworks(framework: str) -> None:
    store = MemoryRunStore()
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "done"])

    def make_agent(cid: str) -> Agent:
        return Agent(model, tools=[gate.tool], store=store, conversation_id=cid)

    with serve_routes(framework, make_agent, store=store, max_live_runs=1) as port:
        try:
            first = SSEConnection(port, "/api/chat", {"conversation_id": "a", "message": "go"})
            frames_until(first, "tool_start")
            first.drop()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            try:
                body = json.dumps({"conversation_id": "b", "message": "go"})
                conn.request("POST", "/api/chat", body, {"Content-Type": "application/json"})
                answer = conn.getresponse()
                assert answer.status == 503 and answer.getheader("Retry-After") == "5"
                assert json.loads(answer.read())["error"] == "busy_worker"
            finally:
                conn.close()
            assert store.load("b").run is None
        finally:
            gate.opened.set()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_max_live_runs_must_be_a_positive_int(value: object) -> None:
    store = MemoryRunStore()
    with pytest.raises(UsageError, match="max_live_runs"):
        chat_blueprint(lambda cid: None, store=store, max_live_runs=value)  # type: ignore[arg-type,return-value]
    with pytest.raises(UsageError, match="write_timeout"):
        chat_blueprint(lambda cid: None, store=store, write_timeout=0)  # type: ignore[arg-type,return-value]


def _never_reading(port: int, cid: str) -> tuple[socket.socket, str]:
    """A client that reads up to its run's id, then never again (a tiny receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = f'{{"conversation_id": "{cid}", "message": "go"}}'
    sock.sendall(
        (
            "POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        ).encode()
    )
    seen = b""
    while (found := re.search(rb'"run_id":"([^"]+)"', seen)) is None:
        chunk = sock.recv(4096)  # what the buffer holds: the server's write drains once
        assert chunk, seen
        seen += chunk
    return sock, found.group(1).decode()


def test_a_client_that_never_reads_is_closed_and_catches_up_with_last_event_id() -> None:
    big = {"text": "z" * (4 << 20), "chunk_size": 4096}  # more than the socket buffers hold
    with chat_app(big, write_timeout=0.2) as app:
        sock, run_id = _never_reading(app.port, "c1")
        try:
            poller = select.poll()
            poller.register(sock, _CLOSED)
            # The server shuts the connection down once a write stays blocked 0.2 s; the
            # pytest-timeout bounds the wait if it never does.
            while not poller.poll(1000):
                pass
        finally:
            sock.close()
        # The run went on, and its stored log is the buffer: reconnects get all of it. A
        # reader slower than 0.2 s (a busy machine) is closed too, and resumes from its
        # Last-Event-ID, as a browser's EventSource does; each reconnect must bring more.
        frames: list[Frame] = []
        last: str | None = None  # the id of the last frame read
        while not frames or frames[-1].event != "done":
            again = app.events(run_id, last)
            try:
                before = len(frames)
                with contextlib.suppress(ConnectionResetError):  # how the server cuts it
                    for frame in again.frames():
                        last = frame.id or last
                        if frame.event != "comment" and (frame.event != "run" or not frames):
                            frames.append(frame)
                            if frame.event == "done":
                                break
                assert len(frames) > before, "a reconnect brought nothing"
            finally:
                again.drop()
        text = "".join(f.data["text"] for f in frames if f.event == "text")
        assert len(text) == 4 << 20 and frames[-1].data["stop_reason"] == "end_turn"
        assert len(frames) > HELD  # more records than a worker keeps in memory per run


def test_sse_response_closes_a_client_that_never_reads_and_cancels_its_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sse, "WRITE_TIMEOUT_S", 0.2)
    agent = Agent(ScriptedModel([{"text": "z" * (4 << 20), "chunk_size": 4096}]))
    app = flask.Flask(__name__)
    bodies: list[Any] = []

    @app.post("/api/chat")
    def chat() -> Any:
        response = sse_response(agent, "go")
        bodies.append(response.response)
        return response

    with serve(app) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.server_port))
        body = '{"conversation_id": "c1", "message": "go"}'
        sock.sendall(
            (
                "POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(body)}\r\n\r\n{body}"
            ).encode()
        )
        try:
            poller = select.poll()
            poller.register(sock, _CLOSED)
            while not poller.poll(1000):  # closed once a write stays blocked 0.2 s
                pass
        finally:
            sock.close()
        bodies[0].worker.join(10)  # the run was cancelled, its thread is done
        assert not agent.is_running
        assert agent.messages[-1]["role"] == "assistant"
