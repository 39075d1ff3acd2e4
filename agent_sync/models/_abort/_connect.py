"""The one abortable ``connect``, shared by the httpx2 and urllib3 sides.

Design
------
:func:`connect` is ``socket.create_connection`` (every resolved address in turn, the last
error raised) with two differences:

* each socket is shown to a *tracker* before it connects, so the request's abort handle
  can shut it down while it is still in ``SYN_SENT`` (on Linux, ``shutdown()`` aborts a
  pending connect and wakes the thread waiting on it);
* the connect itself (:func:`connect_socket`) starts non-blocking and checks the handle
  *after* the SYN is out. A plain blocking ``connect()`` has a window between the abort
  check and the moment the kernel starts the handshake: a ``shutdown()`` in that window is
  a no-op and the connect then blocks until its timeout. Here either the abort saw a
  connecting socket (and woke the wait), or the check after ``connect_ex`` sees the abort.

An aborted handle stops the address loop at once (no further address is tried).

Known limit: DNS resolution (``getaddrinfo``) cannot be interrupted; the resolver bounds it.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["AbortHandle", "Tracker", "connect", "connect_socket", "shutdown_quietly"]


class AbortHandle(Protocol):
    """What the connect needs of a request's abort handle."""

    @property
    def aborted(self) -> bool:
        """Whether the request has been aborted."""
        ...


Tracker = Callable[[socket.socket | None], AbortHandle | None]
"""Called with each socket before it connects (returns the request's handle, if any), and
with ``None`` when that socket failed and is dropped."""

_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN, 10035})


def shutdown_quietly(sock: socket.socket) -> None:
    """``shutdown(SHUT_RDWR)``, ignoring a socket that is closed or not connected.

    ``socket.socket.shutdown`` on purpose, not ``SSLSocket.shutdown``: the latter also
    drops the SSL object under the feet of the thread still reading it.
    """
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed, or never connected: nothing is blocked on it


def connect(
    address: tuple[str, int],
    timeout: float | None,
    *,
    family: int = socket.AF_UNSPEC,
    source_address: tuple[str, int] | None = None,
    socket_options: Iterable[tuple[Any, ...]] = (),
    track: Tracker | None = None,
) -> socket.socket:
    """``socket.create_connection`` that the request's abort handle can interrupt.

    Args:
        address: ``(host, port)``; an IPv6 host may keep its brackets.
        timeout: Connect timeout in seconds (``None``: block), kept on the socket.
        family: Address family for ``getaddrinfo`` (``AF_UNSPEC``: any).
        source_address: Local ``(host, port)`` to bind first, if any.
        socket_options: ``setsockopt`` argument tuples applied before connecting.
        track: Called with each socket before its connect (see :data:`Tracker`).

    Returns:
        The connected socket.

    Raises:
        OSError: The last address's failure (``TimeoutError`` for a timeout,
            ``ConnectionAbortedError`` once aborted, ``socket.gaierror`` from DNS).
    """
    host, port = address
    if host.startswith("["):
        host = host.strip("[]")
    options = list(socket_options)
    error: OSError | None = None
    for kind, socktype, proto, _name, sockaddr in socket.getaddrinfo(
        host, port, family, socket.SOCK_STREAM
    ):
        sock = None
        handle = None
        try:
            sock = socket.socket(kind, socktype, proto)
            for option in options:
                sock.setsockopt(*option)
            sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            handle = track(sock) if track is not None else None
            connect_socket(sock, sockaddr, handle)
            return sock
        except OSError as exc:
            error = exc
            if track is not None:
                track(None)
            if sock is not None:
                sock.close()
            if handle is not None and handle.aborted:
                raise
    if error is not None:
        raise error
    raise OSError("getaddrinfo returns an empty list")


def connect_socket(sock: socket.socket, address: Any, handle: AbortHandle | None) -> None:
    """``sock.connect(address)`` that an abort of ``handle`` interrupts at any moment.

    Honours the socket's timeout (``None``: wait as long as it takes).

    Raises:
        ConnectionAbortedError: ``handle`` was aborted before or while connecting.
        TimeoutError: The timeout passed.
        OSError: The connect failed.
    """
    if handle is not None and handle.aborted:
        # shutdown() of a socket that is not connecting yet does not stop a later
        # connect(): refuse to start it.
        raise ConnectionAbortedError("request aborted before connecting")
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        code = sock.connect_ex(address)
        if code in _IN_PROGRESS:
            if handle is not None and handle.aborted:
                raise ConnectionAbortedError("request aborted while connecting")
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_WRITE)
                if not selector.select(timeout):
                    raise TimeoutError("timed out")
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            raise OSError(code, os.strerror(code))
    finally:
        sock.settimeout(timeout)
