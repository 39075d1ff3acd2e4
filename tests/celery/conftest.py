"""A real Celery worker for the tests: ``celery worker`` in its own process, with a real
redis-server as broker and result backend, on a store shared with the test (SQLite file or
Redis), and a probe socket its tools report to (:mod:`tests.celery.agents`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_sync.stores._event_log import EventLogStore
from tests.celery import agents, stores
from tests.deploy.test_deployments import Probe  # the test's end of wait_for_stop
from tests.fixtures.at_once import params_in_module
from tests.fixtures.bounds import HANG_BOUND

celery = pytest.importorskip("celery", reason="pip install -e '.[celery]'")
celery_state: Any = pytest.importorskip("celery._state")

ROOT = Path(__file__).resolve().parents[2]
_READY = " ready."  # celery@<host> ready.


@dataclass
class Worker:
    """A running ``celery worker`` and what the test shares with it."""

    pool: str  # "prefork", "threads" or "solo"
    app: Any  # the test's own Celery app: same broker, backend and queue
    store: EventLogStore
    probe: Probe
    process: subprocess.Popen[str]
    env: dict[str, str]
    lines: list[str] = field(default_factory=list, repr=False)

    def log(self) -> str:
        return "".join(self.lines)


def start_worker(
    args: list[str], env: dict[str, str], lines: list[str], cwd: Path = ROOT
) -> subprocess.Popen[str]:
    """``celery <args>`` (a worker) in ``cwd``; returns once it says it is ready. Its
    output goes to ``lines``, read through a pipe (no sleep, no guess)."""
    command = [sys.executable, "-m", "celery", *args, "--loglevel=INFO"]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    command += ["-n", f"agent-sync-{uuid.uuid4().hex[:8]}@%h"]
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                lines.append(line)
                if _READY in line:
                    ready.set()
        ready.set()  # it exited

    threading.Thread(target=read, name="test-celery-worker-log", daemon=True).start()
    ready.wait(60)
    if process.poll() is not None or not any(_READY in line for line in lines):
        stop_worker(process)  # never left running behind a failed start
        pytest.fail("the worker did not start:\n" + "".join(lines))
    return process


def stop_worker(*processes: subprocess.Popen[str]) -> None:
    """A warm shutdown (SIGTERM) of each, then SIGKILL for any that lingers. Sent to all
    before waiting for any: a warm shutdown is mostly Celery's own sleeps (a pool process
    sleeps a second before it exits), which so overlap."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(HANG_BOUND)


POOLS = ["prefork-redis", "prefork-sqlite", "threads-redis", "solo-redis"]


@dataclass
class _Started:
    """A worker started for a module, and the folder, queue and environment it was given."""

    pool: str
    kind: str
    folder: Path
    env: dict[str, str]
    lines: list[str]
    process: subprocess.Popen[str] | None = None


def _environment(pool: str, kind: str, folder: Path, redis_server: Any) -> dict[str, str]:
    queue = f"agent-sync-tests-{uuid.uuid4().hex[:8]}"
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "AGENT_SYNC_TEST_BROKER": f"redis://127.0.0.1:{redis_server.port}/1",
        "AGENT_SYNC_TEST_BACKEND": f"redis://127.0.0.1:{redis_server.port}/2",
        "AGENT_SYNC_TEST_QUEUE": queue,
        stores.STORE: (redis_server.url if kind == "redis" else f"sqlite:///{folder / 'runs.db'}"),
        stores.PREFIX: f"celery-{uuid.uuid4().hex[:8]}:",
        agents.PROBE_SOCKET: str(folder / "probe.sock"),
        "AGENT_SYNC_TEST_NAMED_STORE": "0" if pool == "threads" else "1",
    }


@pytest.fixture(scope="module")
def started_workers(
    request: pytest.FixtureRequest, redis_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, _Started]]:
    """The workers the module's selected tests use (:data:`POOLS`), started at once and
    stopped at once: a start is mostly imports (the cores share them) and a warm shutdown
    mostly Celery's sleeps, so together they take about what one takes alone. Each has its
    own queue, store (key prefix or file) and probe socket."""
    started: dict[str, _Started] = {}
    for param in params_in_module(request, "worker", POOLS):
        pool, kind = param.split("-")
        folder = tmp_path_factory.mktemp("celery")
        env = _environment(pool, kind, folder, redis_server)
        started[param] = _Started(pool, kind, folder, env, [])

    def start(worker: _Started) -> subprocess.Popen[str]:
        args = ["-A", "tests.celery.worker_app", "worker", f"--pool={worker.pool}"]
        args += ["--concurrency=1", "-Q", worker.env["AGENT_SYNC_TEST_QUEUE"]]
        return start_worker(args, worker.env, worker.lines)

    try:
        with ThreadPoolExecutor(len(started), thread_name_prefix="test-celery-start") as executor:
            futures = {param: executor.submit(start, worker) for param, worker in started.items()}
        # each start is bounded (start_worker); every one has ended here, so none is left
        # running unknown to the finally below when another failed
        for param, future in futures.items():
            if future.exception() is None:
                started[param].process = future.result()
        for future in futures.values():
            future.result()  # a failed start fails the tests that use the workers
        yield started
    finally:
        stop_worker(*[w.process for w in started.values() if w.process is not None])


@pytest.fixture(scope="module", params=POOLS)
def worker(
    request: pytest.FixtureRequest, started_workers: dict[str, _Started]
) -> Iterator[Worker]:
    """A worker with one pool process (prefork), one thread, or solo, on a Redis or SQLite
    store (the threads worker learns its store at its first task: ``configure`` is not
    given it); its app is this process's default while its tests run."""
    started = started_workers[str(request.param)]
    env = started.env
    assert started.process is not None
    app = celery.Celery(
        "agent_sync_tests_client",
        broker=env["AGENT_SYNC_TEST_BROKER"],
        backend=env["AGENT_SYNC_TEST_BACKEND"],
        set_as_current=True,
    )
    app.conf.task_default_queue = env["AGENT_SYNC_TEST_QUEUE"]
    app.conf.broker_connection_retry_on_startup = True
    previous_default = celery_state.default_app
    app.set_default()  # the web server's threads send with it too (as docs/deployments.md)
    probe = Probe(started.folder / "probe.sock")
    old = {name: os.environ.get(name) for name in (stores.STORE, stores.PREFIX)}
    os.environ[stores.STORE], os.environ[stores.PREFIX] = env[stores.STORE], env[stores.PREFIX]
    try:
        store = stores.store_from_env()
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    try:
        yield Worker(started.pool, app, store, probe, started.process, env, started.lines)
    finally:
        probe.close()
        celery_state.set_default_app(previous_default)
        app.close()
