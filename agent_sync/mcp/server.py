"""``MCPServer``: an MCP server's tools for a blocking agent, cancellable to the server."""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from types import TracebackType
from typing import Any, TypeAlias, Union

from mcp.shared.exceptions import MCPError as SDKError

from .._redact import install_log_filter, register_secret
from ..cancel import CancelScope
from ..errors import MCPError, UsageError
from ..messages import ToolUse
from ..tools.context import ToolContext
from ._connection import CallTimedOut, Connection, ConnectionLost
from ._endpoint import MAX_RESULT_BYTES, SHUTDOWN_TIMEOUT, Endpoint
from ._results import tool_result
from ._stdio import TOO_LARGE
from ._tool import MCPTool, tool_name

__all__ = ["MCPServer", "ServerApproval"]

logger = logging.getLogger(__name__)

_SDK_LOGGERS = (
    "client",
    "httpx2",
    "mcp.client.client",
    "mcp.client.stdio",
    "mcp.client.streamable_http",
    "mcp.shared.dispatcher",
    "mcp.shared.jsonrpc_dispatcher",
)

ServerApproval: TypeAlias = Union[
    bool, Collection[str], Callable[[ToolUse, ToolContext[Any]], bool]
]
"""``requires_approval=`` of a server: ``True`` gates every tool, a collection of names (the
server's names) gates those, a callable ``(tool_use, context) -> bool`` decides per call."""


class MCPServer:
    """An MCP server whose tools an :class:`~agent_sync.Agent` can call.

    Build one with :meth:`stdio` (a command the server runs as, talking over its stdin and
    stdout) or :meth:`http` (a streamable HTTP endpoint). Nothing starts until the first
    use (``with server:``, :meth:`connect`, :meth:`tools`, or the first run of an agent
    that has it); :meth:`close` ends the connection (a stdio child is stopped: stdin closed,
    then terminated, then killed), and a later use connects again.

    ``Agent(tools=[server])`` gives the agent every tool the server lists, as the server
    lists them at the start of each run: a ``notifications/tools/list_changed`` from the
    server is honoured from the next run on. ``server.tools(include=..., prefix=...)`` gives
    a fixed selection instead.

    Each connection is one private event-loop thread running the official ``mcp`` SDK;
    tool calls from any number of threads share it. In a run, a cancel (``agent.cancel()``
    from any thread, ``timeout=``, a ``CancelToken``, a store cancel from another process)
    cancels the call's task: the server receives ``notifications/cancelled`` for the
    request, the call is answered "Cancelled by user" at once, and the connection stays
    usable. A ``mode="after_turn"`` cancel lets the call finish.

    Faults never hang a run: a stdio child that exits, or an HTTP session that drops,
    answers the calls in flight with an error result naming the cause (for stdio, the end
    of its stderr) and the next use reconnects; ``call_timeout`` bounds each call and
    ``startup_timeout`` each connect. Values of ``env=`` entries and ``headers=`` whose
    names contain KEY, TOKEN, SECRET, PASSWORD or AUTHORIZATION are masked in errors,
    results and logs.

    Example (any MCP server; here the reference "everything" server from npm)::

        from agent_sync import Agent
        from agent_sync.mcp import MCPServer

        everything = MCPServer.stdio(["npx", "-y", "@modelcontextprotocol/server-everything"])
        with everything:
            agent = Agent(model, tools=[everything])
            agent.invoke("Echo 'hello'")
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        requires_approval: ServerApproval = False,
        call_timeout: float | None = 60.0,
        startup_timeout: float = 30.0,
    ) -> None:
        """Use :meth:`stdio` or :meth:`http`."""
        if call_timeout is not None and not call_timeout > 0:
            raise UsageError("call_timeout must be positive (seconds) or None")
        if not startup_timeout > 0:
            raise UsageError("startup_timeout must be positive (seconds)")
        if not (
            isinstance(requires_approval, bool)
            or callable(requires_approval)
            or (
                isinstance(requires_approval, Collection)
                and not isinstance(requires_approval, (str, bytes))
                and all(isinstance(n, str) for n in requires_approval)
            )
        ):
            raise UsageError(
                "requires_approval must be a bool, a collection of tool names, or a callable "
                "(tool_use, context) -> bool"
            )
        for secret in endpoint.secrets:  # for the SDK's and httpx's own log records
            register_secret(secret)
        install_log_filter(_SDK_LOGGERS)
        self._endpoint = endpoint
        self._approval = requires_approval
        self.call_timeout = call_timeout
        self.startup_timeout = startup_timeout
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._listed: tuple[object, tuple[MCPTool, ...]] | None = None
        _SERVERS.add(self)

    # -- construction --

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        requires_approval: ServerApproval = False,
        call_timeout: float | None = 60.0,
        startup_timeout: float = 30.0,
        max_result_bytes: int = MAX_RESULT_BYTES,
        shutdown_timeout: float = SHUTDOWN_TIMEOUT,
    ) -> MCPServer:
        """A server started as a child process, speaking MCP over its stdin and stdout.

        Args:
            command: The program and its arguments, e.g. ``["uvx", "mcp-server-time"]``.
            env: Environment of the child: these entries over a minimal safe set
                (``HOME``, ``PATH``, ``USER``...); not the whole of ``os.environ``.
            cwd: Its working directory.
            name: A name for logs, errors and the thread (default: the program's name).
            requires_approval: Which calls wait for a human decision (see
                :data:`ServerApproval`); nothing reaches the server before it.
            call_timeout: Seconds a call may take before it is cancelled (the server is
                told) and answered with an error; ``None``: no limit but cancel.
            startup_timeout: Seconds to start the child and list its tools.
            max_result_bytes: The largest message the server may send (16 MiB by
                default): a larger answer is dropped as it arrives, never held, and its
                call ends with an error result naming its size; the connection and the
                other calls on it go on.
            shutdown_timeout: Seconds the child has to exit once its stdin is closed (at
                ``close()``, or when its connection ends) before it gets SIGTERM, then
                SIGKILL; 2 s by default, as in the SDK. A server that keeps working after
                its stdin closes (a cancelled long call, say) holds ``close()`` this long.
        """
        if isinstance(command, (str, bytes)) or not isinstance(command, Sequence):
            raise UsageError(
                f"command must be a list such as ['npx', 'my-server'], got {type(command).__name__}"
            )
        if not command or not all(isinstance(part, str) and part for part in command):
            raise UsageError("command must be a non-empty list of non-empty strings")
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise UsageError("env must map str to str")
        if isinstance(max_result_bytes, bool) or not (
            isinstance(max_result_bytes, int) and max_result_bytes > 0
        ):
            raise UsageError(f"max_result_bytes must be a positive int, got {max_result_bytes!r}")
        if isinstance(shutdown_timeout, bool) or not (
            isinstance(shutdown_timeout, (int, float)) and 0 <= shutdown_timeout < float("inf")
        ):
            raise UsageError(
                f"shutdown_timeout must be finite, >= 0 (seconds), got {shutdown_timeout!r}"
            )
        endpoint = Endpoint(
            name=name or os.path.basename(command[0]),
            kind="stdio",
            command=tuple(command),
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
            max_result_bytes=max_result_bytes,
            shutdown_timeout=float(shutdown_timeout),
            secrets=Endpoint.secret_values(env),
        )
        return cls(
            endpoint,
            requires_approval=requires_approval,
            call_timeout=call_timeout,
            startup_timeout=startup_timeout,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        name: str | None = None,
        requires_approval: ServerApproval = False,
        call_timeout: float | None = 60.0,
        startup_timeout: float = 30.0,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url``.

        Args:
            url: The MCP endpoint, e.g. ``"https://tools.example.com/mcp"``.
            headers: Sent with every request (``{"Authorization": "Bearer ..."}``).
            name: A name for logs and errors (default: the URL's host).
            requires_approval: As for :meth:`stdio`.
            call_timeout: As for :meth:`stdio`.
            startup_timeout: Seconds to connect and list the tools.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UsageError(f"url must be an http:// or https:// URL, got {url!r}")
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise UsageError("headers must map str to str")
        host = url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
        endpoint = Endpoint(
            name=name or host,
            kind="http",
            url=url,
            headers=dict(headers) if headers is not None else None,
            secrets=Endpoint.secret_values(headers) + _userinfo(url),
        )
        return cls(
            endpoint,
            requires_approval=requires_approval,
            call_timeout=call_timeout,
            startup_timeout=startup_timeout,
        )

    # -- public API --

    @property
    def name(self) -> str:
        """The server's name in logs and errors."""
        return self._endpoint.name

    @property
    def connected(self) -> bool:
        """Whether a live connection exists (it may still drop at any moment)."""
        connection = self._connection
        return connection is not None and connection.alive and connection.pid == os.getpid()

    def connect(self) -> MCPServer:
        """Connect now (start the child, or reach the URL) and list the tools.

        Idempotent; a lost connection is replaced.

        Raises:
            MCPError: The server could not be started or reached within ``startup_timeout``.
        """
        self._live(None)
        return self

    def tools(self, include: Collection[str] | None = None, prefix: str = "") -> list[MCPTool]:
        """The server's tools (connecting first if needed), as agent tools.

        Args:
            include: Only these tools (the server's names); an unknown name is an error.
            prefix: Put before each name the model sees (``"ev_"``: ``ev_echo``), to keep
                apart tools of several servers.

        Raises:
            MCPError: Connecting failed.
            UsageError: ``include`` names a tool the server does not have.
        """
        if isinstance(include, str):
            raise UsageError(f"include takes a list of names: write include=[{include!r}]")
        specs = self._live(None).tools
        if include is not None:
            known = {spec.name for spec in specs}
            missing = sorted(set(include) - known)
            if missing:
                raise UsageError(
                    f"{self._endpoint.describe()} has no tool {', '.join(map(repr, missing))} "
                    f"(it has: {', '.join(sorted(known)) or 'none'})"
                )
            specs = tuple(spec for spec in specs if spec.name in include)
        return [self._tool(spec, prefix) for spec in specs]

    def agent_tools(self, cancel: CancelScope | None = None) -> tuple[MCPTool, ...]:
        """The tools an agent with this server in ``tools=`` gets for its next run.

        Connects if needed (the run asks, first thing, with its cancel scope: a cancel of
        the run, its ``timeout=`` or a calling run's cancel ends the connect at once, and
        the attempt is wound down in the background); a tool list the server changed
        (``tools/list_changed``) is re-read first. The same tuple is returned while the
        list has not changed. A server
        that was reached before but cannot be now gives its last tools (each call then
        answers with the reason); one never reached raises.

        Raises:
            MCPError: The server could not be started or reached, and never was.
            CancelledError: ``cancel`` was cancelled while connecting.
        """
        try:
            connection = self._live(cancel)
        except MCPError:
            listed = self._listed
            if listed is None:
                raise  # never connected: nothing to offer the run
            logger.warning(
                "server=<%s> | cannot reconnect; the run gets its last tools (their calls "
                "will say why they fail)",
                self.name,
            )
            return listed[1]
        connection.wait_relisted(self.call_timeout)
        specs = connection.tools
        listed = self._listed
        if listed is not None and listed[0] is specs:
            return listed[1]
        tools = tuple(self._tool(spec, "") for spec in specs)
        self._listed = (specs, tools)
        return tools

    def close(self) -> None:
        """End the connection (a stdio child is stopped and reaped). Idempotent; a later
        use connects again."""
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None and connection.pid == os.getpid():
            connection.close()

    def __enter__(self) -> MCPServer:
        return self.connect()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        where = " ".join(self._endpoint.command) if self._endpoint.kind == "stdio" else ""
        where = self._endpoint.redact(where or self._endpoint.url)
        return f"<MCPServer {self.name!r} {self._endpoint.kind} {where!r} ({state})>"

    # -- internals --

    def _tool(self, spec: Any, prefix: str) -> MCPTool:
        gate: Any = self._approval
        if not isinstance(gate, bool) and not callable(gate):
            gate = spec.name in gate
        return MCPTool(self, spec, name=tool_name(spec.name, prefix), requires_approval=gate)

    def _live(self, scope: CancelScope | None) -> Connection:
        """The live connection, made (or remade, if lost) now."""
        connection = self._connection
        if connection is not None and connection.alive and connection.pid == os.getpid():
            return connection
        with self._lock:
            connection = self._connection
            if connection is not None and connection.alive and connection.pid == os.getpid():
                return connection
            if connection is not None and connection.pid == os.getpid():
                logger.info("server=<%s> | reconnecting: %s", self.name, connection.lost_reason)
                connection.close()
            self._connection = None
            try:
                connection = Connection.open(
                    self._endpoint, _told(self), self.startup_timeout, scope
                )
            except ConnectionLost as exc:
                raise MCPError(f"{self._endpoint.describe()} could not be started: {exc}") from None
            self._connection = connection
            # a server dropped without close(): its connection still ends (not waited for)
            weakref.finalize(self, connection.stop_soon)
            return connection

    def _tools_changed(self) -> None:
        logger.info("server=<%s> | tool list changed; the next run uses the new list", self.name)

    def _call(
        self, mcp_name: str, arguments: dict[str, Any], context: ToolContext[Any] | None
    ) -> dict[str, Any]:
        """One ``tools/call``, blocking; the result as ``{"status", "content"}``."""
        scope = context._scope if context is not None else None
        connection = self._live(scope)
        sink = getattr(context, "report_progress", None) if context is not None else None
        try:
            result = connection.call(
                mcp_name, arguments, scope=scope, timeout=self.call_timeout, on_progress=sink
            )
        except (CallTimedOut, ConnectionLost, SDKError) as exc:
            raise self._failure(mcp_name, exc) from None
        return tool_result(result, self._endpoint.mask if self._endpoint.secrets else None)

    def _start(
        self,
        mcp_name: str,
        arguments: dict[str, Any],
        context: ToolContext[Any],
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        """:meth:`_call` without blocking, on the live connection: ``done(value, error)``
        gets what ``_call`` would return or raise, once (see :meth:`MCPTool.start_direct`)."""
        connection = self._connection
        if connection is None or connection.pid != os.getpid():  # closed since it was found live
            done(None, self._failure(mcp_name, ConnectionLost("the connection was closed")))
            return
        connection.start(
            mcp_name,
            arguments,
            scope=context._scope,
            timeout=self.call_timeout,
            on_progress=context.report_progress,
            done=functools.partial(self._answered, mcp_name, done),
        )

    def _answered(
        self,
        mcp_name: str,
        done: Callable[[Any, BaseException | None], None],
        result: Any,
        error: BaseException | None,
    ) -> None:
        """A started call's answer, as :meth:`_call` gives it, to ``done``."""
        if error is not None:
            if isinstance(error, (CallTimedOut, ConnectionLost, SDKError)):
                error = self._failure(mcp_name, error)
            done(None, error)
            return
        try:
            value = tool_result(result, self._endpoint.mask if self._endpoint.secrets else None)
        except Exception as exc:  # noqa: BLE001 - the call's failure, as _call raises it
            done(None, exc)
            return
        done(value, None)

    def _failure(self, mcp_name: str, exc: BaseException) -> MCPError:
        """The error a user sees for a call that failed with ``exc``."""
        what = f"{self._endpoint.describe()}, tool {mcp_name!r}"
        if isinstance(exc, CallTimedOut):
            return MCPError(f"{what}: {exc}; the call was cancelled")
        if isinstance(exc, ConnectionLost):
            return MCPError(f"{what}: the connection was lost: {exc} (the next use reconnects)")
        assert isinstance(exc, SDKError)
        message = self._endpoint.redact(exc.message)
        if exc.code == TOO_LARGE and self._endpoint.kind == "stdio":
            return MCPError(f"{what}: {message} (MCPServer.stdio(..., max_result_bytes=...))")
        return MCPError(f"{what}: the server refused the call: {message}")


def _told(server: MCPServer) -> Callable[[], None]:
    """The connection's list-changed listener, holding the server weakly (a connection
    must not keep its server alive: a dropped server's connection is ended by GC)."""
    ref = weakref.ref(server)

    def tools_changed() -> None:
        found = ref()
        if found is not None:
            found._tools_changed()

    return tools_changed


_SERVERS: weakref.WeakSet[MCPServer] = weakref.WeakSet()


def _forget_connections() -> None:
    """In a forked child: the parent's connections (their loop threads do not exist here)
    are forgotten, never used or closed, and each server connects anew at its next use."""
    for server in list(_SERVERS):
        server._lock = threading.Lock()
        server._connection = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_connections)


def _userinfo(url: str) -> tuple[str, ...]:
    """A password in the URL's authority (``https://user:pass@host``), to mask."""
    authority = url.split("://", 1)[1].split("/", 1)[0]
    if "@" not in authority:
        return ()
    password = authority.rpartition("@")[0].partition(":")[2]
    return (password,) if password else ()
