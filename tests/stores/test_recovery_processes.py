"""Recovery with real processes: a worker SIGKILLed mid-model-call, mid-tool or between
steps, and its run going on in another process (``on_owner_lost="resume"``), on SQLite and
Redis: same run id, the model call made again, an idempotent tool run again, any other
call in flight answered "worker stopped; effect unknown", a finished call never run twice,
the event log one run with no hole and no duplicate, and exactly one of racing recoverers.

Children are spawned; they report through queues and files, never by timing. The lease is
what is tested, so the parent lets it run out (``wait_until_lost``).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import RunStore
from agent_sync.stores._rules import WORKER_STOPPED_TEXT
from agent_sync.testing import ScriptedModel
from agent_sync.testing.run_store_contract._base import events_of
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.processes import child_context
from tests.fixtures.recovered import join_recovered, wait_until_lost
from tests.stores.test_processes import Spec, open_store

pytestmark = pytest.mark.timeout(120)

# The dying worker's lease: what the parent waits out after the kill. Short, and safe so: a
# worker descheduled past it before its kill only lets the run look lost for a moment (its
# next renewal and commits are its owner's, accepted), and nothing recovers before the kill.
LEASE_S = 0.25
# A dying *web* worker recovers lost runs itself (its routes do): one descheduled past its
# lease could take its own run over before the kill, so its lease leaves it more room.
WEB_LEASE_S = 0.5
SILENT = {"text": "thinking", "chunk_size": 1, "stall_after": 1}  # blocks until cancelled


# -- tools (top level: spawned children import them) --


def _tool_body(context: ToolContext, name: str) -> str:
    """Record the call in $TOOL_LOG; in the dying worker ($BLOCK_TOOLS), say it started and
    block until the worker is killed."""
    with open(os.environ["TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{name} {os.getpid()}\n")
    if os.environ.get("BLOCK_TOOLS"):
        Path(os.environ["TOOL_STARTED"]).write_text("started")
        if context.wait(60):  # told to stop: a worker that stood still lost its run
            Path(os.environ["TOOL_STARTED"] + ".told").write_text("told")
    return f"{name} done in {os.getpid()}"


@tool
def send_email(context: ToolContext) -> str:
    """Send an email (not idempotent)."""
    return _tool_body(context, "send_email")


@tool(idempotent=True)
def look_up(context: ToolContext) -> str:
    """Look something up (idempotent)."""
    return _tool_body(context, "look_up")


@tool
def charge_card() -> str:
    """Charge a card (not idempotent, fast)."""
    with open(os.environ["TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(f"charge_card {os.getpid()}\n")
    return "charged"


TOOLS = [send_email, look_up, charge_card]


def _calls(name: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": {}}]}


# What the dying worker's model says, per crash point; then what the recovering one's says.
DYING: dict[str, list[Any]] = {
    "model": [SILENT],
    "tool": [_calls("send_email")],
    "idempotent_tool": [_calls("look_up")],
    "between_steps": [_calls("charge_card"), SILENT],
}
RECOVERING: dict[str, list[Any]] = {
    "model": ["answered after the crash"],
    "tool": ["answered after the crash"],
    "idempotent_tool": ["answered after the crash"],
    "between_steps": ["answered after the crash"],
}


class _ReportsAtCall:
    """Puts the run id on ``ready`` at the run's ``nth`` model call (what came before it
    is committed by then)."""

    def __init__(self, ready: Any, nth: int) -> None:
        self._ready, self._nth, self._calls = ready, nth, 0

    def before_model_call(self, event: Any) -> None:
        self._calls += 1
        if self._calls == self._nth:
            self._ready.put(event.run_id)


def _report_when_tool_starts(agent: Agent, ready: Any, started: str) -> None:
    pause = threading.Event()
    while not os.path.exists(started):
        pause.wait(0.001)
    ready.put(agent.active_run.run_id)  # type: ignore[union-attr]


def dying_worker(spec: Spec, case: str, ready: Any, folder: str, web: bool) -> None:
    """A worker process that starts conversation c1's run and is killed in ``case``."""
    os.environ["BLOCK_TOOLS"] = "1"
    os.environ["TOOL_LOG"] = os.path.join(folder, "tools.log")
    started = os.environ["TOOL_STARTED"] = os.path.join(folder, "tool-started")
    store = open_store(spec)
    hooks: list[object] = []
    if case == "model":
        hooks = [_ReportsAtCall(ready, 1)]
    elif case == "between_steps":
        hooks = [_ReportsAtCall(ready, 2)]

    def make_agent(conversation_id: str) -> Agent:
        return Agent(
            ScriptedModel(DYING[case]),
            tools=TOOLS,
            store=store,
            conversation_id=conversation_id,
            hooks=hooks,
            lease_s=WEB_LEASE_S if web else LEASE_S,
            on_owner_lost="resume",
        )

    if web:
        from agent_sync.web._run_control import RunControl

        control = RunControl(
            make_agent,
            store,
            timeout=None,
            replay_ttl=60.0,
            max_live_runs=4,  # type: ignore[arg-type]
        )
        publisher = control.start("c1", "go")
        if case in ("tool", "idempotent_tool"):
            pause = threading.Event()
            while not os.path.exists(started):
                pause.wait(0.001)
            ready.put(publisher.run_id)
        publisher.join(120)
        return
    agent = make_agent("c1")
    if case in ("tool", "idempotent_tool"):
        threading.Thread(
            target=_report_when_tool_starts, args=(agent, ready, started), daemon=True
        ).start()
    agent.invoke("go")


def _make_recovering_agent(store: RunStore, case: str) -> Any:
    def make_agent(conversation_id: str) -> Agent:
        return Agent(
            ScriptedModel(RECOVERING[case]),
            tools=TOOLS,
            store=store,
            conversation_id=conversation_id,
            on_owner_lost="resume",
        )

    return make_agent


def _kill_after_ready(spec: Spec, case: str, folder: Path, *, web: bool = False) -> str:
    context = child_context()
    ready = context.Queue()
    worker = context.Process(target=dying_worker, args=(spec, case, ready, str(folder), web))
    worker.start()
    run_id: str = ready.get(timeout=60)
    os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
    worker.join(30)
    wait_until_lost(open_store(spec), run_id)  # the lease is what is tested
    return run_id


def _tool_log(folder: Path) -> list[str]:
    path = folder / "tools.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("case", ["model", "tool", "idempotent_tool", "between_steps"])
def test_a_killed_workers_run_goes_on_in_another_process(
    spec: Spec, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _kill_after_ready(spec, case, tmp_path)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    lost = store.lost_runs()
    assert [r.state.run_id for r in lost] == [run_id]  # left for a recoverer, not failed
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "running"

    assert store.recover(_make_recovering_agent(store, case)) == [run_id]
    join_recovered(run_id)

    snapshot = store.get(run_id)  # the same run, over
    assert snapshot is not None and snapshot.status == "done"
    record = store.load("c1")
    assert record.run is None
    history = list(record.messages)
    assert validate_history(history) == []
    assert "answered after the crash" in str(history[-1])
    assert CANCELLED_TEXT not in str(history)
    calls = _tool_log(tmp_path)
    if case == "tool":  # in flight, not idempotent: never run again, effect unknown
        assert [c.split()[0] for c in calls] == ["send_email"]
        assert WORKER_STOPPED_TEXT in str(history)
    elif case == "idempotent_tool":  # run again, here
        assert [c.split()[0] for c in calls] == ["look_up", "look_up"]
        assert f"look_up done in {os.getpid()}" in str(history)
        assert WORKER_STOPPED_TEXT not in str(history)
    elif case == "between_steps":  # finished before the crash: its result kept, not rerun
        assert [c.split()[0] for c in calls] == ["charge_card"]
        assert "charged" in str(history) and WORKER_STOPPED_TEXT not in str(history)
    else:
        assert calls == [] and WORKER_STOPPED_TEXT not in str(history)
    # the conversation goes on
    agent = Agent(ScriptedModel(["usable"]), store=store, conversation_id="c1")
    assert agent.invoke("next").text == "usable"
    assert validate_history(list(store.load("c1").messages)) == []


def racing_recoverer(spec: Spec, barrier: Any, out: Any, folder: str) -> None:
    """A process that recovers c1's lost run at the barrier, with three others."""
    os.environ["TOOL_LOG"] = os.path.join(folder, "tools.log")
    store = open_store(spec)
    make_agent = _make_recovering_agent(store, "tool")
    barrier.wait(60)
    out.put((os.getpid(), store.recover(make_agent)))  # the process waits for its run


def test_racing_recoverers_resume_a_run_once(spec: Spec, tmp_path: Path) -> None:
    run_id = _kill_after_ready(spec, "tool", tmp_path)
    context = child_context()
    barrier, out = context.Barrier(4), context.Queue()
    racers = [
        context.Process(target=racing_recoverer, args=(spec, barrier, out, str(tmp_path)))
        for _ in range(4)
    ]
    for racer in racers:
        racer.start()
    results = [out.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(60)
    winners = [ids for _, ids in results if ids]
    assert winners == [[run_id]]
    store = open_store(spec)
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "done"
    history = list(store.load("c1").messages)
    assert validate_history(history) == []
    assert str(history).count("answered after the crash") == 1


@pytest.mark.parametrize("case", ["model", "tool", "idempotent_tool", "between_steps"])
def test_a_recovered_web_run_is_one_run_in_its_event_log(
    spec: Spec, case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower on any worker reads one run: numbered with no hole, one ``run``, one
    ``resumed``, each call started once and ended once, one ``done`` at the end."""
    run_id = _kill_after_ready(spec, case, tmp_path, web=True)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    from agent_sync.stores._recovery import keep_recovering, stop_recovering

    log = events_of(store)
    events = log.read_events(run_id)
    keep_recovering(store, _make_recovering_agent(store, case))  # this worker's watcher
    try:
        while not events or events[-1].data["type"] not in ("done", "error"):
            events += log.read_events(run_id, after=events[-1].seq if events else 0, timeout=5)
    finally:
        stop_recovering(store)
    join_recovered(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.data["type"] for e in events]
    assert kinds.count("run") == 1 and kinds[0] == "run"
    assert kinds.count("resumed") == 1 and kinds.count("done") == 1 and kinds[-1] == "done"
    starts = [e.data["id"] for e in events if e.data["type"] == "tool_start"]
    ends = [e.data["id"] for e in events if e.data["type"] == "tool_end"]
    assert sorted(starts) == sorted(set(starts)) == sorted(ends)
    resumed = kinds.index("resumed")
    text_after = "".join(e.data["text"] for e in events[resumed:] if e.data["type"] == "text")
    assert text_after == "answered after the crash"
    done = events[-1].data
    assert done["stop_reason"] == "end_turn" and done["text"] == "answered after the crash"
    assert validate_history(list(store.load("c1").messages)) == []


def test_routes_that_serve_nothing_take_a_lost_run_over(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The routes recover from their creation: a web worker started after the crash that
    serves no request still takes the lost run over."""
    pytest.importorskip("flask", reason="pip install -e '.[flask]'")
    from agent_sync.stores._recovery import stop_recovering
    from agent_sync.web.flask import chat_blueprint

    run_id = _kill_after_ready(spec, "tool", tmp_path, web=True)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    log = events_of(store)
    routes = chat_blueprint(_make_recovering_agent(store, "tool"), store=store)  # no request
    try:
        events = log.read_events(run_id)
        deadline = time.monotonic() + 30
        while events[-1].data["type"] not in ("done", "error"):
            assert time.monotonic() < deadline, "nobody took the lost run over"
            events += log.read_events(run_id, after=events[-1].seq, timeout=5)
    finally:
        stop_recovering(store)
    join_recovered(run_id)
    assert events[-1].data["type"] == "done", events[-1].data
    assert routes.name == "agent_sync_chat"
    assert validate_history(list(store.load("c1").messages)) == []


def _stop_outside_a_write(spec: Spec, pid: int) -> None:
    """SIGSTOP ``pid`` at a moment it holds no SQLite write lock. A process frozen inside a
    write transaction (its lease renewals write every ~lease/3) holds the database's one
    write lock until it runs again, so every other writer waits, then fails "database is
    locked": SQLite's nature, not the lease rules these tests are about. Holding the write
    lock ourselves while stopping it means its write is at most waiting for that lock."""
    kind, where = spec
    if kind != "sqlite":  # a Redis client holds nothing on the server between commands
        os.kill(pid, signal.SIGSTOP)
        return
    lock = sqlite3.connect(where, timeout=HANG_BOUND, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # waits for a write in flight to end
        os.kill(pid, signal.SIGSTOP)
        lock.execute("ROLLBACK")
    finally:
        lock.close()


def test_a_worker_that_stood_still_stops_the_run_another_took_over(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stopped (SIGSTOP: a long GC pause, a frozen VM) past its lease, its run
    taken over, then going on (SIGCONT): its renewal is refused, so it stops its own copy
    of the run at once (its tool is told) and the recovered run's history is untouched."""
    context = child_context()
    ready = context.Queue()
    worker = context.Process(target=dying_worker, args=(spec, "tool", ready, str(tmp_path), False))
    worker.start()
    run_id = ready.get(timeout=60)
    _stop_outside_a_write(spec, worker.pid)  # type: ignore[arg-type]
    try:
        monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
        store = open_store(spec)
        wait_until_lost(store, run_id)  # its lease ran out while it stood still
        assert store.recover(_make_recovering_agent(store, "tool")) == [run_id]
        join_recovered(run_id)
    finally:
        os.kill(worker.pid, signal.SIGCONT)  # type: ignore[arg-type]
    worker.join(60)
    assert (tmp_path / "tool-started.told").read_text() == "told"  # its copy was stopped
    history = list(store.load("c1").messages)
    assert validate_history(history) == [] and "answered after the crash" in str(history[-1])
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "done"
