"""Agents on a store: one history for every worker, one run at a time per conversation,
cancel, inject and resume from anywhere. Workers here are agents in other threads sharing
one MemoryRunStore; the SQLite and Redis tests repeat the cross-process parts with real
processes."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent_sync import Agent, Approve, UsageError, tool, validate_history
from agent_sync.errors import (
    ConcurrentInvocationError,
    ModelError,
    PendingApprovalError,
    RunConflictError,
)
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke, texts
from tests.run._gates import Gate, gate_call


def _agent(store: RunStore, *turns: Any, tools: list[Any] | None = None, **kw: Any) -> Agent:
    return Agent(
        ScriptedModel(list(turns)), tools=tools or [], store=store, conversation_id="c1", **kw
    )


def test_every_worker_sees_and_extends_the_same_history() -> None:
    store = MemoryRunStore()
    first = _agent(store, "hello from A", "A again")
    first.invoke("one")
    second = _agent(store, "hello from B")
    assert [texts(m) for m in second.messages] == [["one"], ["hello from A"]]
    second.invoke("two")
    first.invoke("three")  # refreshed from the store before it runs
    assert [texts(m)[0] for m in first.messages] == [
        "one",
        "hello from A",
        "two",
        "hello from B",
        "three",
        "A again",
    ]
    assert list(store.load("c1").messages) == first.messages
    assert validate_history(first.messages) == []


def test_a_second_worker_is_refused_at_once_and_changes_nothing() -> None:
    store = MemoryRunStore()
    gate = Gate()
    busy = _agent(store, {"tool_calls": [gate_call()]}, "done", tools=[gate.tool])
    call = BackgroundInvoke(busy)
    assert gate.entered.wait(10)
    other_model = ScriptedModel(["never"])
    other = Agent(other_model, store=store, conversation_id="c1")
    with pytest.raises(ConcurrentInvocationError):
        other.invoke("me too")
    assert other_model.calls == [] and other.messages == []
    gate.opened.set()
    assert call.result().stop_reason == "end_turn"
    assert other.invoke is not None and len(store.load("c1").messages) == 4


def test_cancel_and_inject_through_the_store_reach_the_owner() -> None:
    store = MemoryRunStore()
    gate = Gate(cooperative=True)
    owner = _agent(store, {"tool_calls": [gate_call()]}, "never", tools=[gate.tool])
    call = BackgroundInvoke(owner)
    assert gate.entered.wait(10)
    run = owner.active_run
    assert run is not None
    snap = store.get(run.run_id)
    assert snap is not None and snap.status == "running"
    assert (snap.conversation_id, snap.stop_reason, snap.cancel_reason) == ("c1", None, None)
    live = run.snapshot()
    assert (live.conversation_id, live.stop_reason) == ("c1", None)
    store.inject(run.run_id, "from another worker")
    assert store.cancel(run.run_id, "stopped elsewhere") is True
    result = call.result()
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "stopped elsewhere")
    logged = list(store.load("c1").messages)
    assert logged == owner.messages
    assert texts(logged[-1]) == [CANCELLED_TEXT]
    assert {"text": "from another worker"} in logged[2]["content"]
    done = store.get(run.run_id)
    assert done is not None and done.status == "cancelled"
    assert (done.stop_reason, done.cancel_reason) == ("cancelled", "stopped elsewhere")
    assert run.snapshot().cancel_reason == "stopped elsewhere"
    assert validate_history(logged) == []


def test_a_model_error_leaves_the_stored_history_ending_with_the_prompt() -> None:
    store = MemoryRunStore()
    agent = _agent(store, {"error": ModelError("down")}, "recovered")
    with pytest.raises(ModelError):
        agent.invoke("try")
    assert [m["role"] for m in store.load("c1").messages] == ["user"]
    assert agent.invoke().text == "recovered"  # no prompt: answer the stored one
    assert len(store.load("c1").messages) == 2


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return f"wiped {path}"


ASKS = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}


def test_a_paused_run_is_resumed_by_another_worker_once() -> None:
    store = MemoryRunStore()
    first = _agent(store, ASKS, "wiped", tools=[wipe])
    paused = first.invoke("wipe it")
    assert paused.stop_reason == "paused"
    second = _agent(store, "wiped it", tools=[wipe])
    assert second.is_paused and second.pending_approvals == paused.approvals
    with pytest.raises(PendingApprovalError):
        second.invoke("something else")
    result = second.resume({paused.approvals[0].id: Approve()})
    assert result.run_id == paused.run_id and result.text == "wiped it"
    with pytest.raises(RunConflictError):
        first.resume({paused.approvals[0].id: True})
    assert validate_history(list(store.load("c1").messages)) == []


def test_cancel_while_paused_from_another_worker() -> None:
    store = MemoryRunStore()
    first = _agent(store, ASKS, "next", tools=[wipe])
    first.invoke("wipe it")
    other = _agent(store, tools=[wipe])
    assert other.cancel() is True
    assert other.cancel() is False
    logged = list(store.load("c1").messages)
    assert texts(logged[-1]) == [CANCELLED_TEXT] and validate_history(logged) == []
    assert first.invoke("go on").text == "next"


def test_a_store_needs_a_conversation_and_owns_the_history() -> None:
    store = MemoryRunStore()
    with pytest.raises(UsageError, match="conversation_id"):
        Agent(ScriptedModel(["x"]), store=store)
    with pytest.raises(UsageError, match="messages"):
        Agent(
            ScriptedModel(["x"]),
            store=store,
            conversation_id="c1",
            messages=[{"role": "user", "content": [{"text": "hi"}]}],
        )
    with pytest.raises(UsageError, match="conversation_id"):
        Agent(ScriptedModel(["x"]), conversation_id="  ")


def test_a_run_reports_its_conversation() -> None:
    store = MemoryRunStore()
    agent = _agent(store, "hi")
    with agent.stream("hello") as stream:
        list(stream)
    assert stream.run.state.conversation_id == "c1"


def test_an_expired_request_is_denied_in_whichever_worker_resumes(tmp_path: Any) -> None:
    from agent_sync.run._approvals import EXPIRED_REASON
    from agent_sync.stores import SQLiteRunStore
    from agent_sync.testing.run_store_contract import _wait_past

    store = SQLiteRunStore(tmp_path / "s.db")
    first = _agent(store, ASKS, tools=[wipe], approval_timeout=0.2)
    paused = first.invoke("wipe it")
    (request,) = paused.approvals
    assert request.expires_at is not None
    _wait_past(request.expires_at)  # the timeout is what is tested
    second = _agent(store, "not wiped", tools=[wipe])
    assert second.pending_approvals == paused.approvals  # expires_at is stored with it
    with pytest.raises(PendingApprovalError):
        second.invoke("something else")  # still paused until someone answers
    result = second.resume({})  # every request expired: nothing left to decide
    assert result.text == "not wiped" and result.run_id == paused.run_id
    logged = list(store.load("c1").messages)
    assert EXPIRED_REASON in str(logged[2]) and validate_history(logged) == []


def test_an_idle_agent_cancels_the_conversations_run_in_another_worker() -> None:
    """The Stop button: a worker that runs nothing cancels the conversation's run."""
    store = MemoryRunStore()
    gate = Gate(cooperative=True)
    owner = _agent(store, {"tool_calls": [gate_call()]}, "never", tools=[gate.tool])
    call = BackgroundInvoke(owner)
    assert gate.entered.wait(10)
    other = _agent(store)
    assert other.cancel("pressed stop") is True
    result = call.result()
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "pressed stop")
    assert other.cancel() is False  # nothing left to cancel
    assert list(store.load("c1").messages) == owner.messages


class _CountingStore(MemoryRunStore):
    """Records how many log messages each load returned."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[int] = []

    def load(self, conversation_id: str, *, since: int = 0) -> Any:
        record = super().load(conversation_id, since=since)
        self.read.append(len(record.messages))
        return record


def test_a_worker_reads_only_what_it_does_not_hold_and_sees_every_change() -> None:
    store = _CountingStore()
    first = _agent(store, *[f"answer {n}" for n in range(20)], "after the error")
    for n in range(20):
        first.invoke(f"question {n}")
    other = _agent(store, {"error": ModelError("down")})
    with pytest.raises(ModelError):
        other.invoke("from another worker")  # the log now ends with that user message
    store.read.clear()
    first.invoke("and mine")  # extends that trailing user message: it is re-read
    assert max(store.read) <= 2, store.read  # not the 41 messages before it
    logged = list(store.load("c1").messages)
    assert first.messages == logged and len(logged) == 42
    assert texts(logged[40]) == ["from another worker", "and mine"]
    assert validate_history(logged) == []


def test_an_after_turn_cancel_from_another_worker_lets_the_tool_finish() -> None:
    store = MemoryRunStore()
    gate = Gate(cooperative=True)
    owner = _agent(store, {"tool_calls": [gate_call()]}, "never", tools=[gate.tool])
    call = BackgroundInvoke(owner)
    assert gate.entered.wait(10)
    run = owner.active_run
    assert run is not None
    assert _agent(store).cancel("after this", mode="after_turn") is True
    store.inject(run.run_id, "marker")  # signals arrive in order: once it is queued, the
    # cancel has arrived too
    arrived = threading.Event()
    while not run.snapshot().queued_inputs:
        assert not arrived.wait(0.005) and call.thread.is_alive()
    gate.opened.set()  # the tool finishes its work: an after-turn cancel does not tell it
    result = call.result()
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "after this")
    logged = list(store.load("c1").messages)
    assert "gate result" in str(logged[2])  # its real result, kept
    assert validate_history(logged) == [] and gate.calls == 1
