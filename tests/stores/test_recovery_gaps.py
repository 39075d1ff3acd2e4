"""The recovery gaps of issue 29, with real worker processes SIGKILLed:

* an inject the dying worker had taken (its watcher handed it to the run) but not committed
  reaches the recovered run: a signal is acknowledged at the commit that consumes it;
* an approved idempotent gated call cut by the crash runs again with its approval, never
  asked again: decisions are kept in the run's state until the call's result is.

Children are spawned and report through a queue; nothing waits on timing but the lease,
which is what is tested (``wait_until_lost``).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_sync import (
    Agent,
    Approve,
    Deny,
    RunState,
    ToolContext,
    UsageLimits,
    tool,
    validate_history,
)
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.processes import child_context
from tests.fixtures.recovered import join_recovered, wait_until_lost
from tests.stores.test_processes import Spec, open_store

pytestmark = pytest.mark.timeout(120)

# The dying worker's lease: what the parent waits out after the kill. Short, and safe so: a
# worker descheduled past it before its kill only lets the run look lost for a moment (its
# next renewal and commits are its owner's, accepted), and nothing recovers before the kill.
LEASE_S = 0.25
INJECTED = "and one more thing"
USED = {"inputTokens": 30, "outputTokens": 5}


def _log_call(name: str, argument: str) -> None:
    with open(os.environ["TOOL_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{name} {argument} {os.getpid()}\n")


def _block_in_dying_worker(context: ToolContext) -> None:
    """In the dying worker ($BLOCK_TOOLS): say the call started, then block (until killed)."""
    if os.environ.get("BLOCK_TOOLS"):
        Path(os.environ["TOOL_STARTED"]).write_text("started")
        context.wait(60)


@tool(idempotent=True)
def look_up(context: ToolContext) -> str:
    """Look something up (idempotent)."""
    _log_call("look_up", "-")
    _block_in_dying_worker(context)
    return f"looked up in {os.getpid()}"


@tool(requires_approval=True, idempotent=True)
def archive(path: str, context: ToolContext) -> str:
    """Archive a path (gated, idempotent).

    Args:
        path: The path.
    """
    _log_call("archive", path)
    _block_in_dying_worker(context)
    return f"archived {path} in {os.getpid()}"


@tool(requires_approval=True)
def purge(path: str) -> str:
    """Purge a path (gated, not idempotent).

    Args:
        path: The path.
    """
    _log_call("purge", path)
    return f"purged {path}"


@tool
def count() -> str:
    """Count one (not idempotent, fast)."""
    _log_call("count", "-")
    return "counted"


TOOLS = [look_up, archive, purge, count]
LIMITS = UsageLimits(tool_calls=1)
SILENT = {"text": "thinking", "chunk_size": 1, "stall_after": 1}  # blocks until killed


def _agent(store: RunStore, turns: list[Any], **options: Any) -> Agent:
    return Agent(
        ScriptedModel(turns),
        tools=TOOLS,
        store=store,
        conversation_id="c1",
        lease_s=LEASE_S,
        on_owner_lost="resume",
        **options,
    )


class _ReportsAtSecondCall:
    """Puts the run id on ``ready`` at the run's second model call (the first call's
    round is committed by then)."""

    def __init__(self, ready: Any) -> None:
        self._ready, self._calls = ready, 0

    def before_model_call(self, event: Any) -> None:
        self._calls += 1
        if self._calls == 2:
            self._ready.put(event.run_id)


def _wait_for(check: Any) -> None:
    pause = threading.Event()
    while not check():
        pause.wait(0.001)


def dying_worker(spec: Spec, case: str, ready: Any, folder: str) -> None:
    """Conversation c1's worker, killed by the test once it reported ``ready``:
    ``inject``: while an idempotent call blocks, after its watcher handed the run an
    inject (the run's queued input shows it); ``approved``: while the approved gated call
    blocks, after the resume."""
    os.environ["BLOCK_TOOLS"] = "1"
    os.environ["TOOL_LOG"] = os.path.join(folder, "tools.log")
    started = os.environ["TOOL_STARTED"] = os.path.join(folder, "tool-started")
    store = open_store(spec)

    def report() -> None:
        _wait_for(lambda: os.path.exists(started))
        run = agent.active_run
        assert run is not None
        ready.put(run.run_id)
        if case == "inject":
            _wait_for(lambda: run.snapshot().queued_inputs)  # taken from the store
            ready.put("taken")

    if case == "limited":  # killed in its second model call, one tool call made
        turns = [{"tool_calls": [{"name": "count", "input": {}}], "usage": USED}, SILENT]
        hooks = [_ReportsAtSecondCall(ready)]
        _agent(store, turns, usage_limits=LIMITS, hooks=hooks).invoke("go")
        return
    if case == "asking":  # killed just after the checkpoint naming the approval step
        commit = store.commit

        def commit_then_stop(state: RunState, **kwargs: Any) -> int:
            version = commit(state, **kwargs)
            if state.next_step == "approval":
                ready.put(state.run_id)
                threading.Event().wait(60)  # the pause is never committed: killed here
            return version

        store.commit = commit_then_stop  # type: ignore[method-assign]
        _agent(store, [{"tool_calls": [{"name": "purge", "input": {"path": "all"}}]}]).invoke("go")
        return
    if case == "inject":
        agent = _agent(store, [{"tool_calls": [{"name": "look_up", "input": {}}]}])
        threading.Thread(target=report, daemon=True).start()
        agent.invoke("go")
        return
    call = {"name": "archive", "input": {"path": "asked.txt"}}
    agent = _agent(store, [{"tool_calls": [call]}])
    (request,) = agent.invoke("archive it").approvals
    threading.Thread(target=report, daemon=True).start()
    agent.resume({request.id: Approve(input={"path": "approved.txt"})})


def _crash(spec: Spec, case: str, folder: Path) -> str:
    """Start the dying worker, let it reach its point, SIGKILL it and let its lease run
    out; the lost run's id."""
    context = child_context()
    ready = context.Queue()
    worker = context.Process(target=dying_worker, args=(spec, case, ready, str(folder)))
    worker.start()
    try:
        run_id: str = ready.get(timeout=60)
        if case == "inject":
            open_store(spec).inject(run_id, INJECTED)
            assert ready.get(timeout=60) == "taken"  # the dying worker has it, uncommitted
    finally:
        os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
        worker.join(30)
    wait_until_lost(open_store(spec), run_id)
    return run_id


def _calls(folder: Path) -> list[str]:
    path = folder / "tools.log"
    return path.read_text().splitlines() if path.exists() else []


def test_an_inject_the_dying_worker_took_reaches_the_recovered_run(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _crash(spec, "inject", tmp_path)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    # one model call answers the input if it went out with the tool's result, two if it
    # came after (queued input is answered at the end of the turn): both are right
    recovered = ["answered after the crash", "answered after the crash"]
    assert store.recover(lambda cid: _agent(store, list(recovered))) == [run_id]
    join_recovered(run_id)
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "done"
    history = list(store.load("c1").messages)
    assert validate_history(history) == []
    asked = [m for m in history if m["role"] == "user" and {"text": INJECTED} in m["content"]]
    assert len(asked) == 1, history  # answered once: neither lost nor doubled
    assert history[-1]["content"] == [{"text": "answered after the crash"}]


@pytest.mark.parametrize("spec", ["sqlite"], indirect=True)  # the rule is the run's state's
def test_an_approved_gated_call_cut_by_a_crash_is_not_asked_again(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _crash(spec, "approved", tmp_path)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    assert store.recover(lambda cid: _agent(store, ["archived after the crash"])) == [run_id]
    join_recovered(run_id)
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.status == "done"  # not paused: not asked again
    history = list(store.load("c1").messages)
    assert validate_history(history) == []
    assert f"archived approved.txt in {os.getpid()}" in str(history)  # the approved input
    assert [call.split()[:2] for call in _calls(tmp_path)] == [["archive", "approved.txt"]] * 2


@pytest.mark.parametrize("spec", ["sqlite"], indirect=True)  # the rule is the run's state's
def test_a_run_lost_as_it_went_to_ask_asks_again(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker died after committing ``next_step="approval"`` and before its pause: the
    approval requests live only in the pause, so the recovered run asks for the gated call
    again (it paused with none, and no decision could ever resume it)."""
    run_id = _crash(spec, "asking", tmp_path)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    assert store.recover(lambda cid: _agent(store, ["purged after the crash"])) == [run_id]
    join_recovered(run_id)
    record = store.load("c1")
    assert record.run is not None and record.run.state.status == "paused"
    (request,) = record.run.state.approvals
    assert request.tool_use["name"] == "purge" and _calls(tmp_path) == []
    assert _agent(store, ["purged after the crash"]).resume({request.id: True}).text == (
        "purged after the crash"
    )
    assert [call.split()[:2] for call in _calls(tmp_path)] == [["purge", "all"]]
    assert validate_history(list(store.load("c1").messages)) == []


@pytest.mark.parametrize("spec", ["sqlite"], indirect=True)  # the rule is the run's state's
def test_usage_limits_hold_across_a_recovery(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts a limit is checked against go on from the dead worker's: its one tool
    call counts against ``tool_calls=1``, so the recovered run's batch does not start; the
    stored end names the limit, as the live one does."""
    from agent_sync._run_log._records import closing_record

    run_id = _crash(spec, "limited", tmp_path)
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = open_store(spec)
    turns = [{"tool_calls": [{"name": "count", "input": {}}], "usage": USED}, "over the limit"]
    assert store.recover(lambda cid: _agent(store, turns, usage_limits=LIMITS)) == [run_id]
    join_recovered(run_id)
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.stop_reason == "usage_limit"
    assert [call.split()[0] for call in _calls(tmp_path)] == ["count"]  # not run again
    assert snapshot.usage["inputTokens"] == 2 * USED["inputTokens"]  # both workers' calls
    record = closing_record(snapshot)  # what a follower that missed the end is told
    assert (record["stop_reason"], record.get("usage_limit")) == ("usage_limit", "tool_calls")
    assert validate_history(list(store.load("c1").messages)) == []


def test_a_kept_decision_answers_its_own_call_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost run whose state kept the decision of one gated idempotent call (``t1``) and
    none for another (``t2``): the recovered run asks for ``t2`` only (its paused state keeps
    ``t1``'s), and runs ``t1`` with its kept decision once ``t2`` is answered."""
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = MemoryRunStore()
    asking = {
        "role": "assistant",
        "content": [
            {"toolUse": {"toolUseId": "t1", "name": "archive", "input": {"path": "a"}}},
            {"toolUse": {"toolUseId": "t2", "name": "archive", "input": {"path": "b"}}},
        ],
    }
    state = RunState(
        run_id="run_kept_decision",
        status="running",
        next_step="tools",
        cycle=1,
        messages=({"role": "user", "content": [{"text": "tidy up"}]}, asking),  # type: ignore[arg-type]
        history_start=0,
        pending_tool_uses=tuple(block["toolUse"] for block in asking["content"]),  # type: ignore[index]
        on_owner_lost="resume",
        decisions={"t1": Approve(input={"path": "kept.txt"})},
    )
    store.begin("c1", state, owner="dead", lease_s=0, expected_length=0)
    assert store.recover(lambda cid: _agent(store, ["tidied"])) == [state.run_id]
    join_recovered(state.run_id)
    record = store.load("c1")
    assert record.run is not None and record.run.state.status == "paused"
    (request,) = record.run.state.approvals
    assert request.tool_use["toolUseId"] == "t2"  # t1's decision was kept: not asked
    assert record.run.state.decisions == {"t1": Approve(input={"path": "kept.txt"})}
    assert _calls(tmp_path) == []  # nothing of the round ran before every call was answered
    assert _agent(store, ["tidied"]).resume({request.id: True}).text == "tidied"
    calls = sorted(call.split()[:2] for call in _calls(tmp_path))
    assert calls == [["archive", "b"], ["archive", "kept.txt"]]
    assert validate_history(list(store.load("c1").messages)) == []


def test_a_kept_denial_is_answered_with_its_reason_not_effect_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A denied call never ran: cut by a crash, it is answered with the reviewer's reason
    again, even for a tool that is not idempotent (not "effect unknown")."""
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tools.log"))
    store = MemoryRunStore()
    tool_use = {"toolUseId": "t1", "name": "purge", "input": {"path": "all"}}
    state = RunState(
        run_id="run_kept_denial",
        status="running",
        next_step="tools",
        cycle=1,
        messages=(
            {"role": "user", "content": [{"text": "purge it"}]},
            {"role": "assistant", "content": [{"toolUse": tool_use}]},  # type: ignore[typeddict-item]
        ),
        history_start=0,
        pending_tool_uses=(tool_use,),  # type: ignore[arg-type]
        on_owner_lost="resume",
        decisions={"t1": Deny("not everything")},
    )
    store.begin("c1", state, owner="dead", lease_s=0, expected_length=0)
    assert store.recover(lambda cid: _agent(store, ["left it"])) == [state.run_id]
    join_recovered(state.run_id)
    history = list(store.load("c1").messages)
    assert validate_history(history) == [] and _calls(tmp_path) == []
    (result,) = [b["toolResult"] for b in history[2]["content"] if "toolResult" in b]
    assert result["status"] == "error" and "not everything" in str(result["content"])
    assert "effect unknown" not in str(history)
