"""``sse_events``: frames, keep-alives, close() cancelling the run, errors without secrets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, tool
from agent_sync.errors import ConcurrentInvocationError, ModelHTTPError, UsageError
from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from agent_sync.web import SSEStream, encode_frame, sse_events
from tests.fixtures.bounds import HANG_BOUND

from ._client import Frame, _parse

pytestmark = pytest.mark.usefixtures("no_sse_threads_left")

CANCELLED = {"text": "Cancelled by user"}


def frames(stream: Iterator[bytes]) -> Iterator[Frame]:
    for raw in stream:
        assert raw.endswith(b"\n\n") and raw.count(b"\n\n") == 1
        yield _parse(raw[:-2])


def test_frames_from_open_to_done() -> None:
    agent = Agent(ScriptedModel([{"text": "Hello, world", "chunk_size": 5}]))
    stream = sse_events(agent, "hi")
    got = list(frames(stream))
    stream.close()

    assert got[0] == Frame("comment", "stream open")
    assert [f.data["text"] for f in got if f.event == "text"] == ["Hello", ", wor", "ld"]
    assert got[-1].event == "done"
    assert got[-1].data["stop_reason"] == "end_turn"
    assert got[-1].data["cancel_reason"] is None
    assert got[-1].data["text"] == "Hello, world"
    assert not agent.is_running
    assert not stream.worker.is_alive()


def test_data_is_one_json_line_whatever_the_text() -> None:
    frame = encode_frame("text", {"text": "a\n\ndata: injected\r\nevent: done\n"})
    assert frame.count(b"\n") == 3  # "event:" line, "data:" line, blank line
    assert _parse(frame[:-2]).data == {"text": "a\n\ndata: injected\r\nevent: done\n"}
    assert encode_frame("text", {"text": "ünï"}) == 'event: text\ndata: {"text":"ünï"}\n\n'.encode()


def test_keepalives_while_the_model_is_silent_then_close_cancels() -> None:
    agent = Agent(ScriptedModel([{"text": "abcdef", "chunk_size": 1, "stall_after": 2}]))
    stream = sse_events(agent, "hi", keepalive=0.01)
    it = frames(stream)
    seen = [next(it) for _ in range(5)]
    assert [f.event for f in seen] == ["comment", "text", "text", "comment", "comment"]
    assert seen[3] == Frame("comment", "keep-alive")
    assert agent.is_running

    stream.close()

    assert not stream.worker.is_alive()
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert agent.messages[-1]["content"] == [{"text": "ab"}, CANCELLED]


def test_close_before_iterating_cancels_and_frees_the_agent() -> None:
    agent = Agent(ScriptedModel([{"text": "never", "stall_after": 0}, "second"]))
    stream = sse_events(agent, "hi")
    stream.close()
    stream.close()  # idempotent

    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert agent.invoke("again").text == "second"


def test_close_from_another_thread_ends_a_blocked_iteration() -> None:
    agent = Agent(ScriptedModel([{"text": "abc", "chunk_size": 1, "stall_after": 1}]))
    stream = sse_events(agent, "hi", keepalive=None)
    first_text = threading.Event()
    seen: list[Frame] = []

    def consume() -> None:
        for frame in frames(stream):
            seen.append(frame)
            if frame.event == "text":
                first_text.set()

    consumer = threading.Thread(target=consume, name="test-consumer")
    consumer.start()
    assert first_text.wait(HANG_BOUND)
    stream.close()  # the consumer is blocked waiting for the next event
    consumer.join(HANG_BOUND)

    assert not consumer.is_alive()
    assert not agent.is_running
    assert validate_history(agent.messages) == []


def test_busy_agent_is_refused_at_once_and_the_run_goes_on() -> None:
    agent = Agent(ScriptedModel([{"text": "abc", "stall_after": 1}]))
    stream = sse_events(agent, "first")
    with pytest.raises(ConcurrentInvocationError):
        sse_events(agent, "second")
    assert agent.is_running
    stream.close()
    assert all(b.get("text") != "second" for m in agent.messages for b in m["content"])


def test_keepalive_must_be_positive() -> None:
    agent = Agent(ScriptedModel(["x"]))
    with pytest.raises(UsageError):
        sse_events(agent, "hi", keepalive=0)
    assert not agent.is_running


def test_timeout_ends_with_a_cancelled_done_frame() -> None:
    agent = Agent(ScriptedModel([{"text": "abc", "chunk_size": 1, "stall_after": 1}]))
    stream = sse_events(agent, "hi", timeout=0.05)
    done = list(frames(stream))[-1]
    stream.close()
    assert done.event == "done"
    assert (done.data["stop_reason"], done.data["cancel_reason"]) == ("cancelled", "timeout")


def test_model_error_becomes_an_error_frame_and_the_history_stays_valid() -> None:
    error = ModelHTTPError("invalid model id", status=400, body='{"message":"invalid"}')
    agent = Agent(ScriptedModel([{"error": error}]))
    stream = sse_events(agent, "hi")
    got = list(frames(stream))
    stream.close()

    assert got[-1].event == "error"
    assert got[-1].data == {
        "error": "ModelHTTPError",
        "message": "invalid model id",
        "retryable": False,
        "status": 400,
    }
    assert validate_history(agent.messages) == []


def test_unexpected_error_is_reported_without_its_text(caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-ant-api03-SECRET"
    agent = Agent(ScriptedModel([{"error": RuntimeError(f"boom with key {secret}")}]))
    stream = sse_events(agent, "hi")
    raw = b"".join(stream)
    stream.close()

    assert b"event: error" in raw
    assert secret.encode() not in raw
    assert b"the agent failed" in raw
    assert not agent.is_running


def test_tool_frames_carry_name_input_and_status_not_output() -> None:
    @tool
    def lookup(city: str) -> str:
        """Look a city up.

        Args:
            city: The city.
        """
        return "internal-only data"

    call: dict[str, Any] = {"tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}]}
    agent = Agent(ScriptedModel([call, "Found it."]), tools=[lookup])
    stream = sse_events(agent, "hi")
    raw = b"".join(stream)
    stream.close()
    got = list(frames(iter(raw.replace(b"\n\n", b"\n\n\x00").split(b"\x00")[:-1])))

    start = next(f for f in got if f.event == "tool_start")
    end = next(f for f in got if f.event == "tool_end")
    assert start.data["name"] == "lookup" and start.data["input"] == {"city": "Oslo"}
    assert end.data["status"] == "success" and end.data["id"] == start.data["id"]
    assert b"internal-only data" not in raw
    assert got[-1].event == "done"


def test_stream_is_the_wsgi_body_type() -> None:
    agent = Agent(ScriptedModel(["ok"]))
    stream = sse_events(agent, "hi")
    assert isinstance(stream, SSEStream)
    assert iter(stream) is stream
    stream.close()
    assert stream.worker.name.startswith("agent-sync-sse-")


def test_closing_a_finished_stream_never_cancels_the_next_run() -> None:
    agent = Agent(ScriptedModel(["first", {"text": "abc", "chunk_size": 1, "stall_after": 1}]))
    first = sse_events(agent, "one")
    assert b"event: done" in b"".join(first)  # the server has sent everything...
    second = sse_events(agent, "two")  # ...the next message starts before it closes
    first.close()
    assert agent.is_running
    second.close()
    assert not agent.is_running
    assert validate_history(agent.messages) == []


def test_socket_from_environ_only_returns_plain_tcp_sockets() -> None:
    import socket
    import ssl

    from agent_sync.web import socket_from_environ

    plain = socket.socket()
    tls = ssl.create_default_context().wrap_socket(
        socket.socket(), server_hostname="localhost", do_handshake_on_connect=False
    )
    try:
        assert socket_from_environ({"werkzeug.socket": plain}) is plain
        assert socket_from_environ({"gunicorn.socket": plain}) is plain
        assert socket_from_environ({"gunicorn.socket": tls}) is None  # a peek would see TLS
        assert socket_from_environ({"wsgi.input": object()}) is None
    finally:
        plain.close()
        tls.close()


def test_the_agent_is_free_when_the_done_frame_is_sent() -> None:
    agent = Agent(ScriptedModel(["first", "second"]))
    stream = sse_events(agent, "one")
    for frame in frames(stream):
        if frame.event == "done":
            # a client may send its next message the moment it sees "done"
            assert not agent.is_running
            break
    nxt = sse_events(agent, "two")
    assert b'"text":"second"' in b"".join(nxt)
    stream.close()
    nxt.close()
