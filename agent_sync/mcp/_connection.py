"""One connection to an MCP server: the official SDK's client on a private event-loop thread.

The ``mcp`` SDK is async only. A connection runs its own event loop in a daemon thread
(``agent_sync-mcp-<name>``) and the SDK's ``Client`` lives in one task on it
(:meth:`Connection._serve`): entered at connect, left at close, in the same task, as the
SDK's structured concurrency requires. A tool call from any thread is one more task on that
loop (:mod:`agent_sync.mcp._call`): :meth:`Connection.start` hands it over and returns, its
answer comes to a callback (the run's tool batch takes it so, with no thread of its own);
:meth:`Connection.call` blocks until then. A cancel of the run answers the call at once and
cancels the task: the SDK then writes ``notifications/cancelled`` for the request
(shielded, so it goes out even though its task is being cancelled) while the caller has
already moved on. The loop is never blocked, so other calls on the connection go on.

A connection is *lost* when the transport closes under it (the stdio child exited: its
stderr reached EOF; a call failed with the SDK's ``CONNECTION_CLOSED``); a lost connection
is replaced at the next use by its :class:`~agent_sync.mcp.MCPServer`.

The stdio child's stderr goes to a pipe read on the loop (no extra thread): the last few
KiB are kept for error messages and each chunk is logged at DEBUG, redacted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError as SDKError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._version import __version__
from ..cancel import CancelledError, CancelScope
from ._call import Call, CallTimedOut, ConnectionLost, Done, ProgressSink, wait
from ._endpoint import Endpoint, StderrTail
from ._stdio import stdio_transport

__all__ = ["CallTimedOut", "Connection", "ConnectionLost"]

logger = logging.getLogger(__name__)

_LIST_PAGES = 100  # a tools/list that pages forever stops here
_CLIENT_INFO = types.Implementation(name="agent_sync", version=__version__)


class Connection:
    """A live connection (see the module docstring). Build with :meth:`open`."""

    def __init__(self, endpoint: Endpoint, on_tools: Callable[[], None]) -> None:
        self.endpoint = endpoint
        self.pid = os.getpid()  # a fork's child never uses its parent's connection
        self._on_tools = on_tools
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_loop, name=f"agent_sync-mcp-{endpoint.name}", daemon=True
        )
        self._client: Client | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._serving: concurrent.futures.Future[None] | None = None
        self._closing: asyncio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._stop_requested = False
        self._finishing = False  # the loop thread's final clean-up has begun
        self._lost: str | None = None
        self._last_error: str | None = None  # the transport's last error, for messages
        self._stderr = (
            StderrTail(endpoint, self._child_exited) if endpoint.kind == "stdio" else None
        )
        self._tools: tuple[types.Tool, ...] = ()
        self._relisting: asyncio.Task[None] | None = None
        self._relist_again = False
        self._relisted: concurrent.futures.Future[None] | None = None
        self._calls: set[Call] = set()  # started, not answered yet (see _run_loop)

    # -- life cycle --

    @classmethod
    def open(
        cls,
        endpoint: Endpoint,
        on_tools: Callable[[], None],
        timeout: float,
        scope: CancelScope | None = None,
    ) -> Connection:
        """Start the loop, connect and list the tools, within ``timeout`` seconds.

        A cancel of ``scope`` (or a Ctrl-C) returns at once: the attempt is wound down on
        the loop (a stdio child stopped as :meth:`close` does, then the thread ends) without
        the caller waiting for it. Only an :class:`Exception` becomes
        :class:`ConnectionLost`: a ``KeyboardInterrupt`` or ``SystemExit`` is raised as is.

        Raises:
            ConnectionLost: The server could not be started or reached, or timed out.
            CancelledError: ``scope`` was cancelled while connecting (the connect is undone).
        """
        if scope is not None:
            scope.raise_if_cancelled()
        connection = cls(endpoint, on_tools)
        ready = connection._ready
        unregister: Callable[[], None] = _noop
        try:
            connection._thread.start()
            connection._serving = asyncio.run_coroutine_threadsafe(
                connection._serve(), connection._loop
            )
            if scope is not None:
                unregister = scope.register_abort(functools.partial(_cancel, ready))
            ready.result(timeout)
        except concurrent.futures.CancelledError:
            connection._give_up()  # not waited for: a cancel returns in milliseconds
            assert scope is not None
            raise CancelledError(scope.reason or "cancelled") from None
        except concurrent.futures.TimeoutError:
            connection.close()
            raise ConnectionLost(
                connection._with_stderr(f"it did not answer within {timeout:g} s (startup_timeout)")
            ) from None
        except Exception as exc:
            connection.close()
            if isinstance(exc, ConnectionLost):
                raise
            raise ConnectionLost(connection._with_stderr(_cause(exc))) from None
        except BaseException:  # Ctrl-C, SystemExit: never wrapped, and not waited on
            connection._give_up()
            raise
        finally:
            unregister()
        return connection

    @property
    def alive(self) -> bool:
        """Connected and not lost (a lost or closed connection is replaced at next use)."""
        serving = self._serving
        return self._lost is None and serving is not None and not serving.done()

    @property
    def lost_reason(self) -> str:
        return self._with_stderr(self._lost or "the connection was closed")

    @property
    def tools(self) -> tuple[types.Tool, ...]:
        """The server's tools as last listed."""
        return self._tools

    def wait_relisted(self, timeout: float | None) -> None:
        """Wait (bounded) for a re-listing that a ``tools/list_changed`` started."""
        pending = self._relisted
        if pending is not None:
            with contextlib.suppress(Exception):
                pending.result(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Leave the client (a stdio child is stopped: stdin closed, then terminated, then
        killed, by the SDK), stop the loop and join its thread. Idempotent."""
        if not self._thread.is_alive():
            return
        serving = self._serving
        if serving is not None and not serving.done():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop_serving)
            try:
                serving.result(timeout)
            except BaseException:  # noqa: BLE001 - closing: its outcome is not ours to raise
                logger.debug("server=<%s> | closed with an error", self.endpoint.name)
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._stop_loop)
        self._thread.join(timeout)

    def stop_soon(self) -> None:
        """Ask the connection to close, without waiting (for a server object collected
        without ``close()``): the SDK's shutdown runs on the loop, then the loop ends."""
        if self.pid == os.getpid() and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop_serving)

    def _give_up(self) -> None:
        """End a connect attempt without waiting for it: the SDK's shutdown runs on the
        loop (a stdio child is stopped), then the loop and its thread end."""
        step = self._stop_serving if self._serving is not None else self._stop_loop
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self._loop.call_soon_threadsafe(step)

    def _stop_serving(self) -> None:
        """On the loop: end :meth:`_serve` (the client is left in its own task)."""
        self._stop_requested = True  # for a _serve that has not started its scope yet
        if self._ready.done() and not self._ready.cancelled() and self._closing is not None:
            self._closing.set()
        elif self._scope is not None:  # still connecting: cancel the connect
            self._scope.cancel()

    def _stop_loop(self) -> None:
        """On the loop: end ``run_forever`` (once; a stop during the final clean-up would
        break it)."""
        if not self._finishing:
            self._loop.stop()

    def _run_loop(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            self._finishing = True
            try:
                left = [task for task in asyncio.all_tasks(loop) if not task.done()]
                for task in left:
                    task.cancel()
                if left:
                    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                if self._stderr is not None:
                    self._stderr.stop()
                loop.close()
                # Calls whose begin() never ran (queued as the loop stopped): answered now.
                # A call started after this finds the loop closed and answers itself.
                for call in list(self._calls):
                    call.answer(None, ConnectionLost(self.lost_reason))

    async def _serve(self) -> None:
        """The client's one task: connect, list, then wait for close.

        Stopping it is a cancel of its anyio scope (:meth:`_stop_serving`), never a native
        ``task.cancel()``: the SDK shields the stdio child's shutdown from anyio cancels
        only, and a native cancel would leave the child running.
        """
        self._closing = asyncio.Event()
        self._scope = anyio.CancelScope()
        if self._stderr is not None:
            self._stderr.start(asyncio.get_running_loop())
        try:
            with self._scope:
                if not self._stop_requested:
                    await self._connected_until_closed()
            if not self._ready.done():  # cancelled while connecting
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    self._ready.set_exception(ConnectionLost("the connect was given up"))
        except Exception as exc:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self._ready.set_exception(ConnectionLost(self._with_stderr(_cause(exc))))
            self._mark_lost(f"the session ended: {self._last_error or _cause(exc)}")
        finally:
            self._client = None
            if self._lost is None:
                self._lost = "the connection was closed"
            # nothing left to serve: the loop ends, and its thread (calls still in flight
            # are cancelled by _run_loop and answered "connection lost")
            asyncio.get_running_loop().call_soon(self._stop_loop)

    async def _connected_until_closed(self) -> None:
        assert self._closing is not None
        async with AsyncExitStack() as stack:
            client = Client(
                await self._transport(stack),
                message_handler=self._on_message,
                cache=None,
                client_info=_CLIENT_INFO,
            )
            try:
                await stack.enter_async_context(client)
            finally:
                if self._stderr is not None:
                    self._stderr.close_writer()
            self._client = client
            listener = await self._start_listening(client)
            try:
                self._tools = await self._list_tools(client)
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    self._ready.set_result(None)  # unless a cancel gave up on the connect
                if not self._ready.cancelled() and not self._stop_requested:
                    await self._closing.wait()
            finally:
                if listener is not None:
                    listener.cancel()
                    await asyncio.gather(listener, return_exceptions=True)

    async def _transport(self, stack: AsyncExitStack) -> Any:
        endpoint = self.endpoint
        if endpoint.kind == "stdio":
            assert self._stderr is not None
            command, *args = endpoint.command
            parameters = StdioServerParameters(
                command=command, args=args, env=endpoint.env, cwd=endpoint.cwd
            )
            # ours, not the SDK's stdio_client: linear in a long message, and bounded
            return stdio_transport(
                parameters,
                self._stderr.writer,
                endpoint.max_result_bytes,
                grace=endpoint.shutdown_timeout,
            )
        http = await stack.enter_async_context(create_mcp_http_client(headers=endpoint.headers))
        return streamable_http_client(endpoint.url, http_client=http)

    # -- calls --

    def start(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        scope: CancelScope | None,
        timeout: float | None,
        on_progress: ProgressSink | None,
        done: Done,
    ) -> Call:
        """Start a call without blocking; ``done(result, error)`` gets its answer once.

        From any thread; one ``call_soon_threadsafe``, nothing waited for. The answer comes
        from the loop thread, or at once from the cancelling thread when ``scope`` is
        cancelled (the call's task is then cancelled and the server sent
        ``notifications/cancelled``). ``error`` is one of :meth:`call`'s exceptions.
        """
        call = Call(self, done)
        client = self._client
        if client is None or not self.alive:
            call.answer(None, ConnectionLost(self.lost_reason))
            return call
        self._calls.add(call)
        call.attach(scope)  # first: a cancel from here on reaches the task
        progress = None if on_progress is None else _progress_callback(on_progress)
        try:
            self._loop.call_soon_threadsafe(call.begin, client, name, arguments, progress, timeout)
        except RuntimeError:  # the loop is closed: closed under us
            call.answer(None, ConnectionLost(self.lost_reason))
        return call

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        scope: CancelScope | None,
        timeout: float | None,
        on_progress: ProgressSink | None,
    ) -> types.CallToolResult:
        """Call a tool, blocking this thread; a cancel of ``scope`` cancels the call's task.

        Raises:
            CancelledError: ``scope`` was cancelled (the server is sent
                ``notifications/cancelled``).
            CallTimedOut: No answer within ``timeout`` (cancelled the same way).
            ConnectionLost: The transport closed.
            mcp.shared.exceptions.MCPError: The server answered with a JSON-RPC error.
        """
        return wait(
            functools.partial(
                self.start,
                name,
                arguments,
                scope=scope,
                timeout=timeout,
                on_progress=on_progress,
            )
        )

    def _closed_during_call(self) -> None:
        """A call failed with the SDK's ``CONNECTION_CLOSED``: the connection is lost."""
        detail = f": {self._last_error}" if self._last_error else ""
        self._mark_lost(f"the connection closed during the call{detail}")

    # -- the tool list --

    async def _list_tools(self, client: Client) -> tuple[types.Tool, ...]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tuple(tools)

    async def _start_listening(self, client: Client) -> asyncio.Task[None] | None:
        """From protocol 2026-07-28 on, list changes come on a ``subscriptions/listen``
        stream (before, as notifications: :meth:`_on_message`): open it, acknowledged,
        before the first listing so that no change is missed."""
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return None
        acked = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._listen(client, acked))
        await acked.wait()
        return task

    async def _listen(self, client: Client, acked: asyncio.Event) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                acked.set()
                async for _event in subscription:
                    self._start_relist()
        except Exception as exc:  # noqa: BLE001 - no list changes then; calls still work
            logger.debug(
                "server=<%s> | no tools/list_changed stream: %s", self.endpoint.name, _cause(exc)
            )
        finally:
            acked.set()

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler (on the loop): list changes and transport errors."""
        if isinstance(message, types.ToolListChangedNotification):
            self._start_relist()
        elif isinstance(message, Exception):
            self._last_error = self.endpoint.redact(_cause(message))
            logger.debug("server=<%s> | transport error: %s", self.endpoint.name, self._last_error)

    def _start_relist(self) -> None:
        if self._relisting is not None and not self._relisting.done():
            self._relist_again = True
            return
        if self._relisted is None or self._relisted.done():
            self._relisted = concurrent.futures.Future()
        self._relisting = asyncio.get_running_loop().create_task(self._relist())

    async def _relist(self) -> None:
        done = self._relisted
        try:
            while True:
                self._relist_again = False
                client = self._client
                if client is None:
                    return
                try:
                    self._tools = await self._list_tools(client)
                except Exception as exc:  # noqa: BLE001 - kept the old list; logged
                    logger.warning(
                        "server=<%s> | re-listing tools failed: %s",
                        self.endpoint.name,
                        self.endpoint.redact(_cause(exc)),
                    )
                    return
                if not self._relist_again:
                    break
            try:
                self._on_tools()
            except Exception:  # noqa: BLE001 - a listener must not break the connection
                logger.warning("tools listener failed", exc_info=True)
        finally:
            if done is not None and not done.done():
                done.set_result(None)

    # -- faults --

    def _child_exited(self) -> None:
        self._mark_lost("the server process exited (its stderr closed)")

    def _mark_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            logger.info("server=<%s> | connection lost: %s", self.endpoint.name, reason)

    def _with_stderr(self, reason: str) -> str:
        text = self.endpoint.redact(reason)
        tail = self._stderr.text() if self._stderr is not None else ""
        return f"{text}. Its stderr ended with:\n{tail}\n" if tail else text


def _progress_callback(sink: ProgressSink) -> Any:
    async def progress(progress: float, total: float | None, message: str | None) -> None:
        sink(progress, total, message)

    return progress


def _cause(exc: BaseException) -> str:
    """The innermost meaningful message of ``exc`` (task groups wrap the real error)."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    if isinstance(exc, asyncio.CancelledError):
        return "the connection was cancelled"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, SDKError) else text


def _cancel(future: concurrent.futures.Future[Any]) -> None:
    """The abort callback (in the cancelling thread): cancel the future, and so its task."""
    future.cancel()


def _noop() -> None:
    return None
