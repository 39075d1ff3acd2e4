"""Per-request socket abort for botocore clients: how ``cancel()`` reaches blocked I/O.

Why
---
A botocore call blocked in ``recv`` (a silent event stream, response headers that never
come) or in ``connect`` cannot be woken by closing the response from another thread
(measured: the read keeps blocking). Shutting the socket down (``SHUT_RDWR``) wakes it at
once, with EOF or an error.

Design
------
One boto3 client is shared by many threads, so an abort must hit exactly the socket of its
own request. :func:`install` swaps the connection-pool classes of a client's
``URLLib3Session`` for subclasses that report every connection they hand out to the
:class:`RequestAbort` bound (by :func:`bind`, a :mod:`contextvars` variable) in the calling
thread:

* a pooled connection is reported when taken from the pool (``_get_conn``);
* a new connection reports its socket right after ``socket()``, before ``connect()``, so an
  abort also interrupts a hanging connect;
* a connection going back to the pool (``_put_conn``) is forgotten first, so a late abort
  can never touch a connection that another request has picked up.

The handle keeps a ``dup`` of each socket's file descriptor and shuts *that* down: the
shutdown acts on the shared TCP socket (plain or TLS, even mid-handshake), and because the
handle owns the duplicate, a descriptor number reused after urllib3 closed its socket can
never be hit by mistake. Duplicates are closed on release and in :meth:`RequestAbort.detach`.

A shut-down connection never goes back to the pool in a usable-looking state: urllib3 closes
a connection on any read error, ``HTTPResponse.close()`` closes it, and the pool drops a
connection whose socket reads EOF before reusing it.

Known limits: a client whose HTTP session is not botocore's ``URLLib3Session`` (a custom
``http_session``) cannot be instrumented; :func:`install` returns ``False`` and the provider
falls back to shutting down the response's socket once headers have arrived.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

from botocore.awsrequest import (
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
)
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import allowed_gai_family

__all__ = ["RequestAbort", "bind", "install"]

logger = logging.getLogger(__name__)

_current: contextvars.ContextVar[RequestAbort | None] = contextvars.ContextVar(
    "agent_sync_bedrock_request_abort", default=None
)
_OWNER_ATTR = "_agent_sync_request_abort"


class RequestAbort:
    """The sockets one model request is using; :meth:`abort` shuts them all down.

    Thread-safe: the request's thread attaches and releases sockets, any thread aborts.
    """

    __slots__ = ("_aborted", "_dups", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._dups: dict[int, socket.socket] = {}  # id(connection) -> duplicate socket

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` has been called."""
        return self._aborted

    def attach(self, connection: object, sock: socket.socket) -> None:
        """Track ``sock`` (the socket of ``connection``) for this request.

        If the request was already aborted, the socket is shut down at once.
        """
        try:
            dup = socket.fromfd(sock.fileno(), sock.family, sock.type, sock.proto)
        except OSError:  # already closed: nothing left to abort
            return
        with self._lock:
            old = self._dups.pop(id(connection), None)
            if not self._aborted:
                self._dups[id(connection)] = dup
                dup = None  # type: ignore[assignment]
        if old is not None:
            old.close()
        if dup is not None:  # aborted before we got here
            _shutdown(dup)
            dup.close()

    def release(self, connection: object) -> None:
        """Stop tracking ``connection`` (it is going back to the pool)."""
        with self._lock:
            dup = self._dups.pop(id(connection), None)
        if dup is not None:
            dup.close()

    def abort(self) -> None:
        """Shut down every tracked socket. Idempotent; safe from any thread."""
        with self._lock:
            self._aborted = True
            dups = list(self._dups.values())
            # Shut down under the lock: release()/detach() cannot close a duplicate
            # while we are using it.
            for dup in dups:
                _shutdown(dup)

    def detach(self) -> None:
        """Forget every socket; a later :meth:`abort` only sets the flag."""
        with self._lock:
            dups = list(self._dups.values())
            self._dups.clear()
        for dup in dups:
            dup.close()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected yet or already gone: nothing to wake
        pass


@contextlib.contextmanager
def bind(handle: RequestAbort) -> Iterator[RequestAbort]:
    """Make ``handle`` the abort handle of requests this thread sends inside the block."""
    token = _current.set(handle)
    try:
        yield handle
    finally:
        _current.reset(token)


def _owner(connection: Any) -> RequestAbort | None:
    owner: RequestAbort | None = getattr(connection, _OWNER_ATTR, None)
    return owner


class _AbortableConnectionMixin:
    """Creates the socket itself so it is tracked before ``connect()`` can block."""

    # Attributes of urllib3.connection.HTTPConnection this mixin relies on.
    _dns_host: str
    host: str
    port: int
    timeout: Any
    source_address: tuple[str, int] | None
    socket_options: Any

    def _new_conn(self) -> socket.socket:
        handle = _owner(self)
        try:
            sock = _create_connection(
                (self._dns_host, self.port),
                self.timeout,
                self.source_address,
                self.socket_options,
                lambda s: handle.attach(self, s) if handle is not None else None,
                handle,
            )
        except socket.gaierror as e:
            raise NameResolutionError(self.host, self, e) from e  # type: ignore[arg-type]
        except TimeoutError as e:
            raise ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from e
        except OSError as e:
            raise NewConnectionError(
                self,  # type: ignore[arg-type]
                f"Failed to establish a new connection: {e}",
            ) from e
        sys.audit("http.client.connect", self, self.host, self.port)
        return sock


def _create_connection(
    address: tuple[str, int],
    timeout: Any,
    source_address: tuple[str, int] | None,
    socket_options: Any,
    on_socket: Any,
    handle: RequestAbort | None,
) -> socket.socket:
    # Mirrors urllib3.util.connection.create_connection, plus the on_socket hook.
    host, port = address
    host = host.strip("[]")
    error: OSError | None = None
    for family, kind, proto, _, addr in socket.getaddrinfo(
        host, port, allowed_gai_family(), socket.SOCK_STREAM
    ):
        sock = None
        try:
            sock = socket.socket(family, kind, proto)
            for option in socket_options or ():
                sock.setsockopt(*option)
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            on_socket(sock)
            if handle is not None and handle.aborted:
                raise OSError("request aborted by cancel()")
            sock.connect(addr)
            return sock
        except OSError as exc:
            error = exc
            if sock is not None:
                sock.close()
    if error is not None:
        raise error
    raise OSError("getaddrinfo returned an empty list")


class AbortableHTTPConnection(_AbortableConnectionMixin, AWSHTTPConnection):  # type: ignore[misc]
    """botocore's HTTP connection, with its socket tracked from creation."""


class AbortableHTTPSConnection(_AbortableConnectionMixin, AWSHTTPSConnection):  # type: ignore[misc]
    """botocore's HTTPS connection, with its socket tracked from creation."""


class _AbortablePoolMixin:
    """Reports connections handed out to, and taken back from, the current request."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        connection = super()._get_conn(timeout)  # type: ignore[misc]
        handle = _current.get()
        setattr(connection, _OWNER_ATTR, handle)
        sock = getattr(connection, "sock", None)
        if handle is not None and sock is not None:
            handle.attach(connection, sock)
        return connection

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            handle = _owner(conn)
            if handle is not None:
                handle.release(conn)
            setattr(conn, _OWNER_ATTR, None)
        super()._put_conn(conn)  # type: ignore[misc]


class AbortableHTTPConnectionPool(_AbortablePoolMixin, AWSHTTPConnectionPool):  # type: ignore[misc]
    """botocore's HTTP pool, reporting its connections to the current request."""

    ConnectionCls = AbortableHTTPConnection


class AbortableHTTPSConnectionPool(_AbortablePoolMixin, AWSHTTPSConnectionPool):  # type: ignore[misc]
    """botocore's HTTPS pool, reporting its connections to the current request."""

    ConnectionCls = AbortableHTTPSConnection


def install(client: Any) -> bool:
    """Make ``client``'s future connections abortable per request.

    Pools the client already created keep their classes (their requests can still be
    aborted once response headers arrived, through the response's socket).

    Args:
        client: A boto3 client.

    Returns:
        ``True`` if the client's HTTP session could be instrumented.
    """
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    pool_classes = getattr(session, "_pool_classes_by_scheme", None)
    if not isinstance(pool_classes, dict):
        logger.warning(
            "session=<%s> | unknown botocore http session; cancel() can only abort a "
            "request after its response headers arrived",
            type(session).__name__,
        )
        return False
    # botocore's PoolManager and proxy managers share this dict object, so updating it
    # in place covers every pool created from now on.
    pool_classes["http"] = AbortableHTTPConnectionPool
    pool_classes["https"] = AbortableHTTPSConnectionPool
    return True


def attach_response(handle: RequestAbort, raw_response: Any) -> None:
    """Track the socket of an urllib3 response (fallback for uninstrumented clients)."""
    connection = getattr(raw_response, "_connection", None)
    sock = getattr(connection, "sock", None)
    if connection is not None and sock is not None and _owner(connection) is None:
        handle.attach(connection, sock)
