"""The demo assistant as an MCP server: one tool, ``assistant``, taking ``{"prompt": ...}``.

    python examples/mcp_serve/serve_agent.py              # stdio (for an MCP client to spawn)
    python examples/mcp_serve/serve_agent.py --http 8000  # streamable HTTP at /mcp, Ctrl-C stops

The assistant is the chat examples' (``examples/chat_demo``): offline by default, a real
provider if ``AGENT_SYNC_PROVIDER`` names one; it rolls dice, and deleting a file needs the
client's approval (asked by MCP elicitation). Each call gets its own agent (a factory).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: chat_demo

from chat_demo import SYSTEM_PROMPT, TOOLS, delete_file, model_from_env  # noqa: E402

from agent_sync import Agent  # noqa: E402
from agent_sync.mcp import serve  # noqa: E402


def make_agent() -> Agent:
    """A fresh assistant for one call."""
    return Agent(model_from_env(), system_prompt=SYSTEM_PROMPT, tools=[*TOOLS, delete_file])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve over HTTP on PORT")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # stdout is the protocol's
    description = "A friendly assistant: it rolls dice, and can delete a file (with approval)."
    if args.http is None:
        serve(make_agent, name="assistant", description=description)
    else:
        serve(
            make_agent, name="assistant", description=description, transport="http", port=args.http
        )


if __name__ == "__main__":
    main()
