"""The Redis commands one run costs: round trips (what the client sends, a script by its name)
and the commands those scripts run inside the server, on one Redis server and on a 3-master
Redis Cluster. Counted with ``MONITOR`` on every master, so the figures are exact and do not
depend on the machine's speed or load.

    python bench/bench_redis_round_trips.py [--runs 20] [--stores single,cluster]

Each run is ``Agent(ScriptedModel(["ok"]), store=, conversation_id=<new>).invoke("hi")`` in
this process, after one run that loads the scripts and learns the cluster's slots. Printed
per store: round trips and commands per run, then each round trip by name (``load`` is the
script, ``GET`` a plain command) and each command the scripts ran. Point ``PYTHONPATH`` at
another tree to count its figures (a before/after).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import redis

from agent_sync import Agent
from agent_sync.stores import RedisRunStore
from agent_sync.stores._redis_scripts import SCRIPTS
from agent_sync.testing import ScriptedModel
from agent_sync.testing.redis_server import RedisCluster, RedisServer

_SHAS = {hashlib.sha1(source.encode()).hexdigest(): name for name, source in SCRIPTS.items()}


def _watch(port: int, marker: str, counts: collections.Counter[tuple[bool, str]],
           ready: threading.Event) -> None:  # fmt: skip
    """Count the commands ``port`` runs between two ``ECHO marker`` (``(in a script, name)``)."""
    client: Any = redis.Redis(port=port)  # monitor() is untyped
    with client.monitor() as monitor:
        ready.set()
        counting = False
        while True:
            command: dict[str, Any] = monitor.next_command()
            words = str(command["command"]).split(" ")
            if marker in words:
                if counting:
                    break
                counting = True
                continue
            if counting:
                name = words[0].upper()
                if name == "EVALSHA":
                    name = _SHAS.get(words[1].lower(), name)
                counts[(command["client_type"] == "lua", name)] += 1
    client.close()


def _mark(ports: list[int], marker: str) -> None:
    for port in ports:
        client = redis.Redis(port=port)
        client.echo(marker)
        client.close()


def _count(kind: str, ports: list[int], store: RedisRunStore, runs: int) -> None:
    warm = Agent(ScriptedModel(["ok"]), store=store, conversation_id=f"w{uuid.uuid4().hex}")
    warm.invoke("hi")
    marker = f"mark-{uuid.uuid4().hex}"
    counts = [collections.Counter[tuple[bool, str]]() for _ in ports]
    threads = []
    for port, count in zip(ports, counts, strict=True):
        ready = threading.Event()
        thread = threading.Thread(target=_watch, args=(port, marker, count, ready), daemon=True)
        thread.start()
        ready.wait(30)
        threads.append(thread)
    _mark(ports, marker)
    for n in range(runs):
        agent = Agent(ScriptedModel(["ok"]), store=store, conversation_id=f"c{n}-{uuid.uuid4()}")
        agent.invoke("hi")
    _mark(ports, marker)
    for thread in threads:
        thread.join(60)
    total: collections.Counter[tuple[bool, str]] = collections.Counter()
    for count in counts:
        total.update(count)
    trips = sum(n for (inside, _), n in total.items() if not inside)
    print(f"{kind:<8} per run: {trips / runs:5.2f} round trips, "
          f"{sum(total.values()) / runs:5.2f} commands (with those scripts ran)")  # fmt: skip
    for inside in (False, True):
        parts = [
            f"{name} {n / runs:.2f}" for (lua, name), n in sorted(total.items()) if lua == inside
        ]
        print(f"  {'in scripts' if inside else 'sent':<10}  " + ", ".join(parts))
    print(f"  per master (all commands): {[sum(count.values()) for count in counts]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--stores", default="single,cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.stores.split(","):
            if kind == "cluster":
                from redis.cluster import RedisCluster as ClusterClient

                with RedisCluster.start(Path(folder) / "cluster") as cluster:
                    client = ClusterClient(host="127.0.0.1", port=cluster.ports[0])
                    store = RedisRunStore(client, prefix="b:")
                    _count(kind, cluster.ports, store, args.runs)
                    store.close()
                    client.close()
            else:
                with RedisServer.start(Path(folder) / "single") as server:
                    store = RedisRunStore(redis.Redis(port=server.port), prefix="b:")
                    _count(kind, [server.port], store, args.runs)
                    store.close()


if __name__ == "__main__":
    main()
