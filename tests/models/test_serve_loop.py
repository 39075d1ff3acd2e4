"""The local wire servers' serving loop (``agent_sync.testing._serve_loop``): it serves every
connection, and ``close()`` ends its thread at once (woken, not polled), frees the port, and
may be called again."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent_sync import Agent
from agent_sync.models import OpenAIModel
from agent_sync.testing import OpenAIServer
from agent_sync.testing._serve_loop import ServeLoop
from tests.fixtures.bounds import HANG_BOUND


def serving_threads(provider: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"agent_sync-{provider}-server"]


def test_a_wire_server_serves_each_call_and_close_ends_its_thread_and_port() -> None:
    before = len(serving_threads("openai"))
    server = OpenAIServer([f"answer {n}" for n in range(5)]).start()
    assert len(serving_threads("openai")) == before + 1
    model = OpenAIModel("gpt-test", base_url=server.url, api_key="sk-test")
    agent = Agent(model)
    assert [agent.invoke(f"q{n}").text for n in range(5)] == [f"answer {n}" for n in range(5)]
    model.close()
    port = server.port
    server.close()
    assert len(serving_threads("openai")) == before  # joined by close(), not left polling
    probe = socket.socket()
    try:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nobody listens there any more
    finally:
        probe.close()
    server.close()  # again: harmless


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


def test_a_loop_serves_and_stops_before_start_or_twice_harmlessly() -> None:
    unused = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    ServeLoop(unused, "test-unused").stop(HANG_BOUND)
    unused.server_close()

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server.daemon_threads = True
    loop = ServeLoop(server, "test-hello").start()
    with socket.create_connection(server.server_address[:2], timeout=HANG_BOUND) as client:
        client.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert client.makefile("rb").read().endswith(b"hello")
    loop.stop(HANG_BOUND)
    loop.stop(HANG_BOUND)
    assert not [t for t in threading.enumerate() if t.name == "test-hello"]
    server.server_close()
