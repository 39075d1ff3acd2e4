"""Small MCP servers of our own, for faults the real servers cannot show on demand.

Each is a real server speaking the real protocol (the ``mcp`` SDK's server API), run as

    python _own_server.py MODE

* ``grow``: ``add_tool(name)`` registers a tool called ``name`` and says the list changed
  (on a ``subscriptions/listen`` stream, and as ``notifications/tools/list_changed``);
* ``hang``: ``hang()`` never answers (until cancelled);
* ``crash``: ``crash()`` writes its ``API_KEY`` and a last words line to stderr, then exits 3;
* ``stubborn``: serves, and when its stdin ends keeps running (as server-everything does
  while a cancelled long operation runs): only the client's terminate ends it;
* ``slow``: serves ``SLOW_START`` seconds after it started, not sooner (a slow start);
* ``big``: ``big(size)`` answers a text of ``size`` bytes (a large result);
* ``odd``: tools whose names are not valid model tool names, each answering its own name:
  ``a.b`` next to ``a_b``, and two names of only non-ASCII letters (:data:`ODD_NAMES`).

Every mode also has ``ping() -> "pong"`` and ``fail(why)`` (an ``isError`` result). Servers
that never speak MCP (``mute``, ``deaf``) are in ``_silent_server.py``.
"""

from __future__ import annotations

import os
import sys
import threading
import time

STARTED = time.monotonic()  # before the SDK's import, which a slow start's wait overlaps

import anyio  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp_types import CallToolResult, TextContent  # noqa: E402

ODD_NAMES = ("a.b", "a_b", "天气", "名前", "x" * 70)


def main(mode: str) -> None:
    if mode == "slow":  # silent for SLOW_START seconds from the process's start
        time.sleep(max(0.0, STARTED + float(os.environ["SLOW_START"]) - time.monotonic()))
    server = MCPServer(f"own-{mode}")

    @server.tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    @server.tool()
    def fail(why: str) -> CallToolResult:
        """Fail with ``why`` (an isError result)."""
        return CallToolResult(content=[TextContent(type="text", text=why)], is_error=True)

    if mode == "grow":

        @server.tool()
        async def add_tool(name: str, ctx: Context) -> str:
            """Add a tool named ``name``."""

            def added() -> str:
                return f"I am {name}"

            server.add_tool(added, name=name, description=f"the tool {name}")
            await ctx.notify_tools_changed()  # protocol 2026-07-28: subscriptions/listen
            await ctx.session.send_tool_list_changed()  # before: a notification
            return f"added {name}"

    if mode == "big":

        @server.tool()
        def big(size: int) -> CallToolResult:
            """Answer ``size`` bytes of text."""
            return CallToolResult(content=[TextContent(type="text", text="x" * size)])

    if mode == "odd":
        for odd in ODD_NAMES:

            def named(name: str = odd) -> str:
                return f"I am {name}"

            server.add_tool(named, name=odd, description=f"the tool {odd}")

    if mode == "hang":

        @server.tool()
        async def hang() -> str:
            """Never answer."""
            await anyio.sleep_forever()
            return "never"

    if mode == "crash":

        @server.tool()
        def crash() -> str:
            """Exit at once."""
            sys.stderr.write(f"fatal: bad key {os.environ.get('API_KEY')}\nlast words\n")
            sys.stderr.flush()
            os._exit(3)

    server.run("stdio")
    if mode == "stubborn":
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
