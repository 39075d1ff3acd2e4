"""The cost of ``store.lost_runs()`` when nothing is lost, per store.

    python bench/bench_lost_runs.py [--calls 2000] [--stores memory,sqlite,redis]

Every process that recovers lost runs (issue 21) polls ``lost_runs()`` about twice a second,
so the poll must cost almost nothing while no run is lost: the goal is under 0.2 % of a core
per polling process (2 polls a second), whatever the store holds. Per store, two stores:

* ``empty``: a new store;
* ``busy``: 1,000 finished runs and 100 running runs with live leases, all of them
  ``on_owner_lost="resume"`` (the runs ``lost_runs`` must not scan).

Printed per store and case: the median microseconds of one call (wall clock, over batches
of ``--calls``), the CPU it costs this process per call, and what 2 calls a second cost of
one core. For Redis also the server's CPU per call (``INFO cpu``) and the commands per call
(``INFO commandstats``: the one ``EVALSHA`` the client sends, and the commands its script
runs). ``redis`` starts a throwaway ``redis-server`` unless given as ``redis:<port>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync.messages import Message  # noqa: E402
from agent_sync.run import RunState  # noqa: E402
from agent_sync.stores import RunStore  # noqa: E402
from bench._stores import kind, make_store, open_specs  # noqa: E402

FINISHED = 1000
RUNNING = 100
BATCHES = 5
POLLS_PER_S = 2.0
GOAL_PERCENT = 0.2


def _state(n: int) -> RunState:
    return RunState(
        run_id=f"run_bench_{n}_{uuid.uuid4().hex[:8]}",
        status="running",
        next_step="model",
        cycle=0,
        messages=({"role": "user", "content": [{"text": f"question {n}"}]},),
        history_start=0,
        on_owner_lost="resume",
    )


def fill(store: RunStore) -> None:
    """1,000 finished runs and 100 running ones with live leases, all resumable."""
    for n in range(FINISHED):
        state = _state(n)
        version = store.begin(f"done-{n}", state, owner="w", lease_s=3600, expected_length=0)
        answer: Message = {"role": "assistant", "content": [{"text": "answer"}]}
        done = replace(state, status="done", next_step=None, messages=(*state.messages, answer))
        store.commit(done, owner="w", version=version)
    for n in range(RUNNING):
        store.begin(f"live-{n}", _state(n), owner="w", lease_s=3600, expected_length=0)


def _spec_for(spec: str, case: str) -> tuple[str, str]:
    """A spec of a store of its own for ``case`` (a file, or a Redis prefix)."""
    if kind(spec) == "sqlite":
        return spec.replace("bench.db", f"bench-{case}.db"), ""
    return spec, f"bench_lost_{case}_{uuid.uuid4().hex[:6]}:"


def _redis_stats(client: Any) -> tuple[float, dict[str, int]]:
    cpu = client.info("cpu")
    calls = {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in client.info("commandstats").items()
    }
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls


def measure(spec: str, case: str, calls: int) -> None:
    where, prefix = _spec_for(spec, case)
    store = make_store(where, prefix=prefix) if prefix else make_store(where)
    if case == "busy":
        fill(store)
    assert store.lost_runs() == [], "nothing is lost here"
    client = getattr(store, "_client", None) if kind(spec) == "redis" else None
    if client is not None:
        server_cpu, commands = _redis_stats(client)
    walls, cpus = [], []
    for _ in range(BATCHES):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            store.lost_runs()
        walls.append((time.perf_counter() - wall) / calls)
        cpus.append((time.process_time() - cpu) / calls)
    wall_us, cpu_us = statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6
    share = cpu_us * POLLS_PER_S / 1e6 * 100
    line = (
        f"{kind(spec):<7} {case:<6} {wall_us:8.1f} µs/call  process CPU {cpu_us:7.1f} µs/call"
        f"  at {POLLS_PER_S:g}/s: {share:.4f} % of a core"
    )
    if client is not None:
        server_after, commands_after = _redis_stats(client)
        total = BATCHES * calls
        server_us = (server_after - server_cpu) / total * 1e6
        ran = {
            name: (commands_after.get(name, 0) - commands.get(name, 0)) / total
            for name in commands_after
            if commands_after.get(name, 0) - commands.get(name, 0) >= total / 2
        }
        shown = ", ".join(f"{name} {count:.2f}" for name, count in sorted(ran.items()))
        line += f"\n{'':15}server CPU {server_us:6.1f} µs/call; commands per call: {shown}"
    print(line)
    share_total = (cpu_us + (server_us if client is not None else 0.0)) * POLLS_PER_S / 1e4
    verdict = "ok" if share_total < GOAL_PERCENT else "OVER THE GOAL"
    print(f"{'':15}goal < {GOAL_PERCENT} % of a core (process + server): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    args = parser.parse_args()
    with open_specs(args.stores) as specs:
        for spec in specs:
            for case in ("empty", "busy"):
                measure(spec, case, args.calls)


if __name__ == "__main__":
    main()
