"""MCP tools: what a call costs inside the agent's loop, against the raw ``mcp`` SDK client,
how fast a cancel ends an in-flight call, and what a connection costs.

    python bench/bench_mcp.py [--calls 300] [--cancels 30] [--transports stdio,http]

Against ``@modelcontextprotocol/server-everything`` (``npm ci --prefix tests/mcp_servers``),
over stdio and over streamable HTTP, per transport:

* **raw**: the SDK's own ``Client.call_tool("echo")`` in an ``async`` loop: the floor;
* **direct**: ``MCPTool(...)`` called from a plain thread (our loop thread and the hop);
* **in the loop**: ``invoke`` of an agent whose one turn calls the MCP ``echo`` tool, minus
  ``invoke`` of the same agent calling a local tool that returns the same result: the MCP
  call's cost inside the agent's loop (goal: within 1.1x of raw). "The same agent": the
  local agent has the server's other tools too (never called), so the difference is the
  call, not the size of the tool list; the difference against a local agent with the echo
  alone (as measured before) is printed too.

They are measured in rounds (one raw call, one direct call, one invoke of each agent, in
turn; the raw client's loop simply waits while ours run), so the load of a shared machine
falls on all of them alike. The raw client is also timed back to back, as a floor no call
in a loop can reach: a call right after another finds the server's process (and CPU)
awake, and answers up to twice as fast as one made after other work, as every call inside
a run is.
* **cancel**: ``agent.cancel()`` from another thread while ``trigger-long-running-operation``
  runs (the server has the ``tools/call``, seen by a recording tee or proxy): time until
  ``invoke`` returned (goal: p99 < 10 ms), and until the server had
  ``notifications/cancelled`` (as recorded; the recorder adds its own hop);
* **connect**: ``MCPServer.connect()`` (start or reach the server, handshake, list tools),
  and the raw client's ``async with Client(...)`` (handshake only, no listing);
* **idle**: threads and RSS of this process per open connection (stdio children excluded).

Figures: median (p50), p99 and max over the samples; times are ``time.perf_counter``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402

from agent_sync import Agent, tool  # noqa: E402
from agent_sync.mcp import MCPServer  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from tests.mcp._recording import RecordingProxy, TeeRecorder  # noqa: E402

EVERYTHING = (
    ROOT / "tests/mcp_servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)
ECHO_TURN = {"tool_calls": [{"name": "echo", "input": {"message": "hi"}}]}
LONG_TURN = {
    "tool_calls": [
        {"name": "trigger-long-running-operation", "input": {"duration": 30, "steps": 30}}
    ]
}


def figures(samples: Sequence[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50={statistics.median(ordered) * 1000:8.3f} ms  p99={p99 * 1000:8.3f} ms  "
        f"max={ordered[-1] * 1000:8.3f} ms  (n={len(ordered)})"
    )


def row(label: str, samples: Sequence[float]) -> None:
    print(f"  {label:<44} {figures(samples)}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_server() -> Iterator[int]:
    """server-everything's streamable HTTP server on a free port."""
    port = free_port()
    node = shutil.which("node") or "node"
    process = subprocess.Popen(
        [node, str(EVERYTHING), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "listening" in line, line
    try:
        yield port
    finally:
        process.kill()
        process.wait()
        process.stderr.close()


def stdio_command() -> list[str]:
    return [shutil.which("node") or "node", str(EVERYTHING), "stdio"]


# -- one round: raw, direct, in the loop --


def timed(fn: Callable[[], object], count: int) -> list[float]:
    times = []
    for _ in range(count):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return times


def call_costs(target: str | list[str], server: MCPServer, calls: int) -> dict[str, Any]:
    """Per-call times of the raw client, our direct call, and invoke() with the MCP echo and
    with a local echo giving the same result (alone, and among the server's other tools),
    taken in rounds; and the raw client's connect time."""
    direct_tool = server.tools(include=["echo"])[0]
    echo_result = direct_tool(message="hi")

    @tool(name="echo")
    def local_echo(message: str) -> Any:
        """Echo, locally."""
        return echo_result

    others = [t for t in server.tools() if t.name != "echo"]

    def agent_run(tools: list[Any]) -> Callable[[], object]:
        def run() -> object:
            return Agent(ScriptedModel([ECHO_TURN, "done"]), tools=tools).invoke("go")

        return run

    ours = {
        "direct": lambda: direct_tool(message="hi"),
        "mcp": agent_run([server]),
        "local": agent_run([local_echo, *others]),
        "local_alone": agent_run([local_echo]),
    }

    async def main() -> dict[str, Any]:
        raw_server: Any
        if isinstance(target, str):
            raw_server = target
        else:
            raw_server = StdioServerParameters(command=target[0], args=target[1:])
        times: dict[str, Any] = {"raw": [], "raw_b2b": [], **{name: [] for name in ours}}
        started = time.perf_counter()
        async with Client(raw_server, cache=None) as client:
            times["connect"] = time.perf_counter() - started
            for _ in range(calls):  # back to back: the floor (a busy server, a busy CPU)
                begin = time.perf_counter()
                await client.call_tool("echo", {"message": "hi"})
                times["raw_b2b"].append(time.perf_counter() - begin)
            gc.collect()
            gc.disable()  # collected between rounds: a collection's pause, landing on the
            try:  # same step of every round (allocations repeat), would skew one result
                for _ in range(calls):
                    begin = time.perf_counter()
                    await client.call_tool("echo", {"message": "hi"})
                    times["raw"].append(time.perf_counter() - begin)
                    for name, fn in ours.items():  # blocking: the raw client's loop waits
                        times[name] += timed(fn, 1)
                    gc.collect(0)
            finally:
                gc.enable()
        return times

    return asyncio.run(main())


def cancel_latency(server: MCPServer, seen: Any, cancels: int) -> tuple[list[float], list[float]]:
    """Times from cancel() to invoke's return, and to the server having the notification."""
    returned, notified = [], []
    for _ in range(cancels):
        agent = Agent(ScriptedModel([LONG_TURN, "never"]), tools=[server])
        done: list[float] = []
        before = len(seen.messages)

        def run(agent: Agent = agent, done: list[float] = done) -> None:
            agent.invoke("go")
            done.append(time.perf_counter())

        thread = threading.Thread(target=run)
        thread.start()
        request = seen.wait_for(
            lambda m, before=before: (
                m.get("method") == "tools/call" and seen.messages.index(m) >= before
            ),
            30,
        )
        cancelled_at = time.perf_counter()
        agent.cancel()
        thread.join(30)
        seen.wait_for(
            lambda m, rid=request["id"]: (
                m.get("method") == "notifications/cancelled" and m["params"]["requestId"] == rid
            ),
            30,
        )
        notified.append(time.perf_counter() - cancelled_at)
        returned.append(done[0] - cancelled_at)
    return returned, notified


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def idle_cost(make: Callable[[], MCPServer], count: int = 5) -> tuple[float, float]:
    """Threads and RSS (KiB) per open connection."""
    threads, rss = threading.active_count(), rss_kib()
    servers = [make().connect() for _ in range(count)]
    per_thread = (threading.active_count() - threads) / count
    per_rss = (rss_kib() - rss) / count
    for server in servers:
        server.close()
    return per_thread, per_rss


RESULTS = {
    "raw_b2b": "raw SDK client call_tool, back to back",
    "raw": "raw SDK client call_tool, in the rounds",
    "direct": "direct MCPTool() call",
    "mcp": "invoke with the MCP echo",
    "local": "invoke with a local echo (+ other tools)",
    "local_alone": "invoke with a local echo alone",
}


def bench(transport: str, calls: int, cancels: int) -> None:
    print(f"\n== {transport}")
    with contextlib_for(transport) as (make, raw_target, make_recorded):
        server = make()
        connects = timed(server.connect, 1)
        times = call_costs(raw_target, server, calls)
        connected = times["connect"]
        medians = {name: statistics.median(times[name][10:]) for name in RESULTS}
        for name, label in RESULTS.items():
            row(label, times[name][10:])
        for local, label in (("local", ""), ("local_alone", ", vs the echo alone")):
            in_loop = medians["mcp"] - medians[local]
            print(
                f"  MCP call in the loop{label:<18} {in_loop * 1000:8.3f} ms"
                f"  = {in_loop / medians['raw']:.2f}x the raw call in the rounds,"
                f" {in_loop / medians['raw_b2b']:.2f}x back to back"
            )
        server.close()
        recorded, seen = make_recorded()
        with recorded:
            recorded.connect()
            returned, notified = cancel_latency(recorded, seen, cancels)
        row("cancel -> invoke returned", returned)
        row("cancel -> server has notifications/cancelled", notified)
        starts = [connected] + [timed(lambda: make().connect().close(), 1)[0] for _ in range(3)]
        row("raw connect (handshake)", [connected])
        row("MCPServer.connect (start, handshake, list)", connects + starts[1:])
        threads, rss = idle_cost(make)
        print(f"  idle connection: {threads:.1f} thread(s), {rss:.0f} KiB RSS in this process")


@contextmanager
def contextlib_for(transport: str) -> Iterator[tuple[Any, Any, Any]]:
    if transport == "stdio":
        command = stdio_command()

        def make_recorded() -> tuple[MCPServer, TeeRecorder]:
            recorder = TeeRecorder()
            return MCPServer.stdio(recorder.wrap(command)), recorder

        yield (lambda: MCPServer.stdio(command)), command, make_recorded
        return
    with http_server() as port:
        url = f"http://127.0.0.1:{port}/mcp"

        def make_recorded_http() -> tuple[MCPServer, RecordingProxy]:
            proxy = RecordingProxy(port)
            return MCPServer.http(proxy.url), proxy

        yield (lambda: MCPServer.http(url)), url, make_recorded_http


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--cancels", type=int, default=30)
    parser.add_argument("--transports", default="stdio,http")
    args = parser.parse_args()
    if not EVERYTHING.is_file():
        sys.exit("server-everything is missing: npm ci --prefix tests/mcp_servers")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    for transport in args.transports.split(","):
        bench(transport, args.calls, args.cancels)


if __name__ == "__main__":
    main()
