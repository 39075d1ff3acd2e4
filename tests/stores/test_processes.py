"""The failure rules of durable runs, with real processes, on every store that works across
processes (SQLite, Redis): cancel from another process, a SIGKILLed owner, resume after a
restart, two processes resuming at once, and a store that is down (fail closed).

Children are spawned (``sys.executable``); they report through queues and files, never by
timing. Each test's store is described by a picklable spec the children open themselves.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync.errors import (
    ConcurrentInvocationError,
    PendingApprovalError,
    RunConflictError,
    StoreUnavailableError,
    UsageError,
)
from agent_sync.hooks import BeforeModelCall
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.stores._rules import WORKER_STOPPED_TEXT
from agent_sync.testing import ScriptedModel
from agent_sync.testing.redis_server import RedisServer
from tests.conftest import Spec  # the fixture "spec" is there
from tests.fixtures.bounds import COOPERATIVE_GRACE, HANG_BOUND
from tests.fixtures.doubles import texts
from tests.fixtures.garbage import collect_garbage
from tests.fixtures.processes import child_context

pytestmark = pytest.mark.timeout(120)


def open_store(spec: Spec, lease_s: float = 30.0) -> RunStore:
    kind, where = spec
    if kind == "sqlite":
        return SQLiteRunStore(where, lease_s=lease_s)
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from agent_sync.stores import RedisRunStore

    port, prefix = where.split("/", 1)
    if kind == "redis-cluster":  # a node of a cluster (test_redis_cluster.py)
        from redis.cluster import RedisCluster

        cluster = RedisCluster(host="127.0.0.1", port=int(port), socket_timeout=10)
        return RedisRunStore(cluster, prefix=prefix, lease_s=lease_s)
    client = redis.Redis(port=int(port), retry=Retry(NoBackoff(), 0), socket_timeout=10)
    return RedisRunStore(client, prefix=prefix, lease_s=lease_s)


# -- tools and workers (top level: spawned children import them) --


@tool
def wait_for_cancel(context: ToolContext) -> str:
    """Wait until the run is cancelled."""
    Path(os.environ["TOOL_STARTED"]).write_text("started")
    told = context.wait(60)
    return "told to stop" if told else "never told"


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path (records each run of it in $WIPE_LOG).

    Args:
        path: The path.
    """
    with open(os.environ["WIPE_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")
    return f"wiped {path}"


ASKS = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}
WAITS = {"tool_calls": [{"name": "wait_for_cancel", "input": {}}]}
SILENT = {"text": "thinking", "chunk_size": 1, "stall_after": 1}


class _ReportsRunId:
    """Puts the run id on ``ready`` at the run's first model call: the run is stored as
    running and watched by then, so a cancel from another process finds it (``active_run``
    is set before the store has the run: reporting it then let a cancel find no run)."""

    def __init__(self, ready: Any) -> None:
        self._ready, self._sent = ready, False

    def before_model_call(self, event: BeforeModelCall) -> None:
        if not self._sent:
            self._sent = True
            self._ready.put(event.run_id)


def _report_run_id(agent: Agent, ready: Any, started: str) -> None:
    pause = threading.Event()
    while not os.path.exists(started):  # the tool is running (so the run is stored)
        pause.wait(0.001)
    ready.put(agent.active_run.run_id)  # type: ignore[union-attr]


def owner(spec: Spec, state: str, lease_s: float, ready: Any, out: Any, folder: str) -> None:
    """A worker process: runs conversation c1, stalled silent or in a waiting tool."""
    started = os.path.join(folder, "tool-started")
    os.environ["TOOL_STARTED"] = started
    turns: list[Any] = [WAITS, "after the tool"] if state == "tool" else [SILENT]
    agent = Agent(
        ScriptedModel(turns),
        tools=[wait_for_cancel],
        store=open_store(spec, lease_s),
        conversation_id="c1",
        hooks=[] if state == "tool" else [_ReportsRunId(ready)],
        tool_grace_period=COOPERATIVE_GRACE,  # the tool's own result is asserted
    )
    if state == "tool":
        threading.Thread(target=_report_run_id, args=(agent, ready, started), daemon=True).start()
    result = agent.invoke("go")
    out.put((result.stop_reason, result.cancel_reason, repr(agent.messages)))


def pauser(spec: Spec, out: Any) -> None:
    """A worker process: asks to wipe, pauses for approval, and exits."""
    agent = Agent(ScriptedModel([ASKS]), tools=[wipe], store=open_store(spec), conversation_id="c1")
    result = agent.invoke("wipe it")
    out.put((result.stop_reason, [request.id for request in result.approvals]))


def resumer(spec: Spec, log: str, loaded: Any, go: Any, out: Any) -> None:
    """A worker process: loads c1's paused run, says so, and resumes it with an approval
    once ``go`` is set."""
    os.environ["WIPE_LOG"] = log
    agent = Agent(
        ScriptedModel(["wiped it"]), tools=[wipe], store=open_store(spec), conversation_id="c1"
    )
    ids = [request.id for request in agent.pending_approvals]
    loaded.put(len(ids))
    go.wait(60)
    try:
        result = agent.resume(dict.fromkeys(ids, True))
        out.put(("resumed", result.text))
    except (RunConflictError, ConcurrentInvocationError, UsageError) as exc:
        out.put((type(exc).__name__, str(exc)))


def forked_owner(store: RunStore, ready: Any, out: Any) -> None:
    """A forked worker (as under gunicorn --preload): uses the store object it inherited."""
    agent = Agent(
        ScriptedModel([SILENT]), store=store, conversation_id="forked", hooks=[_ReportsRunId(ready)]
    )
    result = agent.invoke("go")
    out.put((result.stop_reason, result.cancel_reason))


def _spawn() -> Any:
    return child_context()


# -- the tests --


@pytest.mark.parametrize("state", ["silent", "tool"])
def test_cancel_from_another_process_stops_the_owner(
    spec: Spec, state: str, tmp_path: Path
) -> None:
    context = _spawn()
    ready, out = context.Queue(), context.Queue()
    worker = context.Process(target=owner, args=(spec, state, 30.0, ready, out, str(tmp_path)))
    worker.start()
    run_id = ready.get(timeout=60)
    store = open_store(spec)
    here = Agent(ScriptedModel(["never"]), store=store, conversation_id="c1")
    with pytest.raises(ConcurrentInvocationError):
        here.invoke("me too")  # one invocation per conversation, across processes
    if state == "tool":  # the Stop button of a web page: by conversation, from any worker
        assert here.cancel("stop from here") is True
    else:
        assert store.cancel(run_id, "stop from here") is True
    stop_reason, reason, history = out.get(timeout=60)
    worker.join(30)
    assert (stop_reason, reason) == ("cancelled", "stop from here")
    if state == "tool":  # the tool was told, and its real result kept
        assert "told to stop" in history
    logged = list(store.load("c1").messages)
    assert validate_history(logged) == [] and texts(logged[-1])[-1] == CANCELLED_TEXT
    here = Agent(ScriptedModel(["my turn"]), store=store, conversation_id="c1")
    assert here.invoke("now me").text == "my turn"


def _watchers_stopped(earlier: set[threading.Thread], store: RunStore) -> None:
    """Wait until this process has no store watcher thread but those of ``earlier`` (other
    tests' stores not yet collected): the test's own ends when its runs do, at the end of
    its running wait, which the store's own wake ends at once (a Redis store's safety
    poll lasts ``IDLE_S``, how it ends is not the case here)."""
    pause = threading.Event()
    wake = getattr(store, "_wake_watcher", None)  # a store that can be woken
    while any(
        t.name == "agent_sync-store-watcher" and t not in earlier for t in threading.enumerate()
    ):
        if wake is not None:
            wake()
        pause.wait(0.005)


def test_a_store_made_before_a_fork_works_in_the_child(spec: Spec) -> None:
    """As under gunicorn --preload: the child gets the parent's store object, with its open
    connections (SQLite: never to be used, nor closed, in the child) and its watcher state
    (Redis: a subscribed pub/sub connection). The child must open its own, and both
    processes' runs must still hear their cancels."""
    with warnings.catch_warnings():  # what other tests left is theirs to answer for, not
        warnings.simplefilter("ignore", ResourceWarning)  # this test's (a socket, under -n 2)
        collect_garbage()  # other tests' chat apps, and with them their stores' watchers
    earlier = set(threading.enumerate())
    store = open_store(spec)
    parent = Agent(ScriptedModel(["first", "second"]), store=store, conversation_id="parent")
    assert parent.invoke("hi").text == "first"  # connections open, the watcher has run
    store.wait_signals(["nothing"], 0.01)
    _watchers_stopped(earlier, store)  # gunicorn forks from a master with no other thread running
    context = multiprocessing.get_context("fork")
    ready, out = context.Queue(), context.Queue()
    child = context.Process(target=forked_owner, args=(store, ready, out))
    child.start()
    run_id = ready.get(timeout=60)
    assert store.cancel(run_id, "from the parent") is True  # the child's own watcher hears it
    assert out.get(timeout=60) == ("cancelled", "from the parent")
    child.join(30)
    assert parent.invoke("still there?").text == "second"  # the parent's store still works
    for conversation in ("forked", "parent"):
        assert validate_history(list(store.load(conversation).messages)) == []


def test_a_killed_owner_is_failed_after_its_lease(spec: Spec, tmp_path: Path) -> None:
    context = _spawn()
    ready, out = context.Queue(), context.Queue()
    worker = context.Process(target=owner, args=(spec, "tool", 0.5, ready, out, str(tmp_path)))
    worker.start()
    run_id = ready.get(timeout=60)  # the tool is running
    os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
    worker.join(30)
    store = open_store(spec)
    deadline = time.monotonic() + HANG_BOUND  # the lease (0.5 s, by the store's clock)
    pause = threading.Event()  # is what is tested: the first read past it fails the run
    while (record := store.load("c1")).run is not None:
        assert time.monotonic() < deadline, "the killed owner's lease never ran out"
        pause.wait(0.005)
    logged = list(record.messages)
    assert validate_history(logged) == []
    assert WORKER_STOPPED_TEXT in str(logged[-1])  # the call in flight: effect unknown
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "failed"
    agent = Agent(ScriptedModel(["usable again"]), store=store, conversation_id="c1")
    assert agent.invoke("hello?").text == "usable again"
    assert validate_history(list(store.load("c1").messages)) == []


def test_a_run_paused_in_one_process_is_resumed_in_another(spec: Spec, tmp_path: Path) -> None:
    context = _spawn()
    out = context.Queue()
    first = context.Process(target=pauser, args=(spec, out))
    first.start()
    stop_reason, ids = out.get(timeout=60)
    first.join(30)
    assert stop_reason == "paused" and first.exitcode == 0  # the pauser is gone
    log = tmp_path / "wipes.log"
    go, loaded = context.Event(), context.Queue()
    go.set()
    second = context.Process(target=resumer, args=(spec, str(log), loaded, go, out))
    second.start()
    assert loaded.get(timeout=60) == 1
    assert out.get(timeout=60) == ("resumed", "wiped it")
    second.join(30)
    assert len(log.read_text().splitlines()) == 1
    logged = list(open_store(spec).load("c1").messages)
    assert validate_history(logged) == [] and texts(logged[-1]) == ["wiped it"]


def test_two_processes_resuming_at_once_run_the_tool_once(spec: Spec, tmp_path: Path) -> None:
    context = _spawn()
    out = context.Queue()
    first = context.Process(target=pauser, args=(spec, out))
    first.start()
    assert out.get(timeout=60)[0] == "paused"
    first.join(30)
    log = tmp_path / "wipes.log"
    go, loaded = context.Event(), context.Queue()
    racers = [
        context.Process(target=resumer, args=(spec, str(log), loaded, go, out)) for _ in range(2)
    ]
    for racer in racers:
        racer.start()
    assert [loaded.get(timeout=60) for _ in racers] == [1, 1]  # both saw the paused run
    go.set()
    reports = [out.get(timeout=60) for _ in racers]
    outcomes = sorted(report[0] for report in reports)
    for racer in racers:
        racer.join(30)
    assert outcomes[0] != "resumed" and outcomes[1] == "resumed", reports
    assert outcomes[0] in ("RunConflictError", "ConcurrentInvocationError"), reports
    assert len(log.read_text().splitlines()) == 1  # the tool ran once
    assert validate_history(list(open_store(spec).load("c1").messages)) == []


# -- a store that is down: fail closed, nothing committed is lost --


@pytest.fixture
def wipe_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "wipes.log"
    log.touch()
    monkeypatch.setenv("WIPE_LOG", str(log))
    return log


def _paused_agent(store: RunStore) -> tuple[Agent, str]:
    agent = Agent(
        ScriptedModel([ASKS, "wiped it"]), tools=[wipe], store=store, conversation_id="c1"
    )
    paused = agent.invoke("wipe it")
    assert paused.stop_reason == "paused"
    return agent, paused.approvals[0].id


def _fails_closed(
    agent: Agent,
    request_id: str,
    wipe_log: Path,
    invoke_error: type[Exception] = StoreUnavailableError,
) -> None:
    with pytest.raises(StoreUnavailableError):
        agent.resume({request_id: True})
    assert wipe_log.read_text() == ""  # a gated tool never runs without a stored decision
    with pytest.raises(invoke_error):
        agent.invoke("anything")


def _goes_on(agent: Agent, request_id: str, store: RunStore, wipe_log: Path) -> None:
    record = store.load("c1")
    assert record.run is not None and record.run.state.status == "paused"  # still there
    assert agent.resume({request_id: True}).text == "wiped it"
    assert len(wipe_log.read_text().splitlines()) == 1
    logged = list(store.load("c1").messages)
    assert validate_history(logged) == [] and texts(logged[0]) == ["wipe it"]


def test_redis_down_fails_closed_and_loses_nothing_committed(
    tmp_path: Path, wipe_log: Path, redis_server: RedisServer
) -> None:
    folder = tmp_path / "redis"
    server = RedisServer.start(folder, durable=True)  # its own server: this test kills it
    try:
        spec: Spec = ("redis", f"{server.port}/down:")
        agent, request_id = _paused_agent(open_store(spec))
        server.kill()
        _fails_closed(agent, request_id, wipe_log)
        server = RedisServer.start(folder, port=server.port, durable=True)
        _goes_on(agent, request_id, open_store(spec), wipe_log)
    finally:
        server.kill()


def test_a_locked_sqlite_file_fails_closed_and_loses_nothing_committed(
    tmp_path: Path, wipe_log: Path
) -> None:
    path = str(tmp_path / "store.db")
    agent, request_id = _paused_agent(SQLiteRunStore(path, busy_timeout_s=0.2))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process's write that never ends
    try:
        # invoke reads the conversation (readers never wait for a writer) and finds the
        # paused run: refused, nothing written
        _fails_closed(agent, request_id, wipe_log, invoke_error=PendingApprovalError)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    _goes_on(agent, request_id, SQLiteRunStore(path), wipe_log)
