"""The urllib3 side of the socket aborts: ``requests`` (OpenAI) and botocore (Bedrock).

Design
------
Three small pieces, usable with ``requests`` (:mod:`.requests` mounts them) and with any
other urllib3 user such as botocore (:func:`make_pool_manager_abortable`,
:func:`abortable_pool_class`):

* :class:`RequestAbort` is the handle of *one* logical request. :func:`abort_on_cancel`
  creates it and registers :meth:`RequestAbort.abort` as the cancel scope's abort
  callback. While :meth:`RequestAbort.capture` is active, a context variable points at
  the handle, so the connection that urllib3 picks (new or pooled) *claims* it in the
  requesting thread: when its socket is created (before it connects, through the shared
  :func:`~._connect.connect`) and when a request is sent on it. Only the capture needs
  the context variable; the body is read on the already-claimed connection, so a
  generator can yield outside ``capture()``.
* :class:`AbortableConnectionMixin` keeps a ``dup()`` of the connection's socket, made
  before ``connect()``. Shutting the duplicate down acts on the shared kernel socket, so
  it also works during the TLS handshake, when the plain socket object has already been
  detached by ``ssl.wrap_socket`` and ``conn.sock`` is not yet set.
* :class:`AbortablePoolMixin` releases the claim when urllib3 puts the connection back
  into the pool. A ``requests.Session`` shared by threads is therefore safe: an abort only
  ever shuts down a connection while *its own* request owns it.

Stale keep-alive connections
----------------------------
Servers such as llama.cpp answer with ``Connection: keep-alive`` and then close the socket.
urllib3 checks a pooled connection before reusing it, but a request sent before the close
arrives finds a dead socket: the read sees end-of-file with no response byte. Neither
botocore (retries off) nor ``requests`` (no read retries for POST) re-send it, so the
agent paid a full retry back-off for nothing. :class:`AbortablePoolMixin` re-sends such a
request at once, on another connection, and only when it provably never reached the
server: the connection had already served a response on its current socket (it came from
the pool), the server closed it (end-of-file or reset) before the first byte of the
response (seen by peeking at the socket; on TLS, ``RemoteDisconnected``; a partial status
line is never re-sent), the request was not aborted, and
the body can be sent again (bytes, str or none). A fresh connection is never re-sent.

Known races, and why they are harmless
--------------------------------------
* Abort before the socket exists: the handle remembers it was aborted and the connection
  shuts its socket down as soon as it claims the handle (``connect()`` then fails at once).
* Abort racing the release to the pool: both take the connection's lock. If the abort
  wins, a connection with a shut socket goes back into the pool, and urllib3's
  ``is_connection_dropped`` check discards it before reuse; if the release wins, the
  abort is a no-op. A broken connection is never handed to another request as healthy.
* SOCKS proxies use their own connection classes and are not made abortable.
"""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from urllib3 import PoolManager
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
)
from urllib3.util.connection import allowed_gai_family
from urllib3.util.timeout import _DEFAULT_TIMEOUT

from ...cancel import CancelScope
from ._connect import connect, shutdown_quietly

if TYPE_CHECKING:
    from urllib3.connection import HTTPConnection

    _ConnectionBase = HTTPConnection
    _PoolBase = HTTPConnectionPool
else:
    _ConnectionBase = object
    _PoolBase = object

__all__ = [
    "AbortableConnectionMixin",
    "AbortablePoolMixin",
    "RequestAbort",
    "StaleConnectionError",
    "abort_on_cancel",
    "abortable_pool_class",
    "make_pool_manager_abortable",
]

logger = logging.getLogger(__name__)

_current: contextvars.ContextVar[RequestAbort | None] = contextvars.ContextVar(
    "agent_sync_request_abort", default=None
)


class StaleConnectionError(http.client.RemoteDisconnected):
    """A pooled keep-alive connection the server had closed: nothing came back.

    Raised (inside urllib3, which wraps it in ``ProtocolError``) only when the request
    provably never reached the server; :class:`AbortablePoolMixin` re-sends it.
    """


class RequestAbort:
    """Abort handle of one logical request. Thread-safe.

    :meth:`abort` may be called from any thread, any number of times, before, during or
    after the request; it shuts down the sockets of the connections this request owns at
    that moment, and any socket it claims afterwards.
    """

    __slots__ = ("_aborted", "_connections", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._connections: list[AbortableConnectionMixin] = []

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` has been called."""
        return self._aborted

    def abort(self) -> None:
        """Shut down the socket of every connection this request owns (idempotent)."""
        with self._lock:
            self._aborted = True
            connections = list(self._connections)
        logger.debug("connections=<%d> | aborting in-flight request", len(connections))
        for connection in connections:
            connection._abort_shutdown(self)

    @contextlib.contextmanager
    def capture(self) -> Iterator[RequestAbort]:
        """Let connections used inside this block claim the handle.

        Wrap the call that connects, sends and reads headers (``session.post(...,
        stream=True)``, ``client.converse_stream(...)``). Reading the body afterwards needs
        no capture. Do not ``yield`` from a generator inside it: the context variable would
        leak into the consumer while the generator is suspended.
        """
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def _attach(self, connection: AbortableConnectionMixin) -> None:
        with self._lock:
            if connection not in self._connections:
                self._connections.append(connection)
            aborted = self._aborted
        if aborted:  # the abort came before this socket existed: apply it now
            connection._abort_shutdown(self)


@contextlib.contextmanager
def abort_on_cancel(scope: CancelScope) -> Iterator[RequestAbort]:
    """Abort the request made in this block when ``scope`` is cancelled.

    Example::

        with abort_on_cancel(scope) as abort:
            with abort.capture():
                response = session.post(url, json=body, stream=True)
            for line in response.iter_lines():
                ...

    The session must use :class:`AbortableHTTPAdapter` (or a pool manager passed to
    :func:`make_pool_manager_abortable`). If the scope is already cancelled, the handle
    starts aborted and the request fails as soon as it opens or claims a socket.

    Args:
        scope: The invocation's cancel scope.

    Yields:
        The request's :class:`RequestAbort` handle (check ``aborted`` when mapping errors).
    """
    handle = RequestAbort()
    unregister = scope.register_abort(handle.abort)
    try:
        yield handle
    finally:
        unregister()


class AbortableConnectionMixin(_ConnectionBase):
    """Mixin for a urllib3 ``HTTPConnection`` subclass: lets a :class:`RequestAbort` shut it.

    Put it first in the bases, before the urllib3 (or botocore) connection class.
    """

    _abort_lock: threading.Lock
    _abort_owner: RequestAbort | None
    _abort_socket: socket.socket | None
    _abort_responses: int
    _abort_reused: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._abort_lock = threading.Lock()
        self._abort_owner = None
        self._abort_socket = None
        self._abort_responses = 0  # responses received on the current socket
        self._abort_reused = False  # the request in flight went out on a pooled socket
        super().__init__(*args, **kwargs)

    def _new_conn(self) -> socket.socket:
        # Same as urllib3's, except that the socket is registered before connect(), so a
        # connect stuck in SYN_SENT can be aborted too.
        timeout: Any = self.timeout  # typed float | None, but may be urllib3's sentinel
        if timeout is _DEFAULT_TIMEOUT:
            # urllib3 then leaves the socket as created: the global default timeout.
            timeout = socket.getdefaulttimeout()
        try:
            sock = connect(
                (self._dns_host, self.port),
                timeout,
                family=allowed_gai_family(),
                source_address=self.source_address,
                socket_options=self.socket_options or (),
                track=self._abort_track,
            )
        except socket.gaierror as e:
            raise NameResolutionError(self.host, cast(Any, self), e) from e
        except TimeoutError as e:
            raise ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from e
        except OSError as e:
            raise NewConnectionError(
                cast(Any, self), f"Failed to establish a new connection: {e}"
            ) from e
        sys.audit("http.client.connect", self, self.host, self.port)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        # A pooled connection is reused without _new_conn: claim it here, in the
        # requesting thread, before anything can block.
        self._abort_claim()
        self._abort_reused = self.sock is not None and self._abort_responses > 0
        super().request(*args, **kwargs)

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        if self._abort_reused and _closed_before_first_byte(self.sock) and not self._aborted():
            # The server closed (end-of-file or reset) this socket, which had already
            # served a response, before a byte of the new response: it died in the pool.
            raise StaleConnectionError("pooled connection closed by the server")
        try:
            response = super().getresponse(*args, **kwargs)
        except http.client.RemoteDisconnected as exc:
            # TLS sockets cannot peek: end-of-file before the status line is the same case.
            if self._abort_reused and not self._aborted():
                raise StaleConnectionError("pooled connection closed by the server") from exc
            raise
        self._abort_responses += 1
        return response

    def _aborted(self) -> bool:
        owner = self._abort_owner
        return owner is not None and owner.aborted

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._abort_track(None)

    # -- internals --

    def _abort_track(self, sock: socket.socket | None) -> RequestAbort | None:
        """Keep a duplicate of ``sock`` (``None``: forget it) and claim the current handle."""
        duplicate = sock.dup() if sock is not None else None
        self._abort_responses = 0  # a new (or no) socket has served nothing yet
        with self._abort_lock:
            previous, self._abort_socket = self._abort_socket, duplicate
            if sock is None:
                self._abort_owner = None
        if previous is not None:
            previous.close()
        if sock is None:
            return None
        return self._abort_claim()  # an aborted handle fails the connect before it starts

    def _abort_claim(self) -> RequestAbort | None:
        handle = _current.get()
        with self._abort_lock:
            self._abort_owner = handle
        if handle is not None:
            handle._attach(self)
        return handle

    def _abort_release(self) -> None:
        with self._abort_lock:
            self._abort_owner = None

    def _abort_shutdown(self, handle: RequestAbort) -> None:
        with self._abort_lock:
            if self._abort_owner is not handle or self._abort_socket is None:
                return  # released to the pool, or reused by another request: not ours
            shutdown_quietly(self._abort_socket)


class AbortablePoolMixin(_PoolBase):
    """Mixin for a urllib3 connection pool: releases a connection's claim when it is pooled,
    and re-sends at once a request whose pooled connection turned out stale (see the
    module docstring)."""

    def urlopen(self, method: str, url: str, body: Any = None, *args: Any, **kwargs: Any) -> Any:
        # Each stale failure discards one pooled connection, so this ends when the pool has
        # no idle connection left; the bound only guards against other threads refilling it.
        attempts = 1 + max(1, int(getattr(self.pool, "maxsize", None) or 1))
        for attempt in range(1, attempts + 1):
            try:
                return super().urlopen(method, url, body, *args, **kwargs)
            except (ProtocolError, MaxRetryError) as exc:
                handle = _current.get()
                if (
                    attempt == attempts
                    or not _is_stale(exc)
                    or not isinstance(body, bytes | bytearray | str | None)
                    or (handle is not None and handle.aborted)
                ):
                    raise
                logger.debug(
                    "host=<%s>, attempt=<%d> | pooled connection was closed by the server; "
                    "sending again on another connection",
                    self.host,
                    attempt,
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _put_conn(self, conn: Any) -> None:
        if isinstance(conn, AbortableConnectionMixin):
            conn._abort_release()
        super()._put_conn(conn)


def _closed_before_first_byte(sock: Any) -> bool:
    """Wait for the first response byte without consuming it; ``True`` if the server closed
    the connection (end-of-file or reset) before sending one.

    Only a plain TCP socket can peek (``MSG_PEEK``); for TLS this returns ``False`` and
    :meth:`AbortableConnectionMixin.getresponse` falls back to ``RemoteDisconnected``. A
    timeout or an abort propagates as it would from the status-line read.
    """
    if type(sock) is not socket.socket:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _is_stale(exc: BaseException) -> bool:
    """Whether urllib3's ``exc`` wraps a :class:`StaleConnectionError`."""
    seen: list[BaseException] = []
    pending: list[Any] = [exc]
    while pending:
        error = pending.pop()
        if not isinstance(error, BaseException) or any(error is e for e in seen):
            continue
        if isinstance(error, StaleConnectionError):
            return True
        seen.append(error)
        pending += [*error.args, getattr(error, "reason", None), error.__cause__]
    return False


_pool_classes: dict[type[Any], type[Any]] = {}
_pool_classes_lock = threading.Lock()


def abortable_pool_class(pool_cls: type[Any]) -> type[Any]:
    """Subclass of ``pool_cls`` (and of its ``ConnectionCls``) with the abort mixins.

    Works for urllib3's and botocore's pool classes. Cached: one subclass per class.

    Args:
        pool_cls: A urllib3 ``HTTPConnectionPool`` subclass.

    Returns:
        The abortable subclass (``pool_cls`` itself if it already is one).
    """
    if issubclass(pool_cls, AbortablePoolMixin):
        return pool_cls
    with _pool_classes_lock:
        cached = _pool_classes.get(pool_cls)
        if cached is None:
            connection_cls = pool_cls.ConnectionCls
            if not issubclass(connection_cls, AbortableConnectionMixin):
                connection_cls = type(
                    f"Abortable{connection_cls.__name__}",
                    (AbortableConnectionMixin, connection_cls),
                    {"__module__": __name__},
                )
            cached = type(
                f"Abortable{pool_cls.__name__}",
                (AbortablePoolMixin, pool_cls),
                {"ConnectionCls": connection_cls, "__module__": __name__},
            )
            _pool_classes[pool_cls] = cached
        return cached


def make_pool_manager_abortable(manager: PoolManager) -> PoolManager:
    """Make the pools ``manager`` creates from now on abortable (in place).

    Args:
        manager: A urllib3 ``PoolManager`` or ``ProxyManager`` (e.g. botocore's).

    Returns:
        ``manager``.
    """
    manager.pool_classes_by_scheme = {
        scheme: abortable_pool_class(cls) for scheme, cls in manager.pool_classes_by_scheme.items()
    }
    return manager
