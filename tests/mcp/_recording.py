"""What an MCP server received from the client, recorded on both transports.

* stdio: :class:`TeeRecorder` listens on a local socket; ``_tee.py`` (the wrapper the
  server runs under) connects to it and sends every line before the server gets it.
* streamable HTTP: :class:`RecordingProxy` forwards each request to the server as it came
  (method, path, headers, body) and streams the response back chunk by chunk (SSE streams
  included), recording the JSON bodies.

Both keep the messages in ``messages``; ``wait_for`` blocks until one matches, on a
condition the recording threads notify (no polling, no sleeps).
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent_sync.testing._serve_loop import ServeLoop
from tests.fixtures.bounds import HANG_BOUND

__all__ = ["RecordingProxy", "TeeRecorder"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class _Messages:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._changed = threading.Condition()

    def _record(self, body: bytes, headers: dict[str, str]) -> None:
        try:
            message = json.loads(body)
        except ValueError:
            return
        with self._changed:
            if isinstance(message, dict) and "tee_pid" in message:
                self.processes.append(message)
                self._changed.notify_all()
                return
            self.messages.extend(message if isinstance(message, list) else [message])
            self.headers.append(headers)
            self._changed.notify_all()

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """The first recorded message ``match`` accepts, waiting up to ``timeout`` seconds."""
        with self._changed:
            found: list[dict[str, Any]] = []

            def seen() -> bool:
                found[:] = [m for m in self.messages if match(m)]
                return bool(found)

            if not self._changed.wait_for(seen, timeout):
                raise AssertionError(f"not received within {timeout} s: {self.messages[-5:]}")
            return found[0]

    def methods(self) -> list[str]:
        """The methods received so far, in order."""
        with self._changed:
            return [str(m.get("method", "(response)")) for m in self.messages]


class TeeRecorder(_Messages):
    """Records what ``_tee.py`` forwards to the stdio server it wraps; ``processes`` holds
    the ``{"tee_pid", "server_pid"}`` of each tee started (one per connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.processes: list[dict[str, int]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` run under the tee."""
        tee = str(Path(__file__).with_name("_tee.py"))
        return [sys.executable, tee, str(self.port), *command]

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as lines:
            for line in lines:
                self._record(line, {})

    def close(self) -> None:
        self._listener.close()


class RecordingProxy(_Messages):
    """Listens on a free local port in front of ``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if body:
                    proxy._record(body, dict(self.headers))
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream.getresponse()
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP:
                            self.send_header(key, value)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        chunk = response.read1(65536)
                        if not chunk:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (OSError, http.client.HTTPException):
                    self.close_connection = True
                finally:
                    upstream.close()

            do_GET = do_POST = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        # stopped at once by close(): serve_forever's poll made every test with a proxy
        # wait for its next look in its teardown
        self._loop = ServeLoop(self._server, "test-mcp-proxy").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def close(self) -> None:
        self._loop.stop(HANG_BOUND)
        self._server.server_close()
