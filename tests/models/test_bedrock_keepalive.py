"""A stale pooled keep-alive connection is re-sent at once, and only when that is safe.

llama.cpp-style servers answer with ``Connection: keep-alive`` and then close the socket.
A client that reuses the pooled connection before it sees the close gets nothing back.
The small servers here make that race deterministic: after answering, a connection waits
for the next request and closes without a byte (or, for the negative cases, with a few
bytes, or closes a fresh connection). Real boto3 client, real urllib3 pool; no mocks.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from agent_sync import Agent, RetryPolicy
from agent_sync.cancel import CancelScope
from agent_sync.errors import ModelConnectionError, ModelError
from agent_sync.events import Done, ModelRetry
from agent_sync.messages import Message
from agent_sync.models import BedrockModel, ModelRequest
from agent_sync.testing._http_server import ServerTurn
from agent_sync.testing.bedrock_server import BedrockServer

from ._bedrock_fixtures import aws_session

HELLO: list[Message] = [{"role": "user", "content": [{"text": "hi"}]}]
CALLS = 5
# A back-off long enough that paying it even once fails the test's own bound.
SLOW_RETRY = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)
JOIN = 10.0


def _frames(text: str) -> bytes:
    render = BedrockServer().render_frames(ServerTurn(text=text), None, "")
    return b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in render) + b"0\r\n\r\n"


def _read_request(conn: socket.socket, buffer: bytearray) -> bool:
    """Read one request (headers + content-length body); False on EOF."""
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return False
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return False
        rest += data
    buffer[:] = rest[length:]
    return True


class KeepAliveThenClose:
    """Answers one request per connection with keep-alive, then misbehaves on the next.

    ``mode``: ``"silent"`` closes without a byte once the next request arrived (the stale
    case); ``"reset"`` likewise, but with a TCP reset instead of end-of-file; ``"partial"``
    sends a few bytes of a status line and closes; ``"fresh"`` closes every connection
    without answering at all.
    """

    def __init__(self, mode: str = "silent") -> None:
        self.mode = mode
        self.requests = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, name="test-keepalive-server")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> KeepAliveThenClose:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone does not
        self._listener.close()
        self._acceptor.join(JOIN)
        for thread in self._threads:
            thread.join(JOIN)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), name="test-keepalive-conn")
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        with conn:
            conn.settimeout(JOIN)
            try:
                if not _read_request(conn, buffer):
                    return
                with self._lock:
                    self.requests += 1
                if self.mode == "fresh":
                    return
                body = _frames("pong")
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\n"
                    b"content-type: application/vnd.amazon.eventstream\r\n"
                    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n" + body
                )
                if not _read_request(conn, buffer):  # the client's next call, on this socket
                    return
                with self._lock:
                    self.requests += 1
                if self.mode == "partial":
                    conn.sendall(b"HTTP/1.1 2")
                elif self.mode == "reset":  # close with RST instead of FIN
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                return


@pytest.fixture
def session() -> boto3.Session:
    return aws_session("AKIDKEEPALIVE", "keepalive-secret")


@pytest.fixture
def stale_server() -> Iterator[KeepAliveThenClose]:
    with KeepAliveThenClose() as srv:
        yield srv


def _call(model: BedrockModel) -> str:
    events = model.stream(ModelRequest(messages=HELLO), cancel=CancelScope())
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


@pytest.mark.parametrize("mode", ["silent", "reset"])
def test_sequential_calls_survive_a_server_that_closes_kept_alive_connections(
    session: boto3.Session, mode: str
) -> None:
    with KeepAliveThenClose(mode) as stale_server:
        model = BedrockModel("m", endpoint_url=stale_server.url, boto_session=session)
        answers = [_call(model) for _ in range(CALLS)]
        model.close()

    assert answers == ["pong"] * CALLS
    # every call after the first met a stale connection and was re-sent on a new one
    assert stale_server.connections == CALLS
    assert stale_server.requests == 2 * CALLS - 1


def test_the_agent_pays_no_back_off_and_counts_no_retry(
    stale_server: KeepAliveThenClose, session: boto3.Session
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


@pytest.mark.parametrize("mode", ["partial", "fresh"])
def test_no_resend_after_a_byte_came_back_or_on_a_fresh_connection(
    session: boto3.Session, mode: str
) -> None:
    with KeepAliveThenClose(mode) as srv:
        model = BedrockModel("m", endpoint_url=srv.url, boto_session=session)
        if mode == "partial":
            assert _call(model) == "pong"
        with pytest.raises(ModelError) as caught:
            _call(model)
        model.close()

    assert isinstance(caught.value, ModelConnectionError)
    # one request per connection was answered, the failing one was sent exactly once
    assert srv.requests == (2 if mode == "partial" else 1)
    assert srv.connections == 1
