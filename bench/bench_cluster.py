"""RedisRunStore on one Redis server and on a 3-master Redis Cluster: runs per second, and how
evenly the cluster's masters share the commands.

    python bench/bench_cluster.py [--conversations 1000] [--processes 4] [--rounds 2]
                                  [--stores single,cluster]

Each round starts a throwaway ``redis-server`` and a throwaway 3-master cluster
(:class:`agent_sync.testing.redis_server.RedisCluster`), then, on each store in turn,
``--processes`` spawned processes take one turn each on their share of ``--conversations``
conversations (``Agent(ScriptedModel([...]), store=, conversation_id=).invoke()``, offline:
the store is all that costs). Printed per store and round: runs/s (from the moment every
process is ready to the last one done), the commands per run (``INFO commandstats`` before
and after: every command, those scripts run included, and in brackets the scripts, each one
round trip), the CPU per run of the client processes and of the servers (``INFO cpu``: on
a busy machine, steadier than runs/s; the servers' includes what they burn idle over the
round), and on the cluster the commands each master ran against an even split (the largest
share over the mean: the goal is 1.5 at most). ``bench_redis_round_trips.py`` names each
round trip.

``--stores single`` alone runs on a tree without the cluster layout (``PYTHONPATH`` at a
copy of an older commit), for a before/after of the single server.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from agent_sync import Agent
from agent_sync.stores import RedisRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.testing.redis_server import RedisServer


def _store(kind: str, port: int, prefix: str) -> RedisRunStore:
    if kind == "cluster":
        from redis.cluster import RedisCluster

        return RedisRunStore(RedisCluster(host="127.0.0.1", port=port), prefix=prefix)
    return RedisRunStore(redis.Redis(port=port), prefix=prefix)


def _worker(kind: str, port: int, prefix: str, ids: list[str], ready: Any, go: Any) -> None:
    store = _store(kind, port, prefix)
    ready.put(1)
    go.wait(60)
    cpu = time.process_time()
    for conversation_id in ids:
        agent = Agent(ScriptedModel(["ok"]), store=store, conversation_id=conversation_id)
        if agent.invoke("hi").text != "ok":
            sys.exit(1)
    ready.put(time.process_time() - cpu)  # this process's CPU for its runs
    store.close()


def _calls(port: int) -> tuple[int, int, float]:
    """The commands ``port`` ran so far (the bench's own left out), its scripts, and the
    server's CPU seconds (user and system)."""
    client = redis.Redis(port=port)
    stats = client.info("commandstats")
    cpu = client.info("cpu")
    client.close()
    total = sum(
        int(value["calls"])
        for name, value in stats.items()
        if name not in ("cmdstat_info", "cmdstat_cluster", "cmdstat_ping", "cmdstat_config")
    )
    seconds = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return total, int(stats.get("cmdstat_evalsha", {}).get("calls", 0)), seconds


def _round(kind: str, port: int, ports: list[int], args: argparse.Namespace) -> None:
    context = multiprocessing.get_context("spawn")
    prefix = f"b{uuid.uuid4().hex[:8]}:"
    ids = [f"conv-{n}" for n in range(args.conversations)]
    ready, go = context.Queue(), context.Event()
    shares = [ids[n :: args.processes] for n in range(args.processes)]
    workers = [
        context.Process(target=_worker, args=(kind, port, prefix, share, ready, go))
        for share in shares
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=600)  # spawning is slow on a busy machine
    before = [_calls(p) for p in ports]
    start = time.perf_counter()
    go.set()
    client_cpu = sum(ready.get(timeout=600) for _ in workers)
    for worker in workers:
        worker.join(600)
    elapsed = time.perf_counter() - start
    after = [_calls(p) for p in ports]
    calls = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
    scripts = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    server_cpu = sum(a[2] - b[2] for a, b in zip(after, before, strict=True))
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    line = f"{kind:<8} {args.conversations / elapsed:8.1f} runs/s"
    line += f"   per run {sum(calls) / args.conversations:.1f} commands"
    line += f" ({scripts / args.conversations:.1f} scripts)"
    line += f"   CPU ms per run: clients {client_cpu / args.conversations * 1000:.2f}"
    line += f", servers {server_cpu / args.conversations * 1000:.2f}"
    if len(ports) > 1:
        mean = sum(calls) / len(calls)
        line += f"   commands per master {calls}   largest / even {max(calls) / mean:.2f}"
    print(line + (f"   FAILED workers {failed}" if failed else ""), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stores", default="single,cluster")
    args = parser.parse_args()
    kinds = args.stores.split(",")
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            print(f"round {n + 1}", flush=True)
            for kind in kinds:
                if kind == "cluster":
                    from agent_sync.testing.redis_server import RedisCluster

                    with RedisCluster.start(Path(folder) / "cluster") as cluster:
                        _round(kind, cluster.ports[0], cluster.ports, args)
                else:
                    with RedisServer.start(Path(folder) / "single") as server:
                        _round(kind, server.port, [server.port], args)


if __name__ == "__main__":
    main()
