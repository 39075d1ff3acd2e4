"""An agent served over MCP (``agent_sync.mcp.serve``): what a call adds to a run, and how
fast a client's cancel stops the run.

    python bench/bench_mcp_serve.py [--calls 200] [--cancels 50]

The server is ``tests/mcp/_served_agent.py stdio-factory`` (a factory: each call a fresh
agent on a scripted model), driven by the official SDK's ``Client`` over stdio:

* **overhead**: ``client.call_tool(prompt="hello")`` against ``make_agent().invoke("hello")``
  (the same factory) in this process, in rounds (one of each, in turn, so the load of a shared
  machine falls on both alike); the difference of the medians is what serving adds (the
  JSON-RPC round trip over two pipes, the worker-thread hop, the result's encoding; goal
  <= 2 ms); beside them, in the same rounds, a raw SDK server (``MCPServer`` with one tool
  returning the same text, no agent) called the same way: the SDK's own floor, and its
  tail (a shared machine stalls either process now and then);
* **cancel**: a call whose model stalls after its first delta; once its first progress
  notification arrives, the client cancels it (``notifications/cancelled``); the time from
  just before the cancel to the server's log record of the run's end (``ended: cancelled``;
  both ``time.time()`` of one machine) (goal: p99 < 10 ms), split at the server's log
  record of its handler being cancelled: the notification's way over the pipe and through
  the SDK, then ours (cancel the run, its thread ends). A bare thread wake
  (``Event.set`` -> the waiter runs) is sampled after each cancel: the machine's floor.

Figures: median, p90, p99 and max; times are ``time.perf_counter`` except the cancel's
cross-process span.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from bench._common import bare_wake, ms, p99, summarize  # noqa: E402
from tests.mcp._served_agent import make_agent  # noqa: E402

SCRIPT = ROOT / "tests" / "mcp" / "_served_agent.py"
RAW_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("raw")
@server.tool()
def helper(prompt: str) -> str:
    return "Hello from the served agent."
server.run("stdio")
"""


def row(label: str, samples: list[float]) -> None:
    s = summarize(samples)
    print(
        f"{label:<40} n={len(samples):<4} median={ms(s['median'])}  p90={ms(s['p90'])}"
        f"  p99={ms(p99(samples))}  max={ms(s['max'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cancels", type=int, default=50)
    args = parser.parse_args()

    read_end, write_end = os.pipe()
    errlog = os.fdopen(write_end, "w")
    lines: queue.Queue[str] = queue.Queue()

    def read_lines() -> None:
        with os.fdopen(read_end) as stream:
            for line in stream:
                lines.put(line)

    reader = threading.Thread(target=read_lines, name="bench-stderr", daemon=True)
    reader.start()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parameters = StdioServerParameters(
        command=sys.executable, args=[str(SCRIPT), "stdio-factory"], env=env
    )
    raw_parameters = StdioServerParameters(command=sys.executable, args=["-c", RAW_SERVER], env=env)
    raw: list[float] = []
    served: list[float] = []
    in_process: list[float] = []
    cancels: list[float] = []
    wakes: list[float] = []

    heard: list[float] = []
    stopped: list[float] = []

    def cancelled_at() -> float:
        while True:
            line = lines.get(timeout=30)
            if "the served call was cancelled" in line:
                noticed = float(line.split(" ", 1)[0])
            if "ended: cancelled" in line:
                ended = float(line.split(" ", 1)[0])
                stopped.append(ended - noticed)
                return ended

    async def bench() -> None:
        async with (
            Client(stdio_client(parameters, errlog=errlog)) as client,
            Client(raw_parameters) as raw_client,
        ):
            for _ in range(5):  # warm every path
                await raw_client.call_tool("helper", {"prompt": "hello"})
                await client.call_tool("helper", {"prompt": "hello"})
                make_agent().invoke("hello")
            for _ in range(args.calls):
                start = time.perf_counter()
                await raw_client.call_tool("helper", {"prompt": "hello"})
                raw.append(time.perf_counter() - start)
                start = time.perf_counter()
                result = await client.call_tool("helper", {"prompt": "hello"})
                served.append(time.perf_counter() - start)
                assert not result.is_error, result
                start = time.perf_counter()
                make_agent().invoke("hello")
                in_process.append(time.perf_counter() - start)
            for _ in range(args.cancels):
                streaming = anyio.Event()
                sent = 0.0

                async def on_progress(
                    progress: float,
                    total: float | None,
                    message: str | None,
                    streaming: anyio.Event = streaming,
                ) -> None:
                    streaming.set()

                async with anyio.create_task_group() as group:

                    async def stalled() -> None:
                        await client.call_tool(
                            "helper", {"prompt": "stall"}, progress_callback=on_progress
                        )

                    group.start_soon(stalled)
                    await streaming.wait()
                    sent = time.time()
                    group.cancel_scope.cancel()
                ended = await anyio.to_thread.run_sync(cancelled_at)
                cancels.append(ended - sent)
                heard.append(cancels[-1] - stopped[-1])
                wakes.append(bare_wake())

    anyio.run(bench)
    errlog.close()
    print(f"stdio, {args.calls} calls in rounds, {args.cancels} cancels")
    row("raw SDK server call_tool (floor)", raw)
    row("served call_tool (stdio round trip)", served)
    row("agent.invoke in process", in_process)
    overhead = statistics.median(served) - statistics.median(in_process)
    print(f"{'overhead (difference of medians)':<40} {ms(overhead)}   goal <= 2 ms")
    beyond = statistics.median(served) - statistics.median(raw)
    print(f"{'served - raw SDK server (medians)':<40} {ms(beyond)}")
    row("client cancel -> run ended (server log)", cancels)
    print(f"{'':<40} p99 {ms(p99(cancels))}   goal < 10 ms")
    row("  of which: reaching the server's handler", heard)
    row("  of which: handler cancelled -> run ended", stopped)
    row("bare thread wake (machine floor)", wakes)


if __name__ == "__main__":
    main()
