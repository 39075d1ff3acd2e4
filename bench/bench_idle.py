"""Idle cost: what a process pays while nothing happens, on each store.

    python bench/bench_idle.py [--stores sqlite,redis] [--rounds 3] [--window 5]
                               [--followers 100] [--trees /path/to/other/tree,...]

Two cases, each measured in a fresh child process:

* ``watcher``: the child owns one run that waits in a tool (its thread blocked, its store
  watcher listening). Figures over ``--window`` seconds of that wait: the child's CPU as a
  share of one core, and (Redis) the commands the server ran per second (``INFO
  commandstats``, the scripts' own commands included, the bench's ``INFO`` left out). Then a
  ``store.cancel`` of the run, and the time until its ``invoke`` returned (heard through the
  store: pub/sub on Redis, a poll on SQLite).
* ``probed``: the same followers, each also watching a connected client socket while
  silent (as a web route does when the server shows it the socket). Then the client end of
  20 other followers' sockets is closed, one at a time, and the time until the follower
  noticed (its ``on_gone`` was called: ``gone_*_ms``) and until its iteration ended (the
  server's thread is free: ``ended_*_ms``).
* ``followers``: the child follows ``--followers`` runs' event logs (``web._follow.Follower``,
  one thread each, as a web worker streams them; ``keepalive=15``), logs another process (this
  one) wrote. Figures: the child's CPU while they all wait, the Redis commands per second and
  the server's own CPU (``INFO cpu``); then this process appends a record to 20 of the logs
  one at a time and the time until the child's follower got it (``time.time`` on one host).

``--trees``: other source trees to measure too (a worktree of an older commit: "before"),
interleaved with this one round by round; each child imports the tree it is given
(``PYTHONPATH``), this process only writes the logs and reads the server's counters.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(HERE))

from bench._stores import kind, make_store, open_specs  # noqa: E402

LATENCY_SAMPLES = 20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _redis_counts(spec: str) -> tuple[int, float] | None:
    """Commands the server ran (``INFO`` left out) and its CPU seconds, or ``None``."""
    if kind(spec) != "redis":
        return None
    import redis

    client = redis.Redis(port=int(spec.partition(":")[2]))
    try:
        stats = client.info("commandstats")
        cpu = client.info("cpu")
    finally:
        client.close()
    calls = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _rates(spec: str, before: tuple[int, float] | None, seconds: float) -> dict[str, float]:
    after = _redis_counts(spec)
    if before is None or after is None:
        return {}
    return {
        "commands_per_s": (after[0] - before[0]) / seconds,
        "server_cpu_pct": (after[1] - before[1]) / seconds * 100,
    }


# -- the children --


def child_watcher(spec: str, window: float) -> dict[str, Any]:
    from agent_sync import Agent, ToolContext, tool
    from agent_sync.testing import ScriptedModel

    waiting = threading.Event()

    @tool
    def wait_tool(context: ToolContext[Any]) -> str:
        """Wait until cancelled."""
        waiting.set()
        context.wait(120)
        return "stopped"

    store = make_store(spec)
    agent = Agent(
        ScriptedModel([{"tool_calls": [{"name": "wait_tool", "input": {}}]}, "x"]),
        tools=[wait_tool],
        store=store,
        conversation_id=f"idle-{os.getpid()}-{time.time_ns()}",
    )
    ended: list[tuple[float, str]] = []

    def run() -> None:
        result = agent.invoke("go")
        ended.append((time.monotonic(), result.stop_reason))

    runner = threading.Thread(target=run, name="bench-owner")
    runner.start()
    waiting.wait(60)
    assert agent.active_run is not None
    run_id = agent.active_run.run_id
    time.sleep(0.5)  # bench only: let start-up settle before the window
    counts, cpu, started = _redis_counts(spec), _cpu(), time.monotonic()
    time.sleep(window)
    seconds = time.monotonic() - started
    figures: dict[str, Any] = {
        "cpu_pct": (_cpu() - cpu) / seconds * 100,
        **_rates(spec, counts, seconds),
    }
    sent = time.monotonic()
    store.cancel(run_id, "bench")
    runner.join(60)
    figures["cancel_ms"] = (ended[0][0] - sent) * 1000 if ended else float("nan")
    figures["stop_reason"] = ended[0][1] if ended else "did not end"
    return figures


def child_followers(spec: str, window: float, run_ids: list[str], probe: bool) -> dict[str, Any]:
    from agent_sync.web._encoders import NativeEncoder
    from agent_sync.web._follow import Follower

    store: Any = make_store(spec)
    lock = threading.Lock()
    peers: dict[str, socket.socket] = {}  # run id -> the client's end
    gone: dict[str, float] = {}
    ended: dict[str, float] = {}

    def follow(run_id: str) -> None:
        client = None
        if probe:  # a connected client socket the follower watches while silent
            client, peers[run_id] = socket.socketpair()

        def on_gone() -> None:
            gone[run_id] = time.monotonic()

        follower = Follower(
            store,
            run_id,
            after=1,
            encoder=NativeEncoder(run_id),
            keepalive=15.0,
            replay_ttl=60,
            client_socket=client,
            on_gone=on_gone,
        )
        frames = iter(follower)
        next(frames)  # the opening
        print("following", flush=True)
        for _ in frames:
            got = time.time()
            with lock:
                print(f"got {run_id} {got!r}", flush=True)
            return
        ended[run_id] = time.monotonic()

    threads = [threading.Thread(target=follow, args=(r,), daemon=True) for r in run_ids]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # bench only: every follower is waiting by then
    counts, cpu, started = _redis_counts(spec), _cpu(), time.monotonic()
    time.sleep(window)
    seconds = time.monotonic() - started
    figures = {"cpu_pct": (_cpu() - cpu) / seconds * 100, **_rates(spec, counts, seconds)}
    print("measured " + json.dumps(figures), flush=True)
    for thread in threads[:LATENCY_SAMPLES]:
        thread.join(120)
    if probe:
        print("disconnect " + json.dumps(_disconnects(run_ids, threads, peers, gone, ended)))
    return figures


def _disconnects(
    run_ids: list[str],
    threads: list[threading.Thread],
    peers: dict[str, socket.socket],
    gone: dict[str, float],
    ended: dict[str, float],
) -> dict[str, float]:
    """Close the client end of idle followers' sockets, one at a time: how long until
    each follower noticed, and until it ended."""
    gone_ms, ended_ms = [], []
    sampled = slice(LATENCY_SAMPLES, 2 * LATENCY_SAMPLES)
    for run_id, thread in zip(run_ids[sampled], threads[sampled], strict=True):
        closed = time.monotonic()
        peers[run_id].close()
        thread.join(30)
        if run_id in gone and run_id in ended:
            gone_ms.append((gone[run_id] - closed) * 1000)
            ended_ms.append((ended[run_id] - closed) * 1000)
    if not gone_ms:
        return {}
    return {
        "gone_p50_ms": statistics.median(gone_ms),
        "gone_max_ms": max(gone_ms),
        "ended_p50_ms": statistics.median(ended_ms),
        "ended_max_ms": max(ended_ms),
    }


# -- this process --


def run_watcher(tree: str, spec: str, window: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "watcher", "--stores", spec, "--window", str(window)],
        env={**os.environ, "BENCH_TREE": tree, "PYTHONPATH": tree},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run_followers(
    tree: str, spec: str, window: float, count: int, probe: bool = False
) -> dict[str, Any]:
    store: Any = make_store(spec)
    tag = f"{os.getpid()}-{time.time_ns()}"
    run_ids = [f"idle-{tag}-{n}" for n in range(count)]
    for run_id in run_ids:
        store.append_events(run_id, [{"type": "bench", "n": 0}], after=0)
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", "followers", "--stores", spec]
        + ["--window", str(window), "--followers", str(count), "--run-ids", ",".join(run_ids)]
        + (["--probe"] if probe else []),
        env={**os.environ, "BENCH_TREE": tree, "PYTHONPATH": tree},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines = iter(child.stdout.readline, "")
    figures: dict[str, Any] = {}
    for line in lines:
        if line.startswith("measured "):
            figures = json.loads(line.partition(" ")[2])
            break
    latencies = []
    for run_id in run_ids[:LATENCY_SAMPLES]:
        sent = time.time()
        store.append_events(run_id, [{"type": "bench", "n": 1}], after=1)
        for line in lines:
            if line.startswith("got "):
                _, got_id, at = line.split()
                assert got_id == run_id, (got_id, run_id)
                latencies.append((float(at) - sent) * 1000)
                break
    for line in lines:
        if line.startswith("disconnect "):
            figures.update(json.loads(line.partition(" ")[2]))
    child.wait(60)
    latencies.sort()
    figures["latency_p50_ms"] = statistics.median(latencies)
    figures["latency_max_ms"] = latencies[-1]
    return figures


def _row(case: str, spec: str, tree: str, samples: list[dict[str, Any]]) -> str:
    keys = [k for k in samples[0] if isinstance(samples[0][k], (int, float))]
    cells = "  ".join(f"{k}={statistics.median(s[k] for s in samples):8.2f}" for k in keys)
    return f"{case:9} {kind(spec):6} {tree:28} n={len(samples)}  {cells}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument(
        "--cases",
        default="watcher,followers",
        help="watcher, followers, probed (followers that peek at a client socket)",
    )
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trees", default="", help="other source trees, comma-separated")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--run-ids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "watcher":
        print(json.dumps(child_watcher(args.stores, args.window)), flush=True)
        return
    if args.child == "followers":
        child_followers(args.stores, args.window, args.run_ids.split(","), args.probe)
        return
    trees = [str(HERE)] + [t for t in args.trees.split(",") if t]
    cases = args.cases.split(",")
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with open_specs(args.stores, allowed=("sqlite", "redis")) as specs:
        for round_ in range(args.rounds):
            for spec in specs:
                for case in cases:
                    for tree in trees:  # interleaved: the machine's load hits each alike
                        if case == "watcher":
                            figures = run_watcher(tree, spec, args.window)
                        else:
                            figures = run_followers(
                                tree, spec, args.window, args.followers, case == "probed"
                            )
                        results.setdefault((case, spec, tree), []).append(figures)
                        print(f"round {round_} {case} {kind(spec)} {tree}: {figures}", flush=True)
        print()
        for (case, spec, tree), samples in results.items():
            print(_row(case, spec, tree, samples))


if __name__ == "__main__":
    main()
