"""``serve()``: an agent as an MCP server, one tool taking ``{"prompt": string}``.

Built on the official SDK's low-level ``Server``: :class:`AgentTool` answers ``tools/list``
(one tool) and ``tools/call`` (a run; see :mod:`._serve_run` for the thread bridge and
:mod:`._serve_approvals` for approvals). The transports are the SDK's: stdio, and
streamable HTTP served by uvicorn.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types.version import is_version_at_least
from pydantic import TypeAdapter

from .._decisions import Deny
from .._version import __version__
from ..agent import Agent, AgentStream
from ..cancel import CancelToken
from ..errors import AgentSyncError, UsageError
from ..result import AgentResult
from ._serve_approvals import (
    NO_ELICITATION,
    PAUSE_TTL,
    Decision,
    Paused,
    PausedRuns,
    ask_now,
    can_elicit,
    decisions_from,
    input_required,
)
from ._serve_run import ProgressPump, run_stretch

__all__ = ["MAX_PROMPT_CHARS", "AgentTool", "serve"]

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 1_000_000
"""The longest ``prompt`` a served agent accepts; a longer one is an ``isError`` result."""

BUSY = "the agent waits for a client's approvals in another call; call again later"
_INPUT_REQUIRED_VERSION = "2026-07-28"
_FINE_STOPS = frozenset({"end_turn", "max_tokens", "stop_sequence"})
_GRACE = 5  # seconds uvicorn waits for calls in flight at shutdown, then cancels them

AgentSource = Agent | Callable[[], Agent]


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class AgentTool:
    """The one tool of a served agent: its listing and its calls (see :func:`serve`)."""

    def __init__(self, source: AgentSource, name: str, description: str | None) -> None:
        if not isinstance(source, Agent) and not callable(source):
            raise UsageError(
                f"serve() takes an Agent or a callable returning one, not {type(source).__name__}"
            )
        if not isinstance(name, str) or not name:
            raise UsageError("serve(name=) must be a non-empty string")
        self._source = source
        self._single = source if isinstance(source, Agent) else None
        self._busy = False  # the single agent is taken (running, or paused for approvals)
        self._awaiting = False  # ... and paused for a client's approvals, between rounds
        self._freed = anyio.Event()  # set when the single agent is given back
        self._paused = PausedRuns()
        self.tool = types.Tool(
            name=name,
            description=description or f"Ask the agent {name}: it answers the prompt.",
            input_schema={
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "What to ask the agent."}
                },
                "required": ["prompt"],
            },
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[self.tool])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One ``tools/call``: a run, or the next round of a run paused for approvals."""
        self._release(self._paused.sweep())
        if params.name != self.tool.name:
            return _error(f"unknown tool {params.name!r}: this server has {self.tool.name!r}")
        if params.request_state is not None:
            return await self._next_round(ctx, params)
        prompt = (params.arguments or {}).get("prompt")
        if not isinstance(prompt, str):
            return _error('the argument "prompt" must be a string')
        if len(prompt) > MAX_PROMPT_CHARS:
            return _error(f'the argument "prompt" is longer than {MAX_PROMPT_CHARS} characters')
        if self._single is not None and not await self._wait_for_single():
            return _error(BUSY)
        try:
            agent, owned = self._take()
        except Exception as exc:  # noqa: BLE001 - a factory's fault, answered to the client
            logger.warning("the agent factory failed: %s", type(exc).__name__, exc_info=True)
            return _error(f"the agent factory failed ({type(exc).__name__})")
        return await self._drive(
            ctx, agent, owned, lambda token: agent.stream(prompt, cancel=token)
        )

    async def _wait_for_single(self) -> bool:
        """Wait while the single agent runs another call (a cancelled one ends within ms);
        ``False`` if it waits for a client's approvals instead (that may take minutes)."""
        while self._busy:
            if self._awaiting:
                return False
            logger.debug("a call waits for the agent, busy with another")
            await self._freed.wait()
        return True

    def _take(self) -> tuple[Agent, bool]:
        if self._single is not None:
            self._busy = True
            self._freed = anyio.Event()
            return self._single, True
        assert callable(self._source)
        agent = self._source()
        if not isinstance(agent, Agent):
            raise UsageError(f"the agent factory returned {type(agent).__name__}, not an Agent")
        return agent, False

    def _release(self, dropped: list[Paused]) -> None:
        if any(paused.owned for paused in dropped):
            self._give_back()

    def _give_back(self) -> None:
        self._busy = self._awaiting = False
        self._freed.set()

    async def _next_round(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        assert params.request_state is not None
        paused = self._paused.take(params.request_state)
        if paused is None:
            return _error("unknown or expired request_state: call the tool again")
        if paused.owned:
            self._awaiting = False  # running again: later calls wait for it
        decisions = decisions_from(paused.approvals, params.input_responses)
        agent = paused.agent
        return await self._drive(
            ctx, agent, paused.owned, lambda token: agent.resume_stream(decisions, cancel=token)
        )

    async def _drive(
        self,
        ctx: ServerRequestContext[Any, Any],
        agent: Agent,
        owned: bool,
        start: Callable[[CancelToken], AgentStream],
    ) -> types.CallToolResult | types.InputRequiredResult:
        keep = False
        try:
            while True:
                token = CancelToken()
                try:
                    result = await run_stretch(start, token, self._progress(ctx))
                except AgentSyncError as exc:  # messages are redacted already
                    return _error(f"{type(exc).__name__}: {exc}")
                except Exception as exc:  # noqa: BLE001 - a tool's or model's bug
                    logger.warning("the served run failed: %s", type(exc).__name__, exc_info=True)
                    return _error(f"the run failed ({type(exc).__name__})")
                if result.stop_reason != "paused":
                    return _answer(result)
                if not can_elicit(ctx):
                    start = _resuming(agent, {r.id: Deny(NO_ELICITATION) for r in result.approvals})
                    continue
                if not is_version_at_least(ctx.protocol_version, _INPUT_REQUIRED_VERSION):
                    start = _resuming(agent, await self._ask(ctx, agent, result))
                    continue
                paused = Paused(
                    agent=agent,
                    approvals=result.approvals,
                    owned=owned,
                    expires=time.monotonic() + PAUSE_TTL,
                )
                key = self._paused.put(paused)
                if key is None:
                    start = _resuming(agent, decisions_from(result.approvals, None))
                    continue
                keep = True
                self._awaiting = owned
                return input_required(result.approvals, key)
        finally:
            if owned and not keep:
                self._give_back()

    async def _ask(
        self, ctx: ServerRequestContext[Any, Any], agent: Agent, result: AgentResult
    ) -> dict[str, Decision]:
        try:
            return await ask_now(ctx, result.approvals)
        except BaseException:
            agent.cancel("the MCP client cancelled the call")  # the paused run: agent ready
            raise

    def _progress(self, ctx: ServerRequestContext[Any, Any]) -> ProgressPump | None:
        if ctx.meta is None or ctx.meta.get("progress_token") is None:
            return None

        async def report(progress: float, message: str) -> None:
            await ctx.session.report_progress(progress, None, message)

        return ProgressPump(report)

    def close(self) -> None:
        """Cancel the runs still paused for a client's answers."""
        self._release(self._paused.clear())


def _resuming(agent: Agent, decisions: dict[str, Decision]) -> Callable[[CancelToken], AgentStream]:
    return lambda token: agent.resume_stream(decisions, cancel=token)


def _answer(result: AgentResult) -> types.CallToolResult:
    if result.stop_reason == "cancelled":
        return _error(f"the run was cancelled ({result.cancel_reason or 'no reason given'})")
    if result.stop_reason not in _FINE_STOPS:
        detail = f": {result.usage_limit}" if result.usage_limit else ""
        if result.guardrail is not None:  # its name and reason, never the tripped text
            detail = f": {result.guardrail.name}: {result.guardrail.reason}"
        return _error(f"the run stopped before answering ({result.stop_reason}{detail})")
    structured: dict[str, Any] | None = None
    if not isinstance(result.output, str):
        dumped = TypeAdapter(Any).dump_python(result.output, mode="json")
        structured = dumped if isinstance(dumped, dict) else {"result": dumped}
    text = result.text or (json.dumps(structured) if structured is not None else "")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def serve(
    agent_or_factory: AgentSource,
    *,
    name: str = "agent",
    description: str | None = None,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
) -> None:
    """Serve an agent as an MCP server whose one tool, ``name``, takes ``{"prompt": string}``.

    Each ``tools/call`` is a run. Given a factory (a callable with no argument returning an
    :class:`~agent_sync.Agent`), each call gets its own agent, and calls run in parallel
    (in anyio's worker threads, 40 at most by default). Given an agent, calls share it (one
    conversation) one at a time: a call that comes while it runs waits for it (a cancelled
    run ends within milliseconds); one that comes while it waits for a client's approvals
    (an input-required round, below) is answered at once with an ``isError`` result.

    * ``notifications/cancelled`` for a call cancels its run within milliseconds.
    * With a ``progressToken``, progress notifications carry the text streamed since the
      previous one (``progress``: the characters streamed so far).
    * A gated tool's approval is asked of the client: up to protocol 2025-11-25 by
      ``elicitation/create`` during the call, from 2026-07-28 on by an input-required round
      (the call answers ``InputRequiredResult``; the client's SDK asks and retries). Accept
      approves; decline or cancel denies. A client without elicitation support gets a
      denial (:data:`~agent_sync.mcp._serve_approvals.NO_ELICITATION`), which the model sees.
    * A missing, non-string or oversize ``prompt``, a run's error or a stopped run are
      ``isError`` results with a short message; the server goes on serving.
    * The result is the run's final text, and ``structuredContent`` with an ``output_type``.

    Blocks until the transport ends, then returns: stdin closed (stdio), or Ctrl-C
    (KeyboardInterrupt, SIGINT; over HTTP the calls in flight get 5 s, then are cancelled).
    Over HTTP, SIGTERM stops the server the same way, then ends the process as SIGTERM
    does (uvicorn raises it again once it has stopped). Runs still paused for a client's
    approvals are cancelled on the way out.

    Args:
        agent_or_factory: The agent, or a factory of agents.
        name: The tool's name.
        description: The tool's description (a generic one by default).
        transport: ``"stdio"`` or ``"http"`` (streamable HTTP).
        host, port, path: Where the HTTP transport listens.

    Raises:
        UsageError: A bad argument.
    """
    if transport not in ("stdio", "http"):
        raise UsageError(f'serve(transport=) must be "stdio" or "http", not {transport!r}')
    tool = AgentTool(agent_or_factory, name, description)
    server: Server[Any] = Server(
        name,
        version=__version__,
        description=description,
        on_list_tools=tool.list_tools,
        on_call_tool=tool.call_tool,
    )
    try:
        if transport == "stdio":
            anyio.run(_stdio, server)
        else:
            _http(server, host, port, path)
    except KeyboardInterrupt:  # Ctrl-C: the calls in flight were cancelled on the way out
        logger.info("the MCP server %s was interrupted", name)
    finally:
        tool.close()


async def _stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _http(server: Server[Any], host: str, port: int, path: str) -> None:
    import socket

    import uvicorn

    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=_GRACE
    )
    # bound here, so the address (port 0: a free one) is known and logged before serving;
    # connections made from now on wait in the backlog until uvicorn accepts them
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
        bound = listener.getsockname()[1]
        logger.info("serving the agent %s at http://%s:%d%s", server.name, host, bound, path)
        uvicorn.Server(config).run(sockets=[listener])  # raises the SIGINT it deferred
    finally:
        listener.close()
