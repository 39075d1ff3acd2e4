"""Cross-process cancel latency: ``store.cancel(run_id)`` in this process -> the owner's
``invoke()`` returned in another process, and the owner's CPU while it waits to be cancelled.

    python bench/bench_cross_cancel.py [--runs 30] [--stores sqlite,redis]
                                       [--states stream,silent,tool,backoff]

The owner is a real child process (spawn) running an agent on the store, in one of these
states when the cancel is sent (after it has sat in it for a second):

* ``stream``: a slow streaming answer (``ScriptedModel``, a one-character chunk every 5 ms);
* ``silent``: a socket that stopped sending (``ScriptedModel`` ``stall_after``);
* ``tool``: a cooperative tool waiting on its ``ToolContext``;
* ``backoff``: a retry back-off of 60 s after a retryable model error.

Its watcher thread is the only thing that can hear the cancel. Times are wall-clock
(``time.time``, one host): p50, p99 and max. The CPU figure is the owner process's CPU time
over that second and the cancel, as a share of one core (with ``stream``, the stream's own
work). ``memory`` runs the owner in a thread of this process (a baseline; its CPU figure is
this whole process's). ``redis`` starts a throwaway ``redis-server`` unless given as
``redis:<port>`` (or ``--redis-port``); ``sqlite:<path>`` uses that file.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, RetryPolicy, ToolContext, tool  # noqa: E402
from agent_sync.errors import ModelError  # noqa: E402
from agent_sync.stores import RunStore  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from bench._stores import kind, make_store, open_specs  # noqa: E402

IDLE_S = 1.0  # how long the owner sits in its state before the cancel (for the CPU figure)
STATES = ("stream", "silent", "tool", "backoff")


@tool
def wait_tool(context: ToolContext) -> str:
    """Wait until cancelled."""
    context.wait(60)
    return "stopped"


def _agent(store: RunStore, conversation_id: str, state: str) -> Agent:
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


def owner(where: str | RunStore, conversation_id: str, state: str, out: Any) -> None:
    """Run one invoke that waits in ``state``; report its run id, then its end time, stop
    reason and CPU time from the report on. ``where``: a spec (child process) or the store."""
    store = make_store(where) if isinstance(where, str) else where
    agent = _agent(store, conversation_id, state)
    ended: list[tuple[float, str]] = []

    def run() -> None:
        result = agent.invoke("go")
        ended.append((time.time(), result.stop_reason))

    runner = threading.Thread(target=run, name="bench-owner")
    runner.start()
    while agent.active_run is None:
        time.sleep(0.001)  # bench only: tests never poll like this
    run_id = agent.active_run.run_id
    while store.get(run_id) is None:
        time.sleep(0.001)
    cpu_before = time.process_time()
    out.put(("running", run_id))
    runner.join(120)
    end, stop_reason = ended[0] if ended else (float("nan"), "did not end")
    out.put(("ended", end, stop_reason, time.process_time() - cpu_before))


def measure(spec: str, state: str, runs: int) -> None:
    context = multiprocessing.get_context("spawn")
    store = make_store(spec)
    latencies: list[float] = []
    cpu_shares: list[float] = []
    wrong: list[str] = []
    for n in range(runs):
        conversation_id = f"bench-{state}-{n}-{os.getpid()}-{time.time_ns()}"
        child: Any
        if kind(spec) == "memory":  # the same store object: a thread of this process
            out: Any = queue.Queue()
            child = threading.Thread(target=owner, args=(store, conversation_id, state, out))
        else:
            out = context.Queue()
            child = context.Process(target=owner, args=(spec, conversation_id, state, out))
        child.start()
        _, run_id = out.get(timeout=60)
        time.sleep(IDLE_S)  # let the owner sit in its state: its CPU then is the figure
        started = time.time()
        if not store.cancel(run_id, "bench"):
            print("cancel returned False:", store.get(run_id))
        _, ended, stop_reason, cpu = out.get(timeout=60)
        child.join(30)
        latency = ended - started
        latencies.append(latency * 1000)
        cpu_shares.append(cpu / (IDLE_S + latency))
        if stop_reason != "cancelled":
            wrong.append(stop_reason)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(
        f"{kind(spec):7} {state:7} n={runs:3}  p50={statistics.median(latencies):7.2f} ms"
        f"  p99={p99:7.2f} ms  max={latencies[-1]:7.2f} ms"
        f"  owner CPU while waiting {statistics.median(cpu_shares) * 100:5.2f} %"
        + (f"  NOT CANCELLED: {', '.join(wrong)}" if wrong else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--stores", default="sqlite", help="memory, sqlite[:path], redis[:port]")
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument(
        "--redis-port", type=int, default=0, help="a running redis-server (default: start one)"
    )
    args = parser.parse_args()
    states = args.states.split(",")
    if set(states) - set(STATES):
        raise SystemExit(f"--states: some of {', '.join(STATES)}")
    stores = args.stores.split(",")
    if args.redis_port:
        stores = [f"redis:{args.redis_port}" if s == "redis" else s for s in stores]
    with open_specs(stores) as specs:
        for spec in specs:
            for state in states:
                measure(spec, state, args.runs)


if __name__ == "__main__":
    main()
