"""MCP: one large result on a stdio connection, and the calls that share it.

    python bench/bench_mcp_large.py [--sizes 8,32] [--rounds 2]

Against the project's own server (``tests/mcp/_own_server.py big``: ``big(size)`` answers
``size`` bytes of text, ``ping()`` answers at once), on one connection: a thread calls
``big`` while this one calls ``ping`` back to back until ``big`` is answered. Printed per
size: how long ``big`` took (and whether it came back, or as the error result past
``max_result_bytes``), and the pings' latency while it arrived (p50 and max): the stall the
large result put on the other calls of its connection.

Run it with ``PYTHONPATH`` on the code to measure (it imports ``agent_sync`` from there), e.g.
a pristine copy of a baseline (``git archive <commit> agent_sync | tar -x -C /tmp/base``) and
the working tree, in turn, in one sitting.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent_sync.errors import MCPError
from agent_sync.mcp import MCPServer

OWN_SERVER = str(Path(__file__).resolve().parent.parent / "tests" / "mcp" / "_own_server.py")
MB = 1024 * 1024


def one(server: MCPServer, size: int) -> str:
    tools = {tool.name: tool for tool in server.tools(include=["big", "ping"])}
    big, ping = tools["big"], tools["ping"]
    ping()  # warm
    outcome: dict[str, Any] = {}

    def call_big() -> None:
        started = time.perf_counter()
        try:
            outcome["result"] = big(size=size)
        except MCPError as exc:  # past max_result_bytes, or timed out
            outcome["result"] = {"status": "error", "content": [{"text": str(exc)}]}
        outcome["took"] = time.perf_counter() - started

    thread = threading.Thread(target=call_big, daemon=True)
    thread.start()
    latencies: list[float] = []
    while thread.is_alive():
        started = time.perf_counter()
        ping()
        latencies.append(time.perf_counter() - started)
    thread.join(600)
    result = outcome["result"]
    how = "ok" if result["status"] == "success" else "error result"
    return (
        f"{size // MB:>4} MB: big {outcome['took']:7.2f} s ({how:12}) | "
        f"{len(latencies):5} pings meanwhile: p50 {statistics.median(latencies) * 1000:8.1f} ms, "
        f"max {max(latencies) * 1000:8.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8,32", help="MB, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import agent_sync

    print(f"agent_sync from {Path(agent_sync.__file__).parent}")
    server = MCPServer.stdio(
        [sys.executable, OWN_SERVER, "big"], name="big", call_timeout=600, startup_timeout=600
    )
    with server:
        for _ in range(args.rounds):
            for size in args.sizes.split(","):
                print(one(server, int(size) * MB), flush=True)


if __name__ == "__main__":
    main()
