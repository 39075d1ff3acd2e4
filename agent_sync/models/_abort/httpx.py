"""The httpx2 side of the socket aborts: how ``cancel()`` reaches a read in the Anthropic SDK.

Design
------
httpcore2 creates sockets through a *network backend* (a public extension point:
``httpcore2.NetworkBackend`` / ``NetworkStream``). :class:`AbortableBackend` connects with
the shared abortable :func:`~._connect.connect`, and its streams report every blocking
operation (connect, TLS handshake, read, write) to the :class:`AbortSlot` bound to the
calling thread's context by :func:`bound`. A slot is one in-flight request: ``abort()``
shuts down the socket that request is blocked on, or, between operations, marks the slot
so that the next operation shuts its socket down first and fails at once.

Because a slot only ever holds a socket *while its own request is inside a blocking call
on it*, an abort can never hit a connection that went back to the pool and now serves
another request (one model shared by several agents in several threads is safe). The
aborted connection fails with a read/write error, which makes httpcore2 close it rather
than return it to the pool.

:class:`AbortableTransport` is an ``httpx2.HTTPTransport`` whose pool uses the backend.
``HTTPTransport`` takes no ``network_backend`` argument, so we hand ours to the pool it
built; that is the single private attribute this module touches (``_pool``), checked at
construction.

Stale pooled connections: a server may close a keep-alive connection right after a
response while advertising keep-alive (llama.cpp's ``llama-server`` does), so the next
request on it fails. :class:`AbortableTransport` re-sends such a request at once, on
another connection, without involving the agent's retry policy (no back-off, no retry
counted), but only when the request provably never got an answer: the connection came
from the pool (it had served a response before), it failed on send or on the first read
before a single response byte, the request was not aborted, and its body can be replayed.
A fresh connection's failure, a timeout, or a failure after any byte came back is never
re-sent. Each stream records this per request in an :class:`_Attempt` bound to the
context by :meth:`AbortableTransport.handle_request`.

Known limits: DNS resolution (``getaddrinfo``) cannot be interrupted; HTTP/2 (off by
default) multiplexes requests on one socket, so an abort would fail its neighbours too.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore2
import httpx2

from ._connect import Tracker, connect, connect_socket, shutdown_quietly

__all__ = [
    "AbortSlot",
    "AbortableBackend",
    "AbortableTransport",
    "bound",
    "current",
    "is_abortable",
]

logger = logging.getLogger(__name__)

SocketOption = Any  # httpcore2's SOCKET_OPTION tuple shapes

current: ContextVar[AbortSlot | None] = ContextVar("agent_sync_httpx_abort_slot", default=None)
"""The slot bound to the current context (:func:`bound` sets it; hot loops set and reset
it inline)."""

_STALE_RESENDS = 64
"""At most this many stale pooled connections are skipped for one request (each one is
closed as it fails, so the pool runs out of them long before in practice)."""


class _Attempt:
    """What one send of a request did on the wire: which connection, reused, any answer."""

    __slots__ = ("received", "reused", "stream")

    def __init__(self) -> None:
        self.stream: _AbortableStream | None = None
        self.reused = False
        self.received = False


_current_attempt: ContextVar[_Attempt | None] = ContextVar("agent_sync_httpx_attempt", default=None)


class AbortSlot:
    """The abort handle of one in-flight request. Thread-safe.

    ``abort()`` may be called from any thread at any time, any number of times, also after
    :meth:`close` (then it does nothing).
    """

    __slots__ = ("_aborted", "_closed", "_lock", "_pinned", "_sock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pinned: socket.socket | None = None
        self._aborted = False
        self._closed = False

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` was called before :meth:`close`."""
        return self._aborted

    def abort(self) -> None:
        """Shut down the socket the request is blocked on, and any later one it uses."""
        with self._lock:
            if self._closed or self._aborted:
                return
            self._aborted = True
            targets = [s for s in (self._sock, self._pinned) if s is not None]
            # shutdown() does not block, so it is done under the lock: close() cannot
            # release the socket to someone else half-way through.
            for sock in targets:
                shutdown_quietly(sock)
        if targets:
            logger.debug("sockets=<%d> | aborted in-flight request", len(targets))

    def enter(self, sock: socket.socket) -> None:
        """Record that the request is about to block on ``sock`` (shut it if aborted)."""
        with self._lock:
            if self._aborted:
                shutdown_quietly(sock)
            else:
                self._sock = sock

    def leave(self) -> None:
        """The blocking operation returned: the socket is no longer ours to shut."""
        with self._lock:
            self._sock = None

    def track(self, sock: socket.socket | None) -> AbortSlot:
        """:meth:`enter` (``sock``) or :meth:`leave` (``None``): a connect's tracker."""
        if sock is None:
            self.leave()
        else:
            self.enter(sock)
        return self

    def pin(self, sock: socket.socket | None) -> None:
        """Hold ``sock`` for the whole response: for transports we do not own.

        ``None`` lets it go (the response is complete; its connection may be pooled).
        """
        with self._lock:
            if sock is not None and self._aborted:
                shutdown_quietly(sock)
            self._pinned = sock

    def close(self) -> None:
        """The request is over: later aborts do nothing."""
        with self._lock:
            self._closed = True
            self._sock = None
            self._pinned = None


@contextmanager
def bound(slot: AbortSlot) -> Iterator[None]:
    """Bind ``slot`` to the current context for the duration of the block.

    Bind it around each call into the SDK (not across a ``yield``), so that two streams
    consumed alternately in one thread never see each other's slot.
    """
    token = current.set(slot)
    try:
        yield
    finally:
        current.reset(token)


def is_abortable(network_stream: object) -> bool:
    """Whether a response's ``network_stream`` extension comes from :class:`AbortableBackend`."""
    return isinstance(network_stream, _AbortableStream)


def _is_readable(sock: socket.socket) -> bool:
    # httpcore2 asks this of idle pooled connections: readable means the server closed it.
    fd = sock.fileno()
    if fd == -1:
        return True
    if hasattr(select, "poll"):  # select() fails on descriptors above FD_SETSIZE (1024)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


class _AbortableStream(httpcore2.NetworkStream):
    """A blocking socket stream that reports blocking calls to the bound slot."""

    __slots__ = ("_answered", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._answered = False  # a response byte ever came back: the pool reuses us

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        slot = current.get()
        if slot is not None:
            slot.enter(self._sock)
        try:
            self._sock.settimeout(timeout)
            data = self._sock.recv(max_bytes)
            if data:
                self._answered = True
                attempt = _current_attempt.get()
                if attempt is not None and attempt.stream is self:
                    attempt.received = True
            return data
        except TimeoutError as exc:
            raise httpcore2.ReadTimeout(exc) from exc
        except OSError as exc:
            raise httpcore2.ReadError(exc) from exc
        finally:
            if slot is not None:
                slot.leave()

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        attempt = _current_attempt.get()
        if attempt is not None and attempt.stream is not self:
            # The request's first write on this connection: was it pooled (used before)?
            attempt.stream, attempt.reused, attempt.received = self, self._answered, False
        slot = current.get()
        if slot is not None:
            slot.enter(self._sock)
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(buffer)
        except TimeoutError as exc:
            raise httpcore2.WriteTimeout(exc) from exc
        except OSError as exc:
            raise httpcore2.WriteError(exc) from exc
        finally:
            if slot is not None:
                slot.leave()

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        slot = current.get()
        # wrap_socket detaches our socket object from its descriptor before the handshake
        # blocks, so shutting that object down would do nothing: give the slot a duplicate
        # descriptor of the same connection (shutdown acts on the connection, not the fd).
        handle = self._sock.dup() if slot is not None else None
        if slot is not None and handle is not None:
            slot.enter(handle)
        try:
            self._sock.settimeout(timeout)
            tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
        except TimeoutError as exc:
            self._sock.close()
            raise httpcore2.ConnectTimeout(exc) from exc
        except OSError as exc:
            self._sock.close()
            raise httpcore2.ConnectError(exc) from exc
        finally:
            if slot is not None and handle is not None:
                slot.leave()
                handle.close()
        return _AbortableStream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            # httpcore2 only calls selected_alpn_protocol() on it, which SSLSocket has.
            return self._sock if isinstance(self._sock, ssl.SSLSocket) else None
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "is_readable":
            return _is_readable(self._sock)
        return None


class AbortableBackend(httpcore2.NetworkBackend):
    """A network backend whose sockets can be shut down by the request's :class:`AbortSlot`."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect like httpcore2's own backend, with the socket exposed to the slot."""
        # As httpcore2's backend: TCP_NODELAY on top of the caller's options.
        options = [*(socket_options or ()), (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        source = None if local_address is None else (local_address, 0)
        with _connecting() as track:
            sock = connect(
                (host, port), timeout, source_address=source, socket_options=options, track=track
            )
        return _AbortableStream(sock)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect to a Unix socket, exposed to the slot like TCP sockets."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with _connecting() as track:
            try:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.settimeout(timeout)
                connect_socket(sock, path, track(sock) if track is not None else None)
            except BaseException:
                sock.close()
                raise
        return _AbortableStream(sock)

    def sleep(self, seconds: float) -> None:
        """httpcore2's connect-retry pause (unused: retries are 0)."""
        time.sleep(seconds)


@contextmanager
def _connecting() -> Iterator[Tracker | None]:
    """The bound slot's tracker for one connect; connect failures as httpcore2's."""
    slot = current.get()
    try:
        yield None if slot is None else slot.track
    except TimeoutError as exc:
        raise httpcore2.ConnectTimeout(exc) from exc
    except OSError as exc:
        raise httpcore2.ConnectError(exc) from exc
    finally:
        if slot is not None:
            slot.leave()


class AbortableTransport(httpx2.HTTPTransport):
    """``httpx2.HTTPTransport`` whose connections can be aborted per request.

    Takes the same arguments as ``httpx2.HTTPTransport`` (``limits``, ``verify``,
    ``proxy``, ``socket_options``...).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        pool = getattr(self, "_pool", None)
        if not hasattr(pool, "_network_backend"):
            raise TypeError(
                "this httpx2 version's HTTPTransport has no pool to give a network backend"
            )
        pool._network_backend = AbortableBackend()  # type: ignore[union-attr]

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request``; re-send it at once if its pooled connection had gone stale.

        See the module docstring for when a re-send is allowed (never after a response
        byte, a timeout, an abort, or a failure on a fresh connection).
        """
        for resend in range(_STALE_RESENDS + 1):
            attempt = _Attempt()
            token = _current_attempt.set(attempt)
            try:
                return super().handle_request(request)
            except (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError) as exc:
                if resend == _STALE_RESENDS or not _is_stale(attempt, request):
                    raise
                logger.debug(
                    "error=<%s> | pooled connection was closed by the server; re-sending",
                    type(exc).__name__,
                )
            finally:
                _current_attempt.reset(token)
        raise AssertionError("unreachable")  # the last pass returns or raises


def _is_stale(attempt: _Attempt, request: httpx2.Request) -> bool:
    """Whether a failed send provably got no answer on a connection the server closed."""
    slot = current.get()
    return (
        attempt.reused
        and not attempt.received
        and not (slot is not None and slot.aborted)
        and isinstance(request.stream, httpx2.ByteStream)  # the body can be sent again
    )
