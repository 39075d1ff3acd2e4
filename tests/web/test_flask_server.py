"""The Flask example served by werkzeug's threaded server, driven over real sockets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from agent_sync import Agent
from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from agent_sync.web import ConversationRegistry
from tests.fixtures.bounds import HANG_BOUND

from ._client import SSEConnection, request_json, serve
from .conftest import CloseRecorder

pytestmark = pytest.mark.usefixtures("no_sse_threads_left")

CANCELLED = {"text": "Cancelled by user"}
STREAMING = {"text": "abcdefghij" * 30, "chunk_size": 2, "chunk_delay": 0.01}
STALLING = {"text": "abcdefghij" * 30, "chunk_size": 2, "stall_after": 3}


@dataclass
class Served:
    port: int
    registry: ConversationRegistry[Agent]
    recorder: CloseRecorder

    def chat(self, message: str, cid: str = "c1") -> SSEConnection:
        return SSEConnection(self.port, "/chat", {"conversation_id": cid, "message": message})

    def agent(self, cid: str = "c1") -> Agent:
        agent = self.registry.peek(cid)
        assert agent is not None
        return agent


@contextmanager
def served(flask_example: Any, *turns: Any, **options: Any) -> Iterator[Served]:
    app = flask_example.create_app(lambda: ScriptedModel(list(turns)), **options)
    recorder = CloseRecorder(app.wsgi_app)
    app.wsgi_app = recorder
    with serve(app) as server:
        yield Served(server.server_port, app.extensions["agent_sync.registry"], recorder)


def read_text(conn: SSEConnection, frames: int) -> str:
    text = ""
    for _ in range(frames):
        frame = conn.next_frame()
        assert frame is not None and frame.event == "text"
        text += frame.data["text"]
    return text


def assert_stopped_validly(agent: Agent, streamed: str) -> None:
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    last = agent.messages[-1]
    assert last["role"] == "assistant"
    assert last["content"][-1] == CANCELLED
    assert last["content"][0]["text"].startswith(streamed)


def test_answer_streams_as_sse_and_ends_with_done(flask_example: Any) -> None:
    with served(flask_example, {"text": "Hello there", "chunk_size": 4}) as app:
        conn = app.chat("hi")
        frames = list(conn.frames())
        conn.close()

    assert conn.status == 200
    assert conn.headers["content-type"].startswith("text/event-stream")
    assert conn.headers["cache-control"] == "no-cache"
    assert conn.headers["x-accel-buffering"] == "no"
    assert frames[0].event == "comment"
    text = "".join(f.data["text"] for f in frames if f.event == "text")
    assert text == "Hello there"
    assert frames[-1].event == "done"
    assert frames[-1].data["stop_reason"] == "end_turn"
    assert frames[-1].data["usage"]["totalTokens"] > 0


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
def test_disconnect_while_streaming_cancels_and_leaves_history_valid(
    flask_example: Any, reset: bool
) -> None:
    with served(flask_example, STREAMING, "second answer") as app:
        conn = app.chat("hi")
        streamed = read_text(conn, 3)
        conn.drop(reset=reset)

        assert app.recorder.closed.wait(HANG_BOUND), "the server never closed the response"
        agent = app.agent()
        assert_stopped_validly(agent, streamed)
        assert agent.messages[0] == {"role": "user", "content": [{"text": "hi"}]}

        # The conversation goes on: the next message gets an answer.
        conn = app.chat("again")
        frames = list(conn.frames())
        conn.close()
        assert frames[-1].data["stop_reason"] == "end_turn"
        assert validate_history(agent.messages) == []


def test_disconnect_while_model_is_silent_is_noticed_through_keepalives(
    flask_example: Any,
) -> None:
    with served(flask_example, STALLING, keepalive=0.05) as app:
        conn = app.chat("hi")
        streamed = read_text(conn, 3)
        assert conn.next_frame(skip_comments=False) == conn_frame_keepalive()
        conn.drop()

        assert app.recorder.closed.wait(HANG_BOUND), "silent stream: disconnect never noticed"
        assert_stopped_validly(app.agent(), streamed)


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
def test_disconnect_while_silent_is_noticed_at_once_through_the_socket(
    flask_example: Any, reset: bool
) -> None:
    # Keep-alives every 60 s could not reveal the drop within the 5 s below: werkzeug
    # exposes the client socket, and the stream watches it.
    with served(flask_example, STALLING, keepalive=60) as app:
        conn = app.chat("hi")
        streamed = read_text(conn, 3)
        conn.drop(reset=reset)

        assert app.recorder.closed.wait(HANG_BOUND), "silent stream: disconnect never noticed"
        assert_stopped_validly(app.agent(), streamed)


def test_client_bytes_during_the_stream_are_not_taken_for_a_disconnect(
    flask_example: Any,
) -> None:
    with served(flask_example, STALLING, keepalive=0.05) as app:
        conn = app.chat("hi")
        read_text(conn, 3)
        conn.sock.sendall(b"GET / HTTP/1.1\r\n")  # a stray pipelined request line
        frames = [conn.next_frame(skip_comments=False) for _ in range(3)]
        assert frames == [conn_frame_keepalive()] * 3
        assert app.agent().is_running
        conn.drop()
        assert app.recorder.closed.wait(HANG_BOUND)
        assert not app.agent().is_running


def conn_frame_keepalive() -> Any:
    from ._client import Frame

    return Frame("comment", "keep-alive")


def test_stop_button_cancel_endpoint_ends_stream_with_cancelled_done(
    flask_example: Any,
) -> None:
    with served(flask_example, STALLING) as app:
        conn = app.chat("hi")
        streamed = read_text(conn, 3)

        status, body = request_json(app.port, "POST", "/cancel", {"conversation_id": "c1"})
        assert (status, body) == (200, {"cancelled": True})
        done = conn.next_frame()
        assert done is not None and done.event == "done"
        assert done.data["stop_reason"] == "cancelled"
        assert done.data["cancel_reason"] == "stopped by user"
        assert conn.next_frame() is None
        conn.close()
        assert app.recorder.closed.wait(HANG_BOUND)
        assert_stopped_validly(app.agent(), streamed)

        # Cancelling an idle conversation is a harmless no-op.
        status, body = request_json(app.port, "POST", "/cancel", {"conversation_id": "c1"})
        assert (status, body) == (200, {"cancelled": False})


def test_timeout_cancels_with_reason_timeout(flask_example: Any) -> None:
    with served(flask_example, STALLING, timeout=0.2) as app:
        conn = app.chat("hi")
        frames = list(conn.frames())
        conn.close()

        assert frames[-1].event == "done"
        assert frames[-1].data["stop_reason"] == "cancelled"
        assert frames[-1].data["cancel_reason"] == "timeout"
        assert_stopped_validly(app.agent(), "")


def test_second_message_while_answering_gets_409_and_changes_nothing(
    flask_example: Any,
) -> None:
    with served(flask_example, STALLING, keepalive=0.05) as app:
        conn = app.chat("first")
        read_text(conn, 3)
        agent = app.agent()
        before = agent.messages

        status, body = request_json(
            app.port, "POST", "/chat", {"conversation_id": "c1", "message": "second"}
        )
        assert status == 409
        assert body["error"] == "busy"
        assert agent.is_running
        assert agent.messages == before

        # Another conversation is independent.
        other = app.chat("elsewhere", cid="c2")
        assert other.status == 200
        other.drop()
        conn.drop()
        # three bodies: the two streams and the 409
        assert app.recorder.wait_for_closes(3), "the server never closed the responses"
    assert validate_history(agent.messages) == []
    assert all(b.get("text") != "second" for m in agent.messages for b in m["content"])


def test_tool_calls_stream_tool_frames_without_tool_output(flask_example: Any) -> None:
    turns = [{"tool_calls": [{"name": "roll_dice", "input": {"sides": 6}}]}, "Rolled."]
    with served(flask_example, *turns) as app:
        conn = app.chat("roll the dice")
        frames = [f for f in conn.frames() if f.event != "comment"]
        conn.close()

    kinds = [f.event for f in frames]
    assert kinds[:2] == ["tool_start", "tool_end"]
    assert frames[0].data["name"] == "roll_dice"
    assert frames[0].data["input"] == {"sides": 6}
    assert frames[1].data["status"] == "success"
    assert frames[1].data["id"] == frames[0].data["id"]
    assert "content" not in frames[1].data
    assert kinds[-1] == "done"


def test_history_endpoint_and_input_validation(flask_example: Any) -> None:
    with served(flask_example, "Hi!") as app:
        conn = app.chat("hello")
        list(conn.frames())
        conn.close()
        status, body = request_json(app.port, "GET", "/history?conversation_id=c1")
        assert status == 200
        assert [m["role"] for m in body["messages"]] == ["user", "assistant"]

        status, _ = request_json(
            app.port, "POST", "/chat", {"conversation_id": "../etc", "message": "x"}
        )
        assert status == 400
        status, _ = request_json(app.port, "POST", "/chat", {"conversation_id": "c1"})
        assert status == 400


def test_offline_demo_by_default_streams_text_and_a_dice_tool_call(
    flask_example: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_SYNC_PROVIDER", raising=False)
    app = flask_example.create_app()
    recorder = CloseRecorder(app.wsgi_app)
    app.wsgi_app = recorder
    registry = app.extensions["agent_sync.registry"]
    with serve(app) as server:
        port = server.server_port
        conn = SSEConnection(port, "/chat", {"conversation_id": "d", "message": "roll the dice"})
        frames = [f for f in conn.frames() if f.event != "comment"]
        conn.close()
        kinds = [f.event for f in frames]
        assert "tool_start" in kinds and "tool_end" in kinds and kinds[-1] == "done"
        text = "".join(f.data["text"] for f in frames if f.event == "text")
        assert "The die shows " in text

        conn = SSEConnection(port, "/chat", {"conversation_id": "d", "message": "hello"})
        assert read_text(conn, 5) == "You said: hello"
        conn.drop()  # the demo answers slowly: this cancels it
        assert recorder.wait_for_closes(2)
        agent = registry.peek("d")
        assert agent is not None and not agent.is_running
        assert validate_history(agent.messages) == []
        assert agent.messages[-1]["content"][-1] == CANCELLED


def test_model_from_env_builds_the_configured_provider_without_network(
    flask_example: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # examples/chat_demo/ (not installed): importable once the example module has loaded
    import chat_demo as demo_model

    from agent_sync import UsageError

    monkeypatch.setenv("AGENT_SYNC_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = demo_model.model_from_env()
    assert type(model).__name__ == "OpenAIModel"
    assert "sk-test-not-a-real-key" not in repr(model)

    monkeypatch.setenv("AGENT_SYNC_PROVIDER", "nonsense")
    with pytest.raises(UsageError, match="unknown AGENT_SYNC_PROVIDER"):
        demo_model.model_from_env()


def test_many_concurrent_clients_some_leaving_mid_answer(flask_example: Any) -> None:
    clients = 16
    turn = {"text": "word " * 40, "chunk_size": 5, "chunk_delay": 0.01}
    barrier = threading.Barrier(clients)
    outcomes: dict[int, str] = {}
    lock = threading.Lock()

    def client(n: int, port: int) -> None:
        barrier.wait(HANG_BOUND)
        conn = SSEConnection(port, "/chat", {"conversation_id": f"k{n}", "message": "hi"})
        try:
            if n % 2:  # leave after a few deltas, at different moments
                read_text(conn, 1 + n % 5)
                outcome = "left"
            else:
                frames = list(conn.frames())
                outcome = frames[-1].data["stop_reason"]
        finally:
            conn.drop()
        with lock:
            outcomes[n] = outcome

    with served(flask_example, turn) as app:
        threads = [
            threading.Thread(target=client, args=(n, app.port), name=f"test-client-{n}")
            for n in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert app.recorder.wait_for_closes(clients)
        agents = [app.agent(f"k{n}") for n in range(clients)]

    assert outcomes == {n: "left" if n % 2 else "end_turn" for n in range(clients)}
    assert not any(agent.is_running for agent in agents)
    assert all(validate_history(agent.messages) == [] for agent in agents)
    for n in range(1, clients, 2):
        assert agents[n].messages[-1]["content"][-1] == CANCELLED
