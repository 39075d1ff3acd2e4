"""revoke -> run ended: from ``app.control.revoke(run_id)`` to the ``done`` record in the
run's log, for a run that waits in a tool, on a real Celery worker per pool (prefork,
threads, solo), a real redis-server as broker, backend and store.

    python bench/bench_celery_revoke.py [--runs 30] [--pools prefork,threads,solo]

Prints the median, p90, p99 and max per pool and per kind (``revoke``, ``terminate``). The
goal: p99 < 50 ms on every pool. Uses the Celery tests' worker app
(``tests.celery.worker_app``), so run it from the repository's root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_sync._run_log._records import is_terminal  # noqa: E402
from agent_sync.testing.redis_server import RedisServer  # noqa: E402


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _bench_pool(pool: str, runs: int, server: RedisServer, folder: Path) -> None:
    import celery  # type: ignore[import-untyped]

    from agent_sync.celery import run_task
    from tests.celery import agents, stores
    from tests.celery.conftest import start_worker, stop_worker
    from tests.deploy.test_deployments import Probe

    queue = f"bench-revoke-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AGENT_SYNC_TEST_BROKER": f"redis://127.0.0.1:{server.port}/1",
        "AGENT_SYNC_TEST_BACKEND": f"redis://127.0.0.1:{server.port}/2",
        "AGENT_SYNC_TEST_QUEUE": queue,
        stores.STORE: server.url,
        stores.PREFIX: f"bench-{uuid.uuid4().hex[:8]}:",
        agents.PROBE_SOCKET: str(folder / f"{pool}.sock"),
    }
    os.environ[stores.STORE], os.environ[stores.PREFIX] = env[stores.STORE], env[stores.PREFIX]
    store = stores.store_from_env()
    app = celery.Celery("bench", broker=env["AGENT_SYNC_TEST_BROKER"], set_as_current=True)
    app.conf.result_backend = env["AGENT_SYNC_TEST_BACKEND"]
    app.conf.task_default_queue = queue
    probe = Probe(folder / f"{pool}.sock")
    lines: list[str] = []
    worker = start_worker(
        ["-A", "tests.celery.worker_app", "worker", f"--pool={pool}", "--concurrency=1"]
        + ["-Q", queue],
        env,
        lines,
    )
    try:
        for terminate in (False, True):
            if terminate and pool == "prefork":
                continue  # each terminate restarts the pool process: not the same figure
            samples = []
            for _ in range(runs):
                cid = f"c-{uuid.uuid4().hex[:10]}"
                result = run_task.delay(cid, f"wait {cid}")
                probe.started(cid)
                logged = len(store.read_events(result.id))
                start = time.perf_counter()
                app.control.revoke(result.id, terminate=terminate)
                records = [e.data for e in store.read_events(result.id)]
                while not records or not is_terminal(records[-1]):
                    more = store.read_events(result.id, after=len(records), timeout=10)
                    records += [e.data for e in more]
                samples.append(time.perf_counter() - start)
                assert records[-1]["type"] == "done" and logged >= 1, records[-1]
                result.get(timeout=30, propagate=False)
            ordered = sorted(samples)
            kind = "terminate" if terminate else "revoke"
            print(
                f"{pool:<8} {kind:<10} n={len(samples):<4} "
                f"median={ordered[len(ordered) // 2] * 1000:7.2f} ms  "
                f"p90={ordered[int(len(ordered) * 0.9)] * 1000:7.2f} ms  "
                f"p99={_p99(samples) * 1000:7.2f} ms  max={ordered[-1] * 1000:7.2f} ms"
            )
    finally:
        stop_worker(worker)
        probe.close()
        app.close()


def main() -> None:
    """Run the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--pools", default="prefork,threads,solo")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server = RedisServer.start(folder / "redis")
        try:
            for pool in args.pools.split(","):
                _bench_pool(pool, args.runs, server, folder)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
