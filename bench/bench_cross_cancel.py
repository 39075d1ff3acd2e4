"""Cross-process cancel latency: ``store.cancel(run_id)`` in this process -> the owner's
``invoke()`` returned in another process, and the owner's idle CPU while it waits.

    python bench/bench_cross_cancel.py [--runs 30] [--stores sqlite,redis]
                                       [--states stream,silent,tool,backoff]

The owner is a real child process (spawn) running an agent on the store: in a model stream
(a chunk every 5 ms), stalled like a silent socket (``ScriptedModel`` ``stall_after``), in a
cooperative tool, or in a retry back-off (60 s). Its watcher
thread is the only thing that can hear the cancel. Times are wall-clock (``time.time``, one
host). ``memory`` runs the owner in a thread of this process (a baseline).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, RetryPolicy, ToolContext, tool  # noqa: E402
from agent_sync.errors import ModelError  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402

IDLE_S = 1.0  # how long the owner waits, idle, before the cancel (for the CPU figure)


def make_store(spec: str) -> Any:
    kind, _, arg = spec.partition(":")
    if kind == "sqlite":
        from agent_sync.stores import SQLiteRunStore  # type: ignore[attr-defined]

        return SQLiteRunStore(arg)
    if kind == "redis":
        import redis

        from agent_sync.stores import RedisRunStore  # type: ignore[attr-defined]

        return RedisRunStore(redis.Redis(port=int(arg)))
    raise SystemExit(f"unknown store spec {spec!r}")


@tool
def wait_tool(context: ToolContext) -> str:
    """Wait until cancelled."""
    context.wait(60)
    return "stopped"


def _agent(store: Any, conversation_id: str, state: str) -> Agent:
    retry = RetryPolicy()
    if state == "tool":
        turns: list[Any] = [{"tool_calls": [{"name": "wait_tool", "input": {}}]}, "x"]
    elif state == "stream":  # chunks flowing: one every 5 ms for a minute
        turns = [{"text": "x" * 12_000, "chunk_size": 1, "chunk_delay": 0.005}]
    elif state == "backoff":  # a retryable error, then a 60 s wait before the retry
        turns = [{"error": ModelError("overloaded", retryable=True)}, "x"]
        retry = RetryPolicy(max_attempts=2, initial_delay=60, max_delay=60, jitter=0)
    else:  # silent: a socket that stopped sending
        turns = [{"text": "a silent answer", "chunk_size": 1, "stall_after": 1}]
    return Agent(
        ScriptedModel(turns),
        tools=[wait_tool],
        store=store,
        conversation_id=conversation_id,
        retry=retry,
    )


def owner(spec: str, conversation_id: str, state: str, out: Any) -> None:
    """Child process: run one stalled invoke; report run id, idle CPU, end time."""
    store = make_store(spec)
    agent = _agent(store, conversation_id, state)
    ended: list[float] = []
    runner = threading.Thread(target=lambda: (agent.invoke("go"), ended.append(time.time())))
    runner.start()
    while agent.active_run is None:
        time.sleep(0.001)  # bench only: tests never poll like this
    run_id = agent.active_run.run_id  # type: ignore[union-attr]
    while store.get(run_id) is None:
        time.sleep(0.001)
    cpu_before = time.process_time()
    out.put(("running", run_id))
    runner.join(120)
    out.put(("ended", ended[0] if ended else float("nan"), time.process_time() - cpu_before))


def measure(spec: str, state: str, runs: int) -> None:
    context = multiprocessing.get_context("spawn")
    store = make_store(spec)
    latencies: list[float] = []
    idle_cpu: list[float] = []
    for n in range(runs):
        out = context.Queue()
        child = context.Process(
            target=owner, args=(spec, f"bench-{state}-{n}-{os.getpid()}", state, out)
        )
        child.start()
        kind, run_id = out.get(timeout=60)
        time.sleep(IDLE_S)  # let the owner sit idle: its CPU over this time is the watcher's
        started = time.time()
        if not store.cancel(run_id, "bench"):
            print("cancel returned False:", store.get(run_id))
        _, ended, cpu = out.get(timeout=60)
        child.join(30)
        latencies.append((ended - started) * 1000)
        idle_cpu.append(cpu)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    cpu_share = statistics.median(idle_cpu) / (IDLE_S + statistics.median(latencies) / 1000)
    print(
        f"{spec.split(':')[0]:7} {state:7} n={runs:3}  p50={statistics.median(latencies):7.2f} ms"
        f"  p99={p99:7.2f} ms  max={latencies[-1]:7.2f} ms"
        f"  owner CPU while idle {cpu_share * 100:5.2f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--stores", default="sqlite")
    parser.add_argument("--states", default="stream,silent,tool,backoff")
    parser.add_argument(
        "--redis-port", type=int, default=0, help="a running redis-server (default: start one)"
    )
    args = parser.parse_args()
    with ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        for name in args.stores.split(","):
            if name == "sqlite":
                spec = f"sqlite:{folder}/bench.db"
            elif name == "redis":
                port = args.redis_port
                if not port:  # a throwaway server (Debian's redis-server)
                    from agent_sync.testing.redis_server import RedisServer

                    port = stack.enter_context(RedisServer.start(f"{folder}/redis")).port
                spec = f"redis:{port}"
            else:
                raise SystemExit(f"unknown store {name!r}")
            for state in args.states.split(","):
                measure(spec, state, args.runs)


if __name__ == "__main__":
    main()
