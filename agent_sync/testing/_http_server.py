"""A scriptable local HTTP server: the base of the protocol-faithful provider fakes.

Each provider fake (Anthropic SSE, Bedrock event stream, OpenAI SSE) subclasses
:class:`ScriptedServer` and says only how a :class:`ServerTurn` becomes wire frames. This
module does the rest, the same way for all three:

* binds ``127.0.0.1:0`` in a named daemon thread, HTTP/1.1 keep-alive, chunked responses;
* pops one scripted turn per model request and logs the request (secrets redacted);
* plays the turn's faults: delayed or never-sent headers, error statuses with
  ``retry-after``, a stall after ``k`` frames (held open until the client goes away or the
  server closes), a connection dropped (TCP RST) after ``k`` frames, a corrupt frame;
* counts open connections, so tests can check that aborted sockets were not leaked.

Waits are on events (``closing``), never bare sleeps, so ``close()`` releases every
stalled handler at once.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar, Union

from ._serve_loop import ServeLoop

__all__ = ["RecordedRequest", "ScriptedServer", "ServerTurn", "TurnSpec", "WireHandler"]

WAIT_TIMEOUT_S = 30.0
"""How long the ``wait_for_*`` methods wait by default. The bound only catches a hang: on a
busy machine a stream takes seconds to reach a stall, and a test that gave up sooner would
fail for the machine's speed, not for a defect (or, waiting to cancel, hang on)."""

_S = TypeVar("_S", bound="ScriptedServer")

logger = logging.getLogger(__name__)

_SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "x-amz-security-token", "x-goog-api-key"}
)


@dataclass(kw_only=True)
class ServerTurn:
    """One scripted model response, with optional faults.

    Frame counts (``stall_after``, ``drop_after``, ``corrupt_after``) count the wire frames
    the server has written for this response, preamble frames included.

    Attributes:
        text: The assistant's text, streamed in ``chunk_size`` pieces.
        tool_calls: ``[{"name": ..., "input": {...}}]`` (an ``"id"`` key is optional).
        reasoning: Reasoning text streamed before the answer, if the protocol has it.
        blocks: The streamed answer's content blocks in order, instead of ``reasoning``
            then ``text`` then the tool calls: ``("text", str)``, ``("reasoning", str)``
            or ``("tool", n)`` for ``tool_calls[n]``, each in ``chunk_size`` pieces (calls
            not named come last; OpenAI's chat stream sends every call last). Streaming
            answers of the Anthropic, Bedrock and OpenAI servers.
        raw_tool_input: Per tool call index, the exact JSON text to send instead of
            ``json.dumps(input)`` (to script invalid JSON).
        chunk_size: Characters per text delta.
        chunk_delay: Seconds between frames.
        stop_reason: The provider's stop reason to report (default: derived).
        usage: ``{"inputTokens": n, "outputTokens": m}`` to report (default: derived).
        status: HTTP status; anything but 200 answers with the provider's error body.
        error_message: Message inside the error body.
        error_type: Provider error type/code (e.g. ``"overloaded_error"``), default derived.
        retry_after: Value of the ``retry-after`` header on an error response.
        headers_delay: Seconds to wait before sending the response headers.
        stall_headers: Never send headers: hold the connection until the client leaves.
        stall_after: After that many frames, go silent and hold the connection.
        drop_after: After that many frames, reset the connection (TCP RST).
        corrupt_after: After that many frames, send one malformed frame and end.
        truncate_after: After that many frames, end the response cleanly but early.
    """

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str | None = None
    blocks: list[tuple[str, Any]] = field(default_factory=list)
    raw_tool_input: dict[int, str] = field(default_factory=dict)
    chunk_size: int = 8
    chunk_delay: float = 0.0
    stop_reason: str | None = None
    usage: dict[str, int] | None = None
    status: int = 200
    error_message: str = "scripted error"
    error_type: str | None = None
    retry_after: float | None = None
    headers_delay: float = 0.0
    stall_headers: bool = False
    stall_after: int | None = None
    drop_after: int | None = None
    corrupt_after: int | None = None
    truncate_after: int | None = None

    @classmethod
    def of(cls, spec: TurnSpec) -> ServerTurn:
        """Build a turn from a ``str`` (text), a dict of the attributes, or a turn."""
        if isinstance(spec, ServerTurn):
            return spec
        if isinstance(spec, str):
            return cls(text=spec)
        return cls(**dict(spec))

    def text_chunks(self) -> list[str]:
        """The text split into ``chunk_size`` pieces."""
        return self.pieces(self.text)

    def layout(self) -> list[tuple[str, Any]]:
        """The streamed content blocks in order (see ``blocks``): ``("reasoning", text)``
        (also when empty), ``("text", text)`` (only when not empty), ``("tool", n)``."""
        if self.blocks:
            named = [tuple(block) for block in self.blocks]
            tools = {value for kind, value in named if kind == "tool"}
            rest = [("tool", n) for n in range(len(self.tool_calls)) if n not in tools]
            return [*named, *rest]
        layout: list[tuple[str, Any]] = []
        if self.reasoning is not None:
            layout.append(("reasoning", self.reasoning))
        if self.text:
            layout.append(("text", self.text))
        return layout + [("tool", n) for n in range(len(self.tool_calls))]

    def pieces(self, text: str) -> list[str]:
        """``text`` split into ``chunk_size`` pieces."""
        size = max(1, self.chunk_size)
        return [text[i : i + size] for i in range(0, len(text), size)]

    def tool_input_json(self, index: int) -> str:
        """The JSON text sent for tool call ``index``."""
        if index in self.raw_tool_input:
            return self.raw_tool_input[index]
        return json.dumps(self.tool_calls[index].get("input", {}))

    def derived_usage(self) -> dict[str, int]:
        """``usage`` or a deterministic estimate."""
        if self.usage is not None:
            return dict(self.usage)
        output = max(1, (len(self.text) + sum(len(str(c)) for c in self.tool_calls)) // 4)
        return {"inputTokens": 10, "outputTokens": output}


TurnSpec = Union[str, Mapping[str, Any], ServerTurn]


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """A request the server received. Secret headers are replaced by ``"***"``.

    Attributes:
        method: HTTP method.
        path: Request path with query.
        headers: Header names lower-cased.
        body: Parsed JSON body, or the raw bytes when it is not JSON.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class WireHandler(BaseHTTPRequestHandler):
    """One connection of the server, with the wire helpers a :meth:`ScriptedServer.respond`
    override writes its answer with (chunked frames, a whole body, a TCP reset)."""

    protocol_version = "HTTP/1.1"
    # Streaming servers (uvicorn, vLLM, nginx, AWS) disable Nagle: without it each small
    # frame waits for the client's delayed ACK (~40 ms on Linux), which would swamp every
    # latency measured against the fakes and is not the client's doing.
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        self.server.owner._dispatch(self)

    do_GET = do_POST

    def setup(self) -> None:
        super().setup()
        self.server.owner._connection_opened()

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.owner._connection_closed()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        logger.debug("test server: %s", format % args)

    # -- wire helpers used by ScriptedServer and its subclasses --

    def read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def begin_chunked(self, status: int, content_type: str, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def send_body(
        self, status: int, body: bytes, content_type: str, headers: Mapping[str, str] = {}
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def reset_connection(self) -> None:
        """Drop the connection with a TCP RST, as a crashed peer or a proxy would."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 resets connections when many clients connect at
    # once (the 16-thread benchmarks); real servers listen with a larger backlog.
    request_queue_size = 128
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that abort mid-request are what the fakes are for: log, do not print.
        logger.debug("client=<%s> | request ended with an error", client_address, exc_info=True)


class ScriptedServer:
    """Base of the local provider fakes. Use as a context manager.

    Subclasses set ``provider`` and implement :meth:`accepts`, :meth:`render_frames`,
    :meth:`render_error` and :meth:`corrupt_frame`; they may override
    :meth:`respond` for non-streaming endpoints.

    Attributes:
        requests: Every request received, in order (see :class:`RecordedRequest`).
        closing: Set by :meth:`close`; stalled handlers wait on it.
    """

    provider: ClassVar[str] = "scripted"
    content_type: ClassVar[str] = "text/event-stream"

    def __init__(self, turns: Iterable[TurnSpec] = (), *, host: str = "127.0.0.1") -> None:
        self._turns: deque[ServerTurn] = deque(ServerTurn.of(t) for t in turns)
        self._host = host
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._open_connections = 0
        self._stalls = 0
        self.requests: list[RecordedRequest] = []
        self.closing = threading.Event()
        self._httpd: _Server | None = None
        self._loop: ServeLoop | None = None

    # -- lifecycle --

    def start(self: _S) -> _S:
        """Bind and serve in a background thread; returns ``self``."""
        httpd = _Server((self._host, 0), WireHandler)
        httpd.owner = self
        self._httpd = httpd
        self._loop = ServeLoop(httpd, f"agent_sync-{self.provider}-server").start()
        return self

    def close(self) -> None:
        """Release stalled handlers, stop serving and join the server thread."""
        self.closing.set()
        if self._loop is not None:
            self._loop.stop(timeout=5)
        if self._httpd is not None:
            self._httpd.server_close()

    def __enter__(self: _S) -> _S:
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound port."""
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self._host}:{self.port}"

    # -- script --

    def add_turns(self, *turns: TurnSpec) -> None:
        """Queue more scripted responses."""
        with self._lock:
            self._turns.extend(ServerTurn.of(t) for t in turns)

    @property
    def turns_left(self) -> int:
        """Scripted responses not yet served."""
        with self._lock:
            return len(self._turns)

    @property
    def open_connections(self) -> int:
        """Client connections currently open on the server side."""
        with self._lock:
            return self._open_connections

    def wait_for_stall(self, count: int = 1, timeout: float = WAIT_TIMEOUT_S) -> bool:
        """Block until ``count`` responses have gone silent (stall or stalled headers)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._stalls >= count, timeout)

    def wait_for_requests(self, count: int, timeout: float = WAIT_TIMEOUT_S) -> bool:
        """Block until ``count`` requests have been received."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.requests) >= count, timeout)

    def wait_for_idle(self, timeout: float = WAIT_TIMEOUT_S) -> bool:
        """Block until no client connection is open (sockets released)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._open_connections == 0, timeout)

    # -- provider hooks --

    def accepts(self, method: str, path: str) -> bool:
        """Whether this endpoint is a model call the fake answers."""
        raise NotImplementedError

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        """The complete response stream for ``turn``, one wire frame per item."""
        raise NotImplementedError

    def render_error(self, turn: ServerTurn, path: str) -> tuple[bytes, str]:
        """The error body (and its content type) for a non-200 ``turn``."""
        raise NotImplementedError

    def corrupt_frame(self) -> bytes:
        """One malformed frame of this protocol."""
        raise NotImplementedError

    def error_headers(self, turn: ServerTurn) -> dict[str, str]:
        """Extra headers for an error response (``retry-after`` by default)."""
        if turn.retry_after is None:
            return {}
        return {"retry-after": f"{turn.retry_after:g}"}

    def stream_headers(self) -> dict[str, str]:
        """Extra headers of a streamed answer, as the real API sends them (none here)."""
        return {}

    def respond(self, handler: WireHandler, turn: ServerTurn, request: Any, path: str) -> None:
        """Answer a model call with ``turn``: stream its frames, playing its faults."""
        frames = self.render_frames(turn, request, path)
        headers = {"cache-control": "no-cache", **self.stream_headers()}
        handler.begin_chunked(200, self.content_type, headers)
        for index, frame in enumerate(frames):
            if index == turn.stall_after:
                self._stall(handler)
                return
            if index == turn.drop_after:
                handler.reset_connection()
                return
            if index == turn.corrupt_after:
                handler.write_chunk(self.corrupt_frame())
                break
            if index == turn.truncate_after:
                break
            handler.write_chunk(frame)
            if turn.chunk_delay and self.closing.wait(turn.chunk_delay):
                return
        else:
            if turn.stall_after is not None and turn.stall_after >= len(frames):
                self._stall(handler)
                return
        handler.end_chunked()

    # -- internals --

    def _dispatch(self, handler: WireHandler) -> None:
        raw = handler.read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        headers = {
            name.lower(): ("***" if name.lower() in _SECRET_HEADERS else value)
            for name, value in handler.headers.items()
        }
        with self._changed:
            recorded = RecordedRequest(
                method=handler.command, path=handler.path, headers=headers, body=body
            )
            self.requests.append(recorded)
            self._changed.notify_all()
        if not self.accepts(handler.command, handler.path):
            handler.send_body(404, b'{"message": "not found"}', "application/json")
            return
        with self._lock:
            turn = self._turns.popleft() if self._turns else None
        if turn is None:
            turn = ServerTurn(
                status=400, error_message="agent_sync test server: no scripted turn left"
            )
        try:
            if turn.stall_headers:
                self._stall(handler)
                return
            if turn.headers_delay and self.closing.wait(turn.headers_delay):
                return
            if turn.status != 200:
                error_body, content_type = self.render_error(turn, handler.path)
                handler.send_body(turn.status, error_body, content_type, self.error_headers(turn))
                return
            self.respond(handler, turn, body, handler.path)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client went away: that is its right

    def _stall(self, handler: WireHandler) -> None:
        """Go silent until the client hangs up or the server closes."""
        with self._changed:
            self._stalls += 1
            self._changed.notify_all()
        handler.close_connection = True
        connection = handler.connection
        while not self.closing.is_set():
            try:
                readable, _, _ = select.select([connection], [], [], 0.05)
                if readable and not connection.recv(1, socket.MSG_PEEK):
                    return  # the client closed or shut down its side
            except OSError:
                return

    def _connection_opened(self) -> None:
        with self._changed:
            self._open_connections += 1
            self._changed.notify_all()

    def _connection_closed(self) -> None:
        with self._changed:
            self._open_connections -= 1
            self._changed.notify_all()
