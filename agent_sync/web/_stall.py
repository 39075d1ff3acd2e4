"""Closing a stream whose client stopped reading: one watchdog thread per process.

A WSGI server writes each chunk a response yields with a blocking ``sendall``: a client
that stops reading (a stuck tab, a slow-loris) fills the socket buffers and holds the
server's thread in that write for ever, with the chunk in memory. The response cannot
time it out itself (the thread is inside the server), so :class:`StallGuard` arms a
watch when it hands a chunk over and disarms it when the server asks for the next one
(the write is done). The watchdog thread (``agent-sync-stall-watch``, started on first
use, once per process) shuts down the socket of a write that has not DRAINED for the
timeout: no byte of it taken by the client (on TCP, the bytes the client acknowledged,
``TCP_INFO``, looked at every quarter of the timeout; elsewhere, the write as a whole).
A client that reads slowly but steadily is never cut, however long one write takes. The
server's ``sendall`` then fails at once (``EPIPE``, what a client that left gives), the
server closes the response and the connection (a reset: the unsent bytes are dropped),
and the client may reconnect with ``Last-Event-ID`` (the run's stored log is the buffer).

What a stuck client pins in the kernel is bounded too: :func:`bound_send_buffer` caps a
streamed TCP response's send buffer at :data:`SEND_BUFFER_BYTES` (the kernel's default
grows to 4 MiB per socket for a reader that never comes).

Only sockets the server shows (see :func:`._disconnect.socket_from_environ`) are watched.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Final

from .._signal_safe import Event

__all__ = ["SEND_BUFFER_BYTES", "StallGuard", "bound_send_buffer", "bytes_acked"]

logger = logging.getLogger(__name__)

_ids = itertools.count(1)
_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset

SEND_BUFFER_BYTES: Final = 128 * 1024
"""The send buffer asked for a streamed response's TCP socket (Linux doubles it for its
bookkeeping): what a client that stops reading pins in the kernel, instead of up to
``net.ipv4.tcp_wmem``'s 4 MiB. Plenty for a stream: 2 MiB/s at 100 ms of round trip."""

_TCP_INFO: Final = getattr(socket, "TCP_INFO", None)  # Linux
_TCP_INFO_BYTES: Final = 256
_BYTES_ACKED_AT: Final = 120  # struct tcp_info's tcpi_bytes_acked (u64), Linux 4.1+
_CHECKS_PER_TIMEOUT: Final = 4


def bound_send_buffer(client: socket.socket) -> None:
    """Cap a streamed response's TCP send buffer at :data:`SEND_BUFFER_BYTES` (a Unix
    socket, or one the server closed, is left as it is)."""
    if client.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    except OSError:
        logger.debug("SO_SNDBUF not set on the client socket")


def bytes_acked(client: socket.socket) -> int | None:
    """The bytes of this TCP socket's stream its peer acknowledged (always growing while
    the client reads), or ``None`` where the kernel does not tell (not Linux, not TCP,
    closed)."""
    if _TCP_INFO is None or client.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        info = client.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_BYTES)
    except OSError:
        return None
    if len(info) < _BYTES_ACKED_AT + 8:  # a kernel older than 4.1
        return None
    acked: int = struct.unpack_from("=Q", info, _BYTES_ACKED_AT)[0]
    return acked


class _Armed:
    """One write being watched: the last time its client was seen taking bytes."""

    __slots__ = ("acked", "check_at", "client", "since", "timeout")

    def __init__(self, client: socket.socket, timeout: float, now: float) -> None:
        self.client = client
        self.timeout = timeout
        self.since = now  # the write started, or the client was last seen taking bytes
        self.acked = bytes_acked(client)  # None: the write is timed as a whole
        self.check_at = now + self._step()

    def _step(self) -> float:
        return self.timeout if self.acked is None else self.timeout / _CHECKS_PER_TIMEOUT

    def stalled(self, now: float) -> bool:
        """At ``check_at``: whether the client took nothing for the timeout (else the next
        check is set)."""
        if self.acked is not None:
            acked = bytes_acked(self.client)
            if acked is not None and acked != self.acked:  # it reads: the write drains
                self.acked, self.since = acked, now
                logger.debug("a slow client is reading its stream: its write goes on")
        deadline = self.since + self.timeout
        if now >= deadline:
            return True
        self.check_at = min(now + self._step(), deadline)
        return False


class _Watchdog:
    """Deadlines of armed guards (one per response being written: at most the server's
    threads); shuts down the socket of each one that passes.

    Request threads share it, so they take its lock only with ``with`` on a plain lock and
    wake the thread through a lock-free event (the rule of :mod:`agent_sync._signal_safe`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the three below; only ever `with self._lock:`
        self._armed: dict[int, _Armed] = {}
        self._waiting_until: float | None = None  # the thread's next wake-up (None: never)
        self._thread: threading.Thread | None = None
        self._wake = Event()

    def arm(self, key: int, client: socket.socket, timeout: float) -> None:
        armed = _Armed(client, timeout, time.monotonic())  # its syscall outside the lock
        started: threading.Thread | None = None
        with self._lock:
            self._armed[key] = armed
            if self._thread is None:
                self._thread = started = _new_thread(self._run)
            wake = self._waiting_until is None or armed.check_at < self._waiting_until
        if started is not None:  # started outside the lock: start() waits on the new thread
            started.start()
        elif wake:
            self._wake.set()

    def disarm(self, key: int) -> None:
        """After this returns, the guard's socket is not shut down (until armed again)."""
        with self._lock:
            self._armed.pop(key, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake.clear()  # an arm() after this sets it again: its wait ends
                now = time.monotonic()
                due = [key for key, armed in self._armed.items() if armed.check_at <= now]
                # A check is one getsockopt per guard due: quick enough for the lock.
                passed = [key for key in due if self._armed[key].stalled(now)]
                expired = [self._armed.pop(key) for key in passed]
                nearest = min((armed.check_at for armed in self._armed.values()), default=None)
                self._waiting_until = nearest
            for armed in expired:
                self._shut(armed.client, armed.timeout)
            self._wake.wait(None if nearest is None else nearest - now)

    @staticmethod
    def _shut(client: socket.socket, timeout: float) -> None:
        logger.info(
            "a client has not read its stream for %.0f s: closing it (it may reconnect)",
            timeout,
        )
        try:
            # Reset when the server closes it: the unsent bytes are dropped (they would
            # wait in the kernel for a reader that never comes, FIN behind them).
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            client.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed by the server
            pass


def _new_thread(target: Callable[[], None]) -> threading.Thread:
    return threading.Thread(target=target, name="agent-sync-stall-watch", daemon=True)


_watchdog: Final[list[_Watchdog]] = [_Watchdog()]


class StallGuard:
    """One response's guard: armed while the server writes a chunk.

    Args:
        client: The client's socket.
        timeout: Seconds a write may stay blocked before the stream is closed.
    """

    def __init__(self, client: socket.socket, timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self._key = next(_ids)

    def arm(self) -> None:
        """A chunk goes to the server now."""
        _watchdog[0].arm(self._key, self._client, self._timeout)

    def next_chunk(self, produce: Callable[[], bytes]) -> bytes:
        """The server asks for the next chunk: the last one was written (disarmed), and the
        one ``produce`` returns goes to the server now (armed until it asks again)."""
        self.disarm()
        chunk = produce()
        self.arm()
        return chunk

    def disarm(self) -> None:
        """The server came back for more (the chunk was written), or the response ended."""
        _watchdog[0].disarm(self._key)


def _forget_watchdog() -> None:
    """In a forked child: the parent's watchdog thread does not run here."""
    _watchdog[0] = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_watchdog)
