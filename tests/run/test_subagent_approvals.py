"""Approvals across the sub-agent boundary: a gated tool in a grandchild pauses every
level; the lead's ``result.approvals`` carry the grandchild's requests (with its run id);
the lead's ``resume`` resumes the child, which resumes the grandchild, then the lead goes
on: in one process without a store, and across processes with SQLite and Redis. A cancel
while paused cancels the paused children too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, Deny, tool, validate_history
from agent_sync.errors import DecisionValidationError
from agent_sync.events import ApprovalRequired, SubAgentEvent
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.processes import child_context
from tests.stores.test_processes import Spec, open_store

pytestmark = pytest.mark.timeout(120)

RESEARCH = {
    "tool_calls": [
        {"name": "research", "input": {"prompt": "dig"}},
        {"name": "note", "input": {}},
    ]
}
DEEP = {"tool_calls": [{"name": "deep", "input": {"prompt": "deeper"}}]}
WIPE = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}


def _log(what: str) -> None:
    with open(os.environ["SUBAGENT_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{what} {os.getpid()}\n")


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    _log("wipe")
    return f"wiped {path}"


@tool
def note() -> str:
    """Take a note (runs next to the sub-agent, in the lead's round)."""
    _log("note")
    return "noted"


def lead(store: RunStore | None = None, answer: str = "dug", *, resuming: bool = False) -> Agent:
    """boss -> research (researcher) -> deep (digger, with the gated wipe); boss also has
    ``note``, which runs in the same round as ``research``. ``resuming``: the models'
    scripts start after the pause (another process resumes the tree)."""
    skip = 1 if resuming else 0
    digger = Agent(ScriptedModel([WIPE, answer][skip:]), tools=[wipe])
    researcher = Agent(
        ScriptedModel([DEEP, "found"][skip:]),
        tools=[digger.as_tool(name="deep", description="Dig")],
    )
    return Agent(
        ScriptedModel([RESEARCH, "done"][skip:]),
        tools=[researcher.as_tool(name="research", description="Research"), note],
        store=store,
        conversation_id="lead" if store is not None else None,
    )


@pytest.fixture(autouse=True)
def _logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "log.txt"
    path.write_text("")
    monkeypatch.setenv("SUBAGENT_LOG", str(path))
    return path


def _ran(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()]


def _results(agent: Agent) -> list[tuple[str, list[Any]]]:
    return [
        (block["toolResult"]["status"], block["toolResult"]["content"])
        for message in agent.messages
        for block in message["content"]
        if "toolResult" in block
    ]


def test_a_grandchild_approval_pauses_every_level_and_resume_goes_on(_logged: Path) -> None:
    boss = lead()
    events = list(boss.stream("go"))
    paused = events[-1].result
    assert paused.stop_reason == "paused" and boss.is_paused
    (request,) = paused.approvals
    assert request.tool_use["name"] == "wipe" and request.tool_use["input"] == {"path": "/data"}
    # the request is the grandchild's: its run id, two levels down
    grandchild_runs = {
        e.event.run_id
        for e in events
        if isinstance(e, SubAgentEvent) and isinstance(e.event, SubAgentEvent)
    }
    assert grandchild_runs == {request.run_id} and request.run_id != paused.run_id
    (announced,) = [e for e in events if isinstance(e, ApprovalRequired)]
    assert announced.approvals == paused.approvals and announced.run_id == paused.run_id
    assert _ran(_logged) == ["note"]  # the sibling ran; the gated call did not
    assert boss.pending_approvals == paused.approvals
    result = boss.resume({request.id: True})
    assert result.stop_reason == "end_turn" and result.text == "done"
    assert result.run_id == paused.run_id  # the same run goes on
    assert _ran(_logged) == ["note", "wipe"]  # each ran once
    assert _results(boss) == [("success", [{"text": "found"}]), ("success", [{"text": "noted"}])]
    assert validate_history(boss.messages) == []


def test_a_denied_grandchild_call_gets_the_reason(_logged: Path) -> None:
    boss = lead(answer="could not wipe")
    (request,) = boss.invoke("go").approvals
    events = list(boss.resume_stream({request.id: Deny("not today")}))
    assert events[-1].result.text == "done" and _ran(_logged) == ["note"]
    denied = [
        e.event.event.message
        for e in events
        if isinstance(e, SubAgentEvent)
        and isinstance(e.event, SubAgentEvent)
        and e.event.event.type == "message"
        and e.event.event.message["role"] == "user"
    ]
    assert "not today" in str(denied)


def test_decisions_are_checked_before_anything_resumes(_logged: Path) -> None:
    boss = lead()
    (request,) = boss.invoke("go").approvals
    with pytest.raises(DecisionValidationError):
        boss.resume({})  # no decision for the grandchild's request
    with pytest.raises(DecisionValidationError):
        boss.resume({request.id: True, "apr_unknown": True})
    assert boss.is_paused and _ran(_logged) == ["note"]
    assert boss.resume({request.id: True}).text == "done"


@pytest.mark.parametrize("with_store", [False, True])
def test_cancel_while_paused_cancels_the_paused_children(with_store: bool, _logged: Path) -> None:
    store = MemoryRunStore() if with_store else None
    boss = lead(store)
    paused = boss.invoke("go")
    (request,) = paused.approvals
    assert boss.cancel("never mind") is True
    assert not boss.is_paused and _ran(_logged) == ["note"]
    # the finished sibling keeps its real result; the sub-agent's call is cancelled
    assert _results(boss) == [
        ("error", [{"text": CANCELLED_TEXT}]),
        ("success", [{"text": "noted"}]),
    ]
    assert validate_history(boss.messages) == []
    if store is not None:
        grandchild = store.get(request.run_id)
        assert grandchild is not None and grandchild.status == "cancelled"
        assert grandchild.parent_run_id is not None
        child = store.get(grandchild.parent_run_id)
        assert child is not None and child.status == "cancelled"
        assert child.parent_run_id == paused.run_id
        for snapshot in (child, grandchild):
            assert snapshot.conversation_id is not None
            logged = list(store.load(snapshot.conversation_id).messages)
            assert (
                validate_history(logged) == [] and store.load(snapshot.conversation_id).run is None
            )
    else:
        from agent_sync.run import _subruns

        assert _subruns.held(boss) == []  # nothing left held
    assert boss.invoke("again").stop_reason in ("end_turn", "max_cycles")


# -- across processes --


def pause_in_a_worker(spec_: Spec, log: str, out: Any) -> None:
    """A worker process: the lead pauses on the grandchild's request, and the process ends."""
    os.environ["SUBAGENT_LOG"] = log
    result = lead(open_store(spec_)).invoke("go")
    out.put((result.stop_reason, [(r.id, r.run_id) for r in result.approvals]))


def test_a_tree_paused_in_one_process_is_resumed_in_another(
    spec: Spec,  # noqa: F811 - the fixture
    _logged: Path,
) -> None:
    context = child_context()
    out = context.Queue()
    worker = context.Process(target=pause_in_a_worker, args=(spec, str(_logged), out))
    worker.start()
    stop_reason, requests = out.get(timeout=60)
    worker.join(30)
    assert stop_reason == "paused" and len(requests) == 1
    ((request_id, grandchild_run),) = requests
    store = open_store(spec)
    assert store.get(grandchild_run).status == "paused"  # type: ignore[union-attr]
    boss = lead(store, resuming=True)  # this process: loads the paused lead from the store
    assert boss.is_paused and [r.id for r in boss.pending_approvals] == [request_id]
    result = boss.resume({request_id: True})
    assert result.text == "done"
    ran = _logged.read_text().split()
    assert ran[0::2] == ["note", "wipe"] and ran[1] != ran[3]  # once each, in two processes
    assert ran[3] == str(os.getpid())
    grandchild = store.get(grandchild_run)
    assert grandchild is not None and grandchild.status == "done"
    assert grandchild.conversation_id is not None
    logged = list(store.load(grandchild.conversation_id).messages)
    assert validate_history(logged) == [] and logged[-1]["content"] == [{"text": "dug"}]
    assert validate_history(list(store.load("lead").messages)) == []


def test_store_cancel_of_a_paused_lead_cancels_its_paused_children(
    spec: Spec,  # noqa: F811 - the fixture
) -> None:
    store = open_store(spec)
    paused = lead(store).invoke("go")
    (request,) = paused.approvals
    assert open_store(spec).cancel(paused.run_id, "from afar") is True
    grandchild = store.get(request.run_id)
    assert grandchild is not None and grandchild.status == "cancelled"
    assert grandchild.cancel_reason == "from afar"
    boss = lead(store)
    assert not boss.is_paused and validate_history(boss.messages) == []


def test_the_lead_usage_counts_every_model_call_once_across_a_pause() -> None:
    usage = {"inputTokens": 10, "outputTokens": 1}

    def turns(*specs: Any) -> ScriptedModel:
        return ScriptedModel([{**turn, "usage": usage} for turn in specs])

    digger = Agent(turns(WIPE, {"text": "dug"}), tools=[wipe])
    researcher = Agent(
        turns(DEEP, {"text": "found"}), tools=[digger.as_tool(name="deep", description="Dig")]
    )
    boss = Agent(
        turns(RESEARCH, {"text": "done"}),
        tools=[researcher.as_tool(name="research", description="Research"), note],
    )
    paused = boss.invoke("go")
    assert paused.usage["inputTokens"] == 30  # the lead's first call, the child's, the grandchild's
    (request,) = paused.approvals
    result = boss.resume({request.id: True})
    assert result.usage["inputTokens"] == 60 and result.usage["outputTokens"] == 6
