"""Recovery in one process, on each store: a lost run (its owner's lease ran out, its
state says ``on_owner_lost="resume"``) is written as a dying worker leaves it (``begin``
and ``commit`` with an owner that never renews), then taken over by ``store.recover`` or a
registered watcher. The real-process crashes are in ``test_recovery_processes.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from agent_sync import Agent, RunState, UsageError, tool, validate_history
from agent_sync.errors import StoreUnavailableError
from agent_sync.messages import Message
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.stores._recovery import keep_recovering, stop_recovering
from agent_sync.stores._rules import WORKER_STOPPED_TEXT
from agent_sync.testing import ScriptedModel
from agent_sync.testing.run_store_contract import _wait_past
from agent_sync.testing.run_store_contract._base import events_of
from tests.fixtures.recovered import join_recovered

pytestmark = pytest.mark.timeout(60)

LEASE_S = 30.0  # while the dying worker writes: never runs out before its last write
LAST_LEASE_S = 0.01  # its last renewal, just before it dies
ran: list[str] = []


@tool
def send_email(to: str) -> str:
    """Send an email (not idempotent).

    Args:
        to: Whom to.
    """
    ran.append(f"send_email {to}")
    return f"sent to {to}"


@tool(idempotent=True)
def look_up(key: str) -> str:
    """Look a key up (idempotent).

    Args:
        key: The key.
    """
    ran.append(f"look_up {key}")
    return f"value of {key}"


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    ran.clear()


def _use(tool_use_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": tool_use_id, "name": name, "input": arguments}}


def _user(text: str) -> Message:
    return {"role": "user", "content": [{"text": text}]}


def _lost(
    store: RunStore,
    messages: Sequence[Message],
    *,
    next_step: str,
    cycle: int,
    round_results: Sequence[Any] = (),
) -> str:
    """Write conversation c1's run as a worker that died leaves it; return its id."""
    run_id = f"run_lost_{time.monotonic_ns()}"
    first = RunState(
        run_id=run_id,
        status="running",
        next_step="model",
        cycle=0,
        messages=tuple(messages[:1]),
        history_start=0,
        conversation_id="c1",
        on_owner_lost="resume",
    )
    version = store.begin("c1", first, owner="dead", lease_s=LEASE_S, expected_length=0)
    last = RunState(
        run_id=run_id,
        status="running",
        next_step=next_step,  # type: ignore[arg-type]
        cycle=cycle,
        messages=tuple(messages),
        history_start=0,
        pending_tool_uses=tuple(b["toolUse"] for b in messages[-1]["content"] if "toolUse" in b)
        if next_step == "tools"
        else (),
        conversation_id="c1",
        round_results=tuple(round_results),
        on_owner_lost="resume",
    )
    store.commit(last, owner="dead", version=version)
    # Its watcher's last renewal, then nothing: the lease runs out by the store's clock
    # (what is tested) without the test waiting out a whole lease.
    assert store.renew(run_id, owner="dead", lease_s=LAST_LEASE_S)
    _wait_past(time.time() + LAST_LEASE_S + 0.02)
    return run_id


def _maker(store: RunStore, *turns: Any) -> Callable[[str], Agent]:
    def make_agent(conversation_id: str) -> Agent:
        return Agent(
            ScriptedModel(list(turns)),
            tools=[send_email, look_up],
            store=store,
            conversation_id=conversation_id,
            on_owner_lost="resume",
        )

    return make_agent


def test_a_model_call_cut_by_the_crash_is_made_again(make_store: Callable[[], RunStore]) -> None:
    store = make_store()
    run_id = _lost(
        store, [{"role": "user", "content": [{"text": "hi"}]}], next_step="model", cycle=0
    )
    assert store.recover(_maker(store, "hello again")) == [run_id]
    join_recovered(run_id)
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "done" and snapshot.cycle == 1
    history = list(store.load("c1").messages)
    assert validate_history(history) == []
    assert history[-1] == {"role": "assistant", "content": [{"text": "hello again"}]}


def test_calls_in_flight_are_rerun_if_idempotent_else_answered_effect_unknown(
    make_store: Callable[[], RunStore],
) -> None:
    store = make_store()
    committed = {"toolUseId": "t3", "status": "success", "content": [{"text": "sent to carol"}]}
    run_id = _lost(
        store,
        [
            {"role": "user", "content": [{"text": "do it all"}]},
            {
                "role": "assistant",
                "content": [
                    _use("t1", "send_email", to="alice"),
                    _use("t2", "look_up", key="k"),
                    _use("t3", "send_email", to="carol"),
                ],
            },
        ],
        next_step="tools",
        cycle=1,
        round_results=[committed],  # finished and committed before the crash
    )
    assert store.recover(_maker(store, "all done")) == [run_id]
    join_recovered(run_id)
    assert ran == ["look_up k"]  # only the idempotent call in flight ran again
    history = list(store.load("c1").messages)
    assert validate_history(history) == []
    results = {b["toolResult"]["toolUseId"]: b["toolResult"] for b in history[2]["content"]}
    assert WORKER_STOPPED_TEXT in str(results["t1"]) and results["t1"]["status"] == "error"
    assert results["t2"]["content"] == [{"text": "value of k"}]
    assert results["t3"] == committed
    assert history[-1]["content"] == [{"text": "all done"}]


def test_recover_takes_nothing_twice_and_checks_its_arguments(
    make_store: Callable[[], RunStore],
) -> None:
    store = make_store()
    with pytest.raises(UsageError, match="limit"):
        store.recover(_maker(store), limit=0)
    assert store.recover(_maker(store)) == []  # nothing lost
    run_id = _lost(
        store, [{"role": "user", "content": [{"text": "hi"}]}], next_step="model", cycle=0
    )
    assert store.recover(_maker(store, "once")) == [run_id]
    assert store.recover(_maker(store, "twice")) == []  # taken: no longer lost
    join_recovered(run_id)
    assert "twice" not in str(store.load("c1").messages)


def test_a_resumable_run_commits_what_it_tells_before_it_tells_it(
    make_store: Callable[[], RunStore],
) -> None:
    """What a follower saw is what a recoverer goes on from: when a tool's ``ToolEnd`` or
    a model call's message reaches the stream, the store has it."""
    store = make_store()
    calls = [
        {"name": "send_email", "input": {"to": "x"}},
        {"name": "look_up", "input": {"key": "k"}},
    ]
    agent = Agent(
        ScriptedModel([{"tool_calls": calls}, "done"]),
        tools=[send_email, look_up],
        store=store,
        conversation_id="c1",
        on_owner_lost="resume",
    )
    checked = 0
    for event in agent.stream("go"):
        record = store.load("c1").run
        if event.type == "tool_end":
            assert record is not None
            committed = {r["toolUseId"]: r for r in record.state.round_results}
            assert committed[event.tool_use["toolUseId"]] == event.result
            checked += 1
        elif event.type == "message" and event.message["role"] == "assistant":
            assert record is not None and record.state.messages[-1] == event.message
            checked += 1
    assert checked == 4  # two messages, two results
    finished = store.load("c1")
    assert finished.run is None and validate_history(list(finished.messages)) == []


def test_a_recovered_runs_event_log_goes_on_after_the_dead_workers_records(
    make_store: Callable[[], RunStore],
) -> None:
    store = make_store()
    log = events_of(store)
    run_id = _lost(
        store,
        [
            {"role": "user", "content": [{"text": "go"}]},
            {
                "role": "assistant",
                "content": [_use("t1", "send_email", to="a"), _use("t2", "look_up", key="k")],
            },
        ],
        next_step="tools",
        cycle=1,
    )
    dead_worker = [  # what its publisher appended before it died: both calls started
        {"type": "run", "run_id": run_id, "conversation_id": "c1"},
        {"type": "text", "text": "let me"},
        {"type": "step", "cycle": 1, "tool_calls": []},
        {"type": "tool_start", "id": "t1", "name": "send_email", "input": {"to": "a"}},
        {"type": "tool_start", "id": "t2", "name": "look_up", "input": {"key": "k"}},
    ]
    log.append_events(run_id, dead_worker, after=0)
    keep_recovering(store, _maker(store, "finished"))
    try:
        events = log.read_events(run_id)
        while events[-1].data["type"] not in ("done", "error"):
            events += log.read_events(run_id, after=events[-1].seq, timeout=5)
    finally:
        stop_recovering(store)
    join_recovered(run_id)
    records = [e.data for e in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [r["type"] for r in records]
    assert kinds[:5] == ["run", "text", "step", "tool_start", "tool_start"]
    assert kinds[5] == "resumed" and kinds.count("tool_start") == 2  # t2 not announced twice
    ends = {r["id"]: r for r in records if r["type"] == "tool_end"}
    assert set(ends) == {"t1", "t2"}
    assert ends["t1"]["status"] == "error" and ends["t2"]["status"] == "success"
    assert kinds[-1] == "done" and records[-1]["text"] == "finished"
    assert ran == ["look_up k"]
    assert validate_history(list(store.load("c1").messages)) == []


def test_settings_are_checked() -> None:
    with pytest.raises(UsageError, match="on_owner_lost"):
        Agent(ScriptedModel([]), on_owner_lost="retry")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="idempotent"):
        tool(idempotent="yes", name="x")(lambda: "x")  # type: ignore[arg-type, call-overload]
    assert look_up.idempotent is True and send_email.idempotent is False


def test_a_web_worker_that_served_no_resumable_run_takes_lost_runs_over(
    make_store: Callable[[], RunStore],
) -> None:
    """A worker started after the crash: its first request of any kind (here the history)
    makes it a recoverer once the store has a lost run."""
    flask = pytest.importorskip("flask")
    from agent_sync.web.flask import chat_blueprint

    store = make_store()
    run_id = _lost(store, [_user("hi")], next_step="model", cycle=0)
    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(_maker(store, "taken over"), store=store), url_prefix="/api"
    )
    try:
        assert app.test_client().get("/api/history?conversation_id=other").status_code == 200
        snapshot = store.get(run_id)
        pause = threading.Event()
        while snapshot is not None and snapshot.status == "running":  # taken over, going on
            pause.wait(0.01)
            snapshot = store.get(run_id)
    finally:
        stop_recovering(store)
    join_recovered(run_id)
    assert snapshot is not None and snapshot.status == "done"
    assert "taken over" in str(store.load("c1").messages[-1])


def test_a_lost_run_that_cannot_be_taken_over_is_tried_again_later_not_at_every_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A make_agent that raises (or a store that is down) is said once per RETRY_S, not
    twice a second for as long as the run stays lost."""
    from agent_sync.stores._recovery import _Poll, _Recoverer

    store = MemoryRunStore()
    _lost(store, [_user("hi")], next_step="model", cycle=0)
    built: list[str] = []

    def broken(conversation_id: str) -> Agent:
        built.append(conversation_id)
        raise RuntimeError("no model configured")

    poll = _Poll(store, _Recoverer(broken))
    for _ in range(3):  # three polls in a row, each one's take awaited
        poll()
        for thread in threading.enumerate():
            if thread.name.startswith("agent-sync-recover-"):
                thread.join(10)
    assert built == ["c1"]
    assert caplog.text.count("could not be taken over") == 1
    assert store.lost_runs()  # still lost: another worker, or a later try, may take it


class _Slots:
    """A worker's live-run slots (the routes' ``RunSlots``), counting the free ones."""

    def __init__(self, count: int) -> None:
        self.free = count
        self._lock = threading.Lock()

    def take(self) -> _Slots | None:
        with self._lock:
            if self.free == 0:
                return None
            self.free -= 1
            return self

    def give(self) -> None:
        with self._lock:
            self.free += 1


class _LogDown(MemoryRunStore):
    """A store whose event log refuses every append once ``down`` is set."""

    down = False

    def append_events(self, run_id: str, records: Any, **kwargs: Any) -> int:
        if self.down:
            raise StoreUnavailableError("the event log is down")
        return super().append_events(run_id, records, **kwargs)


@pytest.mark.parametrize("failure", ["log_down", "unreadable_log"])
def test_a_recovered_run_whose_log_cannot_go_on_gives_its_live_run_slot_back(
    failure: str,
) -> None:
    """Whatever raises between taking a slot and the publisher owning it gives it back,
    and the run it claimed ends (cancelled, stored) instead of staying started here."""
    from agent_sync.stores._recovery import _Recoverer, _take_over

    store = _LogDown()
    run_id = _lost(store, [_user("hi")], next_step="model", cycle=0)
    step = {"type": "step", "cycle": "not a number", "tool_calls": []}
    dead_worker = [{"type": "run", "run_id": run_id, "conversation_id": "c1"}]
    store.append_events(
        run_id, dead_worker + ([step] if failure == "unreadable_log" else []), after=0
    )
    store.down = failure == "log_down"
    slots = _Slots(1)
    _take_over(store, _Recoverer(_maker(store, "never said"), slots=slots), store.lost_runs()[0])
    join_recovered(run_id)
    assert slots.free == 1
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "cancelled"
    assert validate_history(list(store.load("c1").messages)) == []
