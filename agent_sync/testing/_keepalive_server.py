"""A raw-socket HTTP/1.1 server that advertises keep-alive and then misbehaves (private).

llama.cpp's ``llama-server`` answers a stream with ``Connection: keep-alive`` and then
closes the socket; a client that reuses the pooled connection gets nothing back. The
provider fakes answer through :mod:`http.server`, which cannot close a kept-alive
connection at a chosen moment, so this server speaks HTTP/1.1 by hand on 127.0.0.1 and
makes the race deterministic: it closes a reused connection only once the next request
has arrived on it, so the close always wins against the client pool's readability check.
Used by the stale-connection tests of every provider and by
``bench/bench_stale_keepalive.py``; not exported from :mod:`agent_sync.testing`.

Modes (:data:`Mode`; what happens to a connection after it has served one response):

* ``"close_on_reuse"``: the next request on it is read, then the socket is closed (FIN),
  unanswered: the stale case;
* ``"reset_on_reuse"``: the same with a TCP reset (RST, ``SO_LINGER`` 0) instead of a FIN;
* ``"partial_on_reuse"``: the next request gets a partial status line (``partial``), then
  a close (a response byte came back: a client must not re-send it);
* ``"close_fresh"``: every connection is closed at its first request, unanswered;
* ``"close_after"``: the socket is closed right after each response (the natural race:
  the client's pool usually notices; sometimes its next request races the close);
* ``"keep"``: a well-behaved keep-alive server (the baseline).

What a response is belongs to the caller: ``respond(path, number)`` returns the whole
response for the ``number``-th request received; :func:`chunked_response` builds the usual
one.

Threads are named (``<name>-accept``, ``<name>-conn``). :meth:`KeepAliveServer.close`
wakes the blocked ``accept()`` with a connection of its own and shuts the open
connections down (no polling, no sleeps), then joins every thread with a bound; a thread
still alive after it is an error.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Literal

__all__ = ["KeepAliveServer", "Mode", "Respond", "chunked_response"]

Mode = Literal[
    "close_on_reuse", "reset_on_reuse", "partial_on_reuse", "close_fresh", "close_after", "keep"
]
Respond = Callable[[str, int], bytes]
"""``respond(path, number)``: the whole response (status line, headers, body) to the
``number``-th request received (1-based), for ``path``."""

_ON_REUSE: frozenset[str] = frozenset({"close_on_reuse", "reset_on_reuse", "partial_on_reuse"})


def chunked_response(frames: Iterable[bytes], content_type: str = "text/event-stream") -> bytes:
    """A ``200`` keep-alive response whose chunked body carries ``frames``, one chunk each."""
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n"
        "transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
    ).encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in frames) + b"0\r\n\r\n"


def _read_request(conn: socket.socket, buffer: bytearray) -> str | None:
    """The path of the next request (head and content-length body read); None at EOF.

    Bytes past that request stay in ``buffer`` for the next call.
    """
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    buffer[:] = rest[length:]
    request_line = lines[0].split(b" ")
    return request_line[1].decode("latin-1") if len(request_line) > 1 else "/"


class KeepAliveServer:
    """A server on ``127.0.0.1`` in one of the modes of the module docstring.

    Args:
        respond: ``respond(path, number)`` returns the whole response bytes.
        mode: What happens to reused and fresh connections.
        timeout: Seconds any wait may take: a silent client, each join in :meth:`close`.
        partial: What ``partial_on_reuse`` sends before closing. ``b"HTTP/1.1 200"`` reads
            as a bodiless 200 to :mod:`http.client`; ``b"HTTP/1.1 2"`` is a bad status line.
        name: The prefix of the thread names.

    Counters (updated under a lock; read them after the client is done): ``connections``
    accepted, requests ``received`` (answered or not) and ``answered`` (counted before the
    answer is sent, so a client that asserts at once sees it). Starts at construction; use
    it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        respond: Respond,
        mode: Mode = "close_on_reuse",
        *,
        timeout: float = 5.0,
        partial: bytes = b"HTTP/1.1 200",
        name: str = "keepalive-server",
    ) -> None:
        self.mode: Mode = mode
        self._respond = respond
        self._timeout = timeout
        self._partial = partial
        self._name = name
        self._lock = threading.Lock()
        self._connections = 0
        self._received = 0
        self._answered = 0
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._acceptor = threading.Thread(target=self._accept, name=f"{name}-accept")
        self._acceptor.start()

    @property
    def connections(self) -> int:
        """Connections accepted."""
        with self._lock:
            return self._connections

    @property
    def received(self) -> int:
        """Requests read, answered or not."""
        with self._lock:
            return self._received

    @property
    def answered(self) -> int:
        """Requests answered in full."""
        with self._lock:
            return self._answered

    def __enter__(self) -> KeepAliveServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting, end the open connections and join every thread.

        Each join waits at most ``timeout`` seconds.

        Raises:
            RuntimeError: A server thread was still alive after its join.
        """
        self._closing.set()
        try:  # accept() blocks; a connection of our own wakes it on every platform
            socket.create_connection(("127.0.0.1", self.port), timeout=self._timeout).close()
        except OSError:
            pass  # the acceptor has stopped already
        self._acceptor.join(self._timeout)
        self._listener.close()
        with self._lock:
            for conn in self._open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked on a pooled socket
                except OSError:
                    pass  # its thread closed it meanwhile
            threads = [self._acceptor, *self._threads]
        for thread in threads:
            thread.join(self._timeout)
        alive = [thread.name for thread in threads if thread.is_alive()]
        if alive:
            raise RuntimeError(f"keep-alive server threads did not stop: {alive}")

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self._closing.is_set():
                conn.close()
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(self._timeout)
            thread = threading.Thread(target=self._serve, args=(conn,), name=f"{self._name}-conn")
            with self._lock:
                self._connections += 1
                self._open.add(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._serve_requests(conn)
        except OSError:
            pass  # the client went away, went quiet past timeout, or close() shut it down
        finally:
            with self._lock:
                self._open.discard(conn)

    def _serve_requests(self, conn: socket.socket) -> None:
        buffer = bytearray()
        served = 0
        while (path := _read_request(conn, buffer)) is not None:
            with self._lock:
                self._received += 1
                number = self._received
            if self.mode == "close_fresh" or (served and self.mode in _ON_REUSE):
                if self.mode == "partial_on_reuse":
                    conn.sendall(self._partial)
                elif self.mode == "reset_on_reuse":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return  # closed, unanswered (or half-answered)
            response = self._respond(path, number)
            with self._lock:  # counted before sending: the client may assert at once
                self._answered += 1
            conn.sendall(response)
            served += 1
            if self.mode == "close_after":
                return
