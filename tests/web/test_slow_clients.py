"""What a client that reads slowly, or not at all, costs the server: a bounded kernel
send queue, and a stream cut only when it stops draining (``write_timeout`` is the time
the client takes no byte, not the time one write takes). Real werkzeug servers and
loopback TCP sockets; the kernel's own counters (``/proc/net/tcp``)."""

from __future__ import annotations

import logging
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_sync.web import _stall
from agent_sync.web._stall import StallGuard

from .test_chat_routes import chat_app
from .test_limits import _CLOSED

_PROC_TCP = Path("/proc/net/tcp")
_SEND_BUFFER = 128 * 1024  # asked for; the kernel doubles it for its bookkeeping

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_INFO") or not _PROC_TCP.exists(), reason="Linux TCP counters"
)


def _unsent(server_port: int, client_port: int) -> int:
    """The bytes the server's side of this connection holds, not yet taken by the client."""
    for line in _PROC_TCP.read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == (
            client_port
        ):
            return int(fields[4].split(":")[0], 16)
    raise AssertionError("no such connection")


def _never_reading(port: int, cid: str) -> socket.socket:
    """A client that starts a run and never reads a byte (a tiny receive buffer)."""
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
    return sock


class _AtCut(logging.Handler):
    """Runs ``measure`` in the watchdog's thread as it cuts a stream (before the socket is
    shut down: the queue is still there)."""

    def __init__(self, measure: Callable[[], int]) -> None:
        super().__init__(logging.INFO)
        self.measured: list[int] = []
        self.cut = threading.Event()
        self._measure = measure

    def emit(self, record: logging.LogRecord) -> None:
        if "has not read its stream" in record.getMessage():
            self.measured.append(self._measure())
            self.cut.set()


@contextmanager
def _handler(name: str, handler: logging.Handler) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(handler.level, logging.INFO))
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _queued_at_cut(port: int, cid: str) -> int:
    """What the server's side of a never-reading client's connection held when the
    watchdog cut it."""
    sock = _never_reading(port, cid)
    client_port = sock.getsockname()[1]
    at_cut = _AtCut(lambda: _unsent(port, client_port))
    try:
        with _handler("agent_sync.web._stall", at_cut):
            # The server's write blocks once the buffers are full; the watchdog cuts it
            # 1 s later (the pytest-timeout bounds the wait if it never does).
            poller = select.poll()
            poller.register(sock, _CLOSED)
            while not poller.poll(1000):
                pass
            assert at_cut.cut.wait(10)
    finally:
        sock.close()
    (queued,) = at_cut.measured
    return queued


def test_a_client_that_never_reads_pins_one_bounded_send_buffer_in_the_kernel() -> None:
    big = {"text": "z" * (4 << 20), "chunk_size": 4096}  # more than any socket buffer
    cids = ["c1", "c2", "c3"]
    with chat_app(*[big] * len(cids), write_timeout=1.0) as app:
        app.allowed.update(cids)
        queued: list[int] = []
        for cid in cids:
            queued.append(_queued_at_cut(app.port, cid))
            # A cut while the client's own buffer still held everything sent (the server's
            # thread was kept from its next write that long, on a busy machine) measures
            # nothing: try again.
            if queued[-1] > 16 * 1024:
                break
    # Uncapped, the kernel lets a socket's queue grow to net.ipv4.tcp_wmem's maximum (4 MiB).
    assert queued[-1] > 16 * 1024 and max(queued) <= 2 * _SEND_BUFFER, queued
    assert _stall.SEND_BUFFER_BYTES == _SEND_BUFFER


class _Reading(logging.Handler):
    """Counts the watchdog's checks that saw the client take bytes."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen = threading.Semaphore(0)

    def emit(self, record: logging.LogRecord) -> None:
        if "is reading its stream" in record.getMessage():
            self.seen.release()


def _recv_exactly(sock: socket.socket, size: int) -> int:
    got = 0
    while got < size:
        chunk = sock.recv(min(65536, size - got))
        if not chunk:
            break
        got += len(chunk)
    return got


def test_a_write_that_drains_slowly_is_never_cut_however_long_it_takes() -> None:
    timeout = 2.0  # the watchdog looks every quarter of it
    step = 128 * 1024  # what the client takes between two looks
    payload = b"x" * (3 << 19)  # past the buffers (about 0.3 MiB): the write waits on reads
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)  # as the routes do
    guard = StallGuard(server, timeout)
    written = threading.Event()
    failed: list[OSError] = []
    checks_while_writing = 0

    def write() -> None:
        guard.arm()
        try:
            server.sendall(payload)
        except OSError as exc:  # cut: the watchdog shut the socket down
            failed.append(exc)
        finally:
            guard.disarm()
            written.set()
            reading.seen.release()  # the client's wait ends: no look comes any more

    reading = _Reading()
    writer = threading.Thread(target=write, name="test-slow-write", daemon=True)
    try:
        with _handler("agent_sync.web._stall", reading):
            writer.start()
            received = _recv_exactly(client, step)
            while True:
                # Each look that saw bytes taken lets the client take some more: the write
                # lasts as many looks as it takes, each a quarter of the timeout apart.
                assert reading.seen.acquire(timeout=10), "the watchdog never saw the reads"
                if written.is_set():
                    break
                checks_while_writing += 1
                received += _recv_exactly(client, min(step, len(payload) - received))
            writer.join(10)
            received += _recv_exactly(client, len(payload) - received)
    finally:
        guard.disarm()
        client.close()
        server.close()
    assert failed == [] and received == len(payload)
    # More looks than fit in one timeout: the write outlasted it, drained, and was not cut.
    assert checks_while_writing > 4, checks_while_writing
