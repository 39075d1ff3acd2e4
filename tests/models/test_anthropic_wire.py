"""AnthropicModel on the wire (issue 10 items 11 and 16): stale keep-alive connections and
proxies from the environment.

Small servers produce what the fakes cannot: one that answers a streamed response
advertising keep-alive and then closes the socket (llama.cpp's ``llama-server`` does;
``agent_sync.testing._keepalive_server``), and an HTTP proxy (forward and ``CONNECT``) on
127.0.0.1, written here.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator

import pytest

from agent_sync import RetryPolicy
from agent_sync._redact import redact
from agent_sync.cancel import CancelledError, CancelScope
from agent_sync.errors import ModelError
from agent_sync.models import AnthropicModel
from agent_sync.testing._keepalive_server import KeepAliveServer, Mode, chunked_response
from agent_sync.testing.anthropic_server import AnthropicServer
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.keepalive import (
    check_failure_after_a_byte_not_resent,
    check_fresh_failure_not_resent,
    check_stale_connection_resent,
)
from tests.fixtures.streams import assemble, collect

KEY = "local-wire-SECRET-5d4c3b2a19"
SLOW_RETRY = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)


# -- item 11: stale keep-alive connections -----------------------------------------------------


def _sse_response(path: str, number: int) -> bytes:
    """Anthropic SSE answering ``answer <number>``."""
    events = [
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": f"answer {number}"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return chunked_response(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


@pytest.fixture
def keepalive_server(request: pytest.FixtureRequest) -> Iterator[KeepAliveServer]:
    mode: Mode = getattr(request, "param", "close_on_reuse")
    with KeepAliveServer(_sse_response, mode, timeout=HANG_BOUND) as server:
        yield server


def wire_model(url: str) -> AnthropicModel:
    return AnthropicModel(
        "claude-test", client_args={"base_url": url, "api_key": KEY, "timeout": HANG_BOUND}
    )


@pytest.mark.parametrize("keepalive_server", ["close_on_reuse", "reset_on_reuse"], indirect=True)
def test_a_stale_pooled_connection_is_resent_at_once_and_not_counted(
    keepalive_server: KeepAliveServer,
) -> None:
    check_stale_connection_resent(wire_model(keepalive_server.url), keepalive_server)


@pytest.mark.parametrize("keepalive_server", ["close_fresh"], indirect=True)
def test_a_fresh_connection_failure_is_not_resent(keepalive_server: KeepAliveServer) -> None:
    check_fresh_failure_not_resent(wire_model(keepalive_server.url), keepalive_server, ModelError)


@pytest.mark.parametrize("keepalive_server", ["partial_on_reuse"], indirect=True)
def test_a_failure_after_a_response_byte_is_not_resent(keepalive_server: KeepAliveServer) -> None:
    check_failure_after_a_byte_not_resent(wire_model(keepalive_server.url), keepalive_server)


# -- item 16: proxies from the environment -----------------------------------------------------


def _pipe(one: socket.socket, other: socket.socket, closing: threading.Event) -> None:
    """Copy bytes both ways until either side closes (or the test ends)."""
    sockets = [one, other]
    while not closing.is_set():
        readable, _, _ = select.select(sockets, [], [], 0.05)
        for sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            (other if sock is one else one).sendall(data)


class _ThreadedListener:
    """A listening socket on 127.0.0.1 whose connections are served in named threads."""

    name = "test-listener"

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closing = threading.Event()
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, name=f"{self.name}-accept")
        self.acceptor.start()

    def close(self) -> None:
        self.closing.set()
        self.acceptor.join(HANG_BOUND)
        self.listener.close()
        for thread in self.threads:
            thread.join(HANG_BOUND)
            assert not thread.is_alive()

    def _accept(self) -> None:
        while not self.closing.is_set():
            if not select.select([self.listener], [], [], 0.05)[0]:
                continue
            conn, _ = self.listener.accept()
            thread = threading.Thread(target=self._guarded, args=(conn,), name=self.name)
            self.threads.append(thread)
            thread.start()

    def _guarded(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.serve(conn)
            except OSError:
                pass  # the client or the test went away

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


class Proxy(_ThreadedListener):
    """An HTTP proxy: ``CONNECT host:port`` tunnels, absolute-form requests are forwarded.

    Records each request line it received (``CONNECT 127.0.0.1:p HTTP/1.1``,
    ``POST http://127.0.0.1:p/v1/messages HTTP/1.1``).
    """

    name = "test-proxy"

    def __init__(self) -> None:
        self.lines: list[str] = []
        super().__init__()
        self.url = f"http://127.0.0.1:{self.port}"

    def serve(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            if not select.select([conn], [], [], HANG_BOUND)[0]:
                return
            piece = conn.recv(65536)
            if not piece:
                return
            data += piece
        head, _, rest = data.partition(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        self.lines.append(line)
        method, target, version = line.split(" ")
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)), timeout=HANG_BOUND)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            # Forward: rewrite the absolute-form target to origin-form, then pipe as is.
            authority, _, path = target.removeprefix("http://").partition("/")
            host, _, port = authority.rpartition(":")
            upstream = socket.create_connection((host, int(port)), timeout=HANG_BOUND)
            headers = head.split(b"\r\n", 1)[1]
            upstream.sendall(f"{method} /{path} {version}\r\n".encode() + headers + b"\r\n\r\n")
            upstream.sendall(rest)
        with upstream:
            upstream.settimeout(None)
            _pipe(conn, upstream, self.closing)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    server = Proxy()
    yield server
    server.close()


@pytest.fixture
def no_env_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_http_proxy_from_the_environment_is_used(
    proxy: Proxy, no_env_proxies: pytest.MonkeyPatch
) -> None:
    password = "proxy-pass-SECRET-99a8"
    authenticated = proxy.url.replace("http://", f"http://user:{password}@")
    no_env_proxies.setenv("HTTP_PROXY", authenticated)
    with AnthropicServer(["through the proxy"]) as server:
        model = wire_model(server.base_url)  # the default client, built after the env is set
        assert assemble(collect(model)).message["content"] == [{"text": "through the proxy"}]
        model.close()
    assert proxy.lines == [f"POST {server.base_url}/v1/messages HTTP/1.1"]
    assert redact(f"proxy said {password}") == "proxy said ***"  # registered as a secret


def test_no_proxy_hosts_go_direct(proxy: Proxy, no_env_proxies: pytest.MonkeyPatch) -> None:
    no_env_proxies.setenv("HTTP_PROXY", proxy.url)
    no_env_proxies.setenv("NO_PROXY", "127.0.0.1")
    with AnthropicServer(["direct"]) as server:
        model = wire_model(server.base_url)
        assert assemble(collect(model)).message["content"] == [{"text": "direct"}]
        model.close()
    assert proxy.lines == []


class Consumer:
    """Runs ``collect`` in a named thread and records how it ended."""

    def __init__(self, model: AnthropicModel, scope: CancelScope) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(model, scope), name="consumer")
        self.thread.start()

    def _run(self, model: AnthropicModel, scope: CancelScope) -> None:
        try:
            collect(model, cancel=scope)
        except BaseException as exc:  # asserted by the test
            self.error = exc

    def assert_returned(self) -> None:
        self.thread.join(HANG_BOUND)
        assert not self.thread.is_alive(), "stream() did not return after cancel()"


def test_cancel_aborts_a_read_blocked_behind_an_http_proxy(
    proxy: Proxy, no_env_proxies: pytest.MonkeyPatch
) -> None:
    no_env_proxies.setenv("HTTP_PROXY", proxy.url)
    with AnthropicServer([{"text": "never finishes", "stall_after": 3}, "next"]) as server:
        model = wire_model(server.base_url)
        scope = CancelScope()
        consumer = Consumer(model, scope)
        assert server.wait_for_stall(timeout=HANG_BOUND)
        scope.cancel("test")
        consumer.assert_returned()
        assert isinstance(consumer.error, CancelledError)
        # The pool is healthy after the abort: the next call goes through.
        assert assemble(collect(model)).message["content"] == [{"text": "next"}]
        model.close()
    assert len(proxy.lines) == 2


@pytest.mark.parametrize("via_proxy", [True, False], ids=["connect-proxy", "direct"])
def test_cancel_aborts_a_tls_handshake(
    proxy: Proxy, no_env_proxies: pytest.MonkeyPatch, via_proxy: bool
) -> None:
    # The target accepts TCP and never answers the TLS ClientHello: the client is blocked
    # in the handshake (inside the tunnel with a proxy), where only a socket shutdown
    # reaches it. ssl detaches the plain socket there: the abort must still find it.
    if via_proxy:
        no_env_proxies.setenv("HTTPS_PROXY", proxy.url)
    silent = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        conn, _ = silent.accept()
        held.append(conn)
        # The ClientHello came through the tunnel: the client now waits for the answer.
        if select.select([conn], [], [], HANG_BOUND)[0]:
            accepted.set()

    acceptor = threading.Thread(target=accept, name="test-silent-tls")
    acceptor.start()
    model = wire_model(f"https://127.0.0.1:{silent.getsockname()[1]}")
    scope = CancelScope()
    consumer = Consumer(model, scope)
    try:
        assert accepted.wait(HANG_BOUND)
        scope.cancel("test")
        consumer.assert_returned()
        assert isinstance(consumer.error, CancelledError)
        connect = [f"CONNECT 127.0.0.1:{silent.getsockname()[1]} HTTP/1.1"]
        assert proxy.lines == (connect if via_proxy else [])
    finally:
        model.close()
        acceptor.join(HANG_BOUND)
        for conn in held:
            conn.close()
        silent.close()
