"""Noticing a client disconnect while nothing is written, when the server shows its socket.

A WSGI server learns that the client left only when a write fails, so while the model is
silent (thinking, a slow tool, a retry back-off) only keep-alive frames would reveal it.
Some servers put the client's socket in the environ (werkzeug: ``werkzeug.socket``,
gunicorn: ``gunicorn.socket``). Then the response iterator can wait on two things at once
with a selector: a wake-up socket pair that the agent's worker pokes after each queued
event, and the client socket, which turns readable at EOF (FIN) or reset.

Readable does not always mean gone: a peek (``MSG_PEEK``, nothing is consumed) tells EOF
from bytes the client sent. On bytes, the client is presumed alive and its socket is no
longer watched (the keep-alives still are). TLS sockets are never watched: a peek would
see TLS records, not the application's bytes. Limitation: a client that half-closes its
sending side but keeps reading looks gone; browsers and common HTTP clients do not do that.
"""

from __future__ import annotations

import logging
import selectors
import socket
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["DisconnectWatch", "SocketProbe", "no_delay", "socket_from_environ"]

logger = logging.getLogger(__name__)

_ENVIRON_KEYS = ("werkzeug.socket", "gunicorn.socket")
_PEEK_FLAGS = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)

WaitOutcome = Literal["ready", "timeout", "gone"]


def socket_from_environ(environ: Mapping[str, Any]) -> socket.socket | None:
    """The client's plain TCP socket, if the WSGI server exposes it, else ``None``.

    Args:
        environ: The WSGI environ (Flask: ``request.environ``; Django: ``request.META``).

    Returns:
        The socket (never a TLS socket), or ``None``.
    """
    for key in _ENVIRON_KEYS:
        sock = environ.get(key)
        if type(sock) is socket.socket:  # exact type: ssl.SSLSocket is a subclass
            return sock
    return None


def no_delay(client: socket.socket) -> None:
    """Send each write at once (``TCP_NODELAY``): a stream's small frames must not wait
    for the client to acknowledge the one before (up to 40 ms of delayed ACK)."""
    try:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:  # not TCP (a Unix socket behind a proxy), or already closed
        logger.debug("TCP_NODELAY not set on the client socket")


class SocketProbe:
    """Tells, without blocking, whether the client left (EOF or reset), by a peek.

    Bytes from the client mean it is alive: the probe then stops looking (unread bytes
    would read as "something happened" forever) and says so through :attr:`watching`.
    """

    def __init__(self, client: socket.socket) -> None:
        self.client: socket.socket | None = client

    @property
    def watching(self) -> bool:
        """Whether the socket is still looked at."""
        return self.client is not None

    def gone(self) -> bool:
        """Whether the client closed or reset its connection (never blocks)."""
        client = self.client
        if client is None:
            return False
        try:
            data = client.recv(1, _PEEK_FLAGS)
        except BlockingIOError:
            return False
        except OSError:  # reset by peer
            return True
        if data:
            # The client sent bytes after its request: alive; stop watching so that
            # unread bytes do not wake us forever. Keep-alive writes still detect a drop.
            self.client = None
            logger.debug("client sent data during the stream; watching writes only")
            return False
        return True


class DisconnectWatch:
    """Waits for a poke from the worker, the client leaving, or a timeout.

    ``notify`` may be called from any thread; ``wait`` only from the response iterator's.
    """

    def __init__(self, client: socket.socket) -> None:
        self._probe = SocketProbe(client)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._selector.register(client, selectors.EVENT_READ)

    def notify(self) -> None:
        """Wake ``wait`` (something was queued). Never blocks, never raises."""
        try:
            self._wake_w.send(b"\0")
        except OSError:  # buffer full (a wake-up is pending anyway) or already closed
            pass

    def wait(self, timeout: float | None) -> WaitOutcome:
        """Block until poked, the client is gone, or ``timeout`` seconds pass."""
        ready = self._selector.select(timeout)
        if not ready:
            return "timeout"
        for key, _ in ready:
            if key.fileobj is self._wake_r:
                self._drain()
            else:
                client = self._probe.client
                if self._probe.gone():
                    return "gone"
                if client is not None and not self._probe.watching:
                    self._selector.unregister(client)
        return "ready"

    def close(self) -> None:
        """Release the selector and the wake-up pair (not the client socket)."""
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _drain(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:  # BlockingIOError: drained
            pass
