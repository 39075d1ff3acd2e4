"""Closing a stream whose client stopped reading: one watchdog thread per process.

A WSGI server writes each chunk a response yields with a blocking ``sendall``: a client
that stops reading (a stuck tab, a slow-loris) fills the socket buffers and holds the
server's thread in that write for ever, with the chunk in memory. The response cannot
time it out itself (the thread is inside the server), so :class:`StallGuard` arms a
deadline when it hands a chunk over and disarms it when the server asks for the next
one (the write is done). The watchdog thread (``agent-sync-stall-watch``, started on
first use, once per process) shuts down the socket of a write still blocked at its
deadline: the server's ``sendall`` fails at once (``EPIPE``, what a client that left
gives), the server closes the response and the connection (a reset: the unsent bytes are
dropped), and the client may reconnect with ``Last-Event-ID`` (the run's stored log is
the buffer).

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

__all__ = ["StallGuard"]

logger = logging.getLogger(__name__)

_ids = itertools.count(1)
_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset


class _Watchdog:
    """Deadlines of armed guards (one per response being written: at most the server's
    threads); shuts down the socket of each one that passes.

    Request threads share it, so they take its lock only with ``with`` on a plain lock and
    wake the thread through a lock-free event (the rule of :mod:`agent_sync._signal_safe`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the three below; only ever `with self._lock:`
        self._armed: dict[int, tuple[float, socket.socket, float]] = {}
        self._waiting_until: float | None = None  # the thread's next wake-up (None: never)
        self._thread: threading.Thread | None = None
        self._wake = Event()

    def arm(self, key: int, client: socket.socket, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        started: threading.Thread | None = None
        with self._lock:
            self._armed[key] = (deadline, client, timeout)
            if self._thread is None:
                self._thread = started = _new_thread(self._run)
            wake = self._waiting_until is None or deadline < self._waiting_until
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
                passed = [key for key, armed in self._armed.items() if armed[0] <= now]
                expired = [self._armed.pop(key) for key in passed]
                nearest = min((armed[0] for armed in self._armed.values()), default=None)
                self._waiting_until = nearest
            for _, client, timeout in expired:
                self._shut(client, timeout)
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
