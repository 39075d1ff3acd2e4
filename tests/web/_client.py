"""A raw-socket HTTP/1.1 client that reads SSE frames and can drop the connection.

Real sockets, so tests see exactly what a browser would: chunked bodies, comment frames,
and a disconnect the server only notices when it writes.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from wsgiref import simple_server

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from agent_sync.testing._serve_loop import ServeLoop
from tests.fixtures.bounds import HANG_BOUND

__all__ = ["Frame", "SSEConnection", "frames_until", "request_json", "serve", "serve_wsgiref"]


@dataclass(frozen=True)
class Frame:
    """One SSE frame: ``event`` is ``"comment"`` for ``: ...`` lines (keep-alives)."""

    event: str
    data: Any
    id: str | None = None
    raw: bytes = field(default=b"", compare=False)
    """The frame's bytes as sent, without the blank line that ends it."""


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


@contextmanager
def serve(app: Any) -> Iterator[BaseWSGIServer]:
    """Serve a WSGI app on 127.0.0.1 with werkzeug's threaded server, in a named thread."""
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
    loop = ServeLoop(server, "test-wsgi-server").start()  # stopped at once, never polled
    try:
        yield server
    finally:
        loop.stop(HANG_BOUND)
        server.server_close()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _QuietWSGIRefHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return None


@contextmanager
def serve_wsgiref(app: Any) -> Iterator[int]:
    """Serve a WSGI app with the standard library's wsgiref, threaded; yields the port."""
    server = simple_server.make_server(
        "127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietWSGIRefHandler
    )
    loop = ServeLoop(server, "test-wsgiref").start()
    try:
        yield server.server_address[1]
    finally:
        loop.stop(HANG_BOUND)
        server.server_close()


class SSEConnection:
    """POST a JSON body and read the response as it streams."""

    def __init__(
        self,
        port: int,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = HANG_BOUND,  # a busy gunicorn worker may take seconds to accept
        method: str = "POST",
    ) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        lines.append("Accept: text/event-stream")
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        self._file = self.sock.makefile("rb")
        status_line = self._file.readline().decode()
        self.status = int(status_line.split()[1])
        self.headers: dict[str, str] = {}
        while (line := self._file.readline().decode().strip()) != "":
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self._buffer = b""
        self._eof = False

    def read_body(self) -> bytes:
        """The whole (non-streamed) body."""
        data = b""
        while (chunk := self._read_chunk()) is not None:
            data += chunk
        return data

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.read_body())

    def frames(self) -> Iterator[Frame]:
        """Yield SSE frames as they arrive, until the server ends the body."""
        while True:
            while b"\n\n" not in self._buffer:
                chunk = self._read_chunk()
                if chunk is None:
                    return
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            yield _parse(raw)

    def next_frame(self, *, skip_comments: bool = True) -> Frame | None:
        """The next frame (by default the next that is not a comment), or ``None`` at end."""
        for frame in self.frames():
            if not (skip_comments and frame.event == "comment"):
                return frame
        return None

    def drop(self, *, reset: bool = False) -> None:
        """Go away like a closed browser tab (FIN) or a crashed one (``reset``: TCP RST)."""
        if reset:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._file.close()
        self.sock.close()

    close = drop

    def _read_chunk(self) -> bytes | None:
        if self._eof:
            return None
        if not self._chunked:
            data = self._file.read1(65536)
            if not data:
                self._eof = True
                return None
            return data
        size_line = self._file.readline()
        if not size_line:
            self._eof = True
            return None
        size = int(size_line.strip().split(b";")[0], 16)
        if size == 0:
            self._file.readline()
            self._eof = True
            return None
        data = self._file.read(size)
        self._file.readline()  # the CRLF after the chunk
        return data


def frames_until(conn: SSEConnection, event: str) -> list[Frame]:
    """The frames (comments aside) up to and including the first ``event`` frame."""
    seen = []
    for frame in conn.frames():
        if frame.event != "comment":
            seen.append(frame)
            if frame.event == event:
                return seen
    raise AssertionError(f"the stream ended before {event!r}: {[f.event for f in seen]}")


def _parse(raw_bytes: bytes) -> Frame:
    event, data_lines, comment, frame_id = "message", [], None, None
    for line in raw_bytes.decode().split("\n"):
        if line.startswith("id:"):
            frame_id = line[3:].strip()
        elif line.startswith(":"):
            comment = line[1:].strip()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].strip())
    if not data_lines:
        return Frame("comment", comment, raw=raw_bytes)
    return Frame(event, json.loads("\n".join(data_lines)), frame_id, raw_bytes)


def request_json(
    port: int,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """One plain JSON request over a fresh connection; returns (status, parsed body)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_BOUND)
    try:
        payload = None if body is None else json.dumps(body)
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=payload, headers=all_headers)
        response = conn.getresponse()
        data = response.read()
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, json.loads(data)
        return response.status, data.decode(errors="replace")
    finally:
        conn.close()
