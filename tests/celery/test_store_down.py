"""A real Celery worker that starts while its store is down (issue 29): ``configure`` needs
nothing of the store at import, the pool process that registers the recovery at its start
keeps looking, and once the store is up a task runs and a lost run is taken over.

The store is a redis-server on a Unix socket that is started only after the worker said it
is ready (a socket path, not a port: nothing else can take it meanwhile); the broker and
result backend are the session's redis-server. Every wait is on a task result or the store's
event log: nothing sleeps.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_sync import RunState
from agent_sync._run_log._records import is_terminal
from agent_sync.celery import run_task
from agent_sync.messages import validate_history
from agent_sync.stores._event_log import EventLogStore
from agent_sync.testing.redis_server import RedisServer
from tests.celery import agents, stores
from tests.celery.conftest import ROOT, start_worker, stop_worker
from tests.fixtures.doubles import history_texts

celery = pytest.importorskip("celery", reason="pip install -e '.[celery]'")
celery_state: Any = pytest.importorskip("celery._state")

pytestmark = pytest.mark.timeout(180)


def _lost_run(store: EventLogStore, conversation_id: str) -> str:
    """A run of ``conversation_id`` as a worker that died leaves it (its lease ran out,
    ``on_owner_lost="resume"``), with the event log the web opened for it."""
    run_id = f"run_{uuid.uuid4().hex}"
    state = RunState(
        run_id=run_id,
        status="running",
        next_step="model",
        cycle=0,
        messages=({"role": "user", "content": [{"text": "hello"}]},),
        history_start=0,
        conversation_id=conversation_id,
        on_owner_lost="resume",
    )
    store.begin(conversation_id, state, owner="a dead worker", lease_s=0, expected_length=0)
    store.append_events(run_id, [{"type": "run", "run_id": run_id}], after=0)
    return run_id


def _follow(store: EventLogStore, run_id: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The run's log up to its last record (each read waits for the next append)."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not records or not is_terminal(records[-1]):
        remaining = deadline - time.monotonic()
        assert remaining > 0, records
        events = store.read_events(run_id, after=len(records), timeout=min(remaining, 5.0))
        records += [event.data for event in events]
    return records


def test_a_worker_started_with_its_store_down_runs_tasks_once_it_is_up(
    redis_server: Any,
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="as-down-"))  # short: a socket path has a limit
    socket_path = folder / "store.sock"
    queue = f"agent-sync-tests-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "AGENT_SYNC_TEST_BROKER": f"redis://127.0.0.1:{redis_server.port}/1",
        "AGENT_SYNC_TEST_BACKEND": f"redis://127.0.0.1:{redis_server.port}/2",
        "AGENT_SYNC_TEST_QUEUE": queue,
        stores.STORE: f"unix://{socket_path}",
        stores.PREFIX: f"down-{uuid.uuid4().hex[:8]}:",
        agents.PROBE_SOCKET: str(folder / "probe.sock"),
        "AGENT_SYNC_TEST_NAMED_STORE": "1",  # configure(store=): recovery from the start
    }
    app = celery.Celery(
        "agent_sync_tests_client",
        broker=env["AGENT_SYNC_TEST_BROKER"],
        backend=env["AGENT_SYNC_TEST_BACKEND"],
        set_as_current=True,
    )
    app.conf.task_default_queue = queue
    previous_default = celery_state.default_app
    app.set_default()
    lines: list[str] = []
    worker = start_worker(  # returns once the worker says it is ready: the store is down
        ["-A", "tests.celery.worker_app", "worker", "--pool=prefork", "--concurrency=1"]
        + ["-Q", queue],
        env,
        lines,
    )
    server: RedisServer | None = None
    try:
        assert not socket_path.exists()
        server = RedisServer.start(
            folder / "data", extra=["--unixsocket", str(socket_path), "--unixsocketperm", "700"]
        )
        import redis

        from agent_sync.stores import RedisRunStore

        store = RedisRunStore(
            redis.Redis(unix_socket_path=str(socket_path)),
            prefix=env[stores.PREFIX],
            lease_s=stores.LEASE_S,
        )
        conversation = f"c-{uuid.uuid4().hex[:10]}"
        summary = run_task.delay(conversation, "hello").get(timeout=60)
        assert (summary["status"], summary["stop_reason"]) == ("done", "end_turn")
        messages = store.load(conversation).messages
        assert validate_history(messages) == []
        assert history_texts(messages)[-1].startswith("finished in ")
        # the recovery the pool process registered while the store was down looks again
        lost = f"c-{uuid.uuid4().hex[:10]}"
        run_id = _lost_run(store, lost)
        records = _follow(store, run_id)
        assert (records[-1]["type"], records[-1]["stop_reason"]) == ("done", "end_turn"), lines
        snapshot = store.get(run_id)
        assert snapshot is not None and snapshot.status == "done"
        assert validate_history(store.load(lost).messages) == []
    finally:
        stop_worker(worker)
        if server is not None:
            server.stop()
        celery_state.set_default_app(previous_default)
        app.close()
