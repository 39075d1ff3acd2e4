"""MCP tools: any Model Context Protocol server's tools in a blocking agent.

Needs the ``mcp`` extra (``pip install 'agent_sync[mcp]'``: the official ``mcp`` SDK).

    from agent_sync import Agent
    from agent_sync.mcp import MCPServer

    time_server = MCPServer.stdio(["uvx", "mcp-server-time"])
    agent = Agent(model, tools=[time_server])      # every tool the server lists
    agent = Agent(model, tools=[*time_server.tools(include=["get_current_time"], prefix="t_")])

See :class:`MCPServer` for connections, cancel, faults and approvals.

:func:`serve` does the reverse: it serves an agent as an MCP server (one tool taking a
``prompt``), over stdio or streamable HTTP.
"""

from __future__ import annotations

from .._extras import missing_extra

try:
    import mcp as _mcp  # noqa: F401 - the extra's check
except ImportError as _exc:
    raise missing_extra("mcp", "mcp") from _exc

from ._serve import serve
from ._tool import MCPTool
from .server import MCPServer, ServerApproval

__all__ = ["MCPServer", "MCPTool", "ServerApproval", "serve"]
