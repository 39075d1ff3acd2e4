"""Sub-agents and threads: a lone call's child runs on its caller's thread, and the cancel
promise holds on that path (a stream closed by its reader, Ctrl-C, a caller whose grace
period is shorter than its child's).

A lone ``agent.as_tool()`` call is driven by the calling run's own thread (no hand-off
between threads when the tree ends); parallel calls and a child allowed a longer grace
period than its caller run in tool workers, as any tool. The trees are those of
tests/run/test_subagents.py; every wait is on an event, never on time.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.events import SubAgentEvent, TextDelta, ToolStart
from agent_sync.messages import CANCELLED_TEXT, StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from tests.run.test_subagents import DEEP, GRACE, RESEARCH, STATES, Tree

pytestmark = pytest.mark.timeout(120)


class ThreadSeen:
    """A scripted model that records the thread of each call."""

    def __init__(self, turns: list[Any]) -> None:
        self.inner = ScriptedModel(turns)
        self.threads: list[int] = []

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        self.threads.append(threading.get_ident())
        yield from self.inner.stream(request, cancel=cancel)


def test_a_lone_call_runs_its_child_on_the_callers_thread() -> None:
    digger_model = ThreadSeen(["dug"])
    researcher_model = ThreadSeen([DEEP, "found"])
    digger = Agent(digger_model)
    researcher = Agent(researcher_model, tools=[digger.as_tool(name="deep", description="Dig")])
    boss = Agent(
        ScriptedModel([RESEARCH, "done"]),
        tools=[researcher.as_tool(name="research", description="Research")],
    )
    assert boss.invoke("go").text == "done"
    me = threading.get_ident()
    assert researcher_model.threads == [me, me] and digger_model.threads == [me]


def _nesting(event: Any) -> tuple[int, Any]:
    depth = 0
    while isinstance(event, SubAgentEvent):
        event, depth = event.event, depth + 1
    return depth, event


@pytest.mark.parametrize("state", STATES)
def test_a_reader_closing_the_stream_in_its_own_thread_cancels_the_tree(state: str) -> None:
    """The reader stops reading in the state (it drives the lone children: they wait for
    its next read) and closes the stream: every level ends cancelled with the lead's
    reason, every history valid."""
    store = MemoryRunStore()
    tree = Tree(state, store)
    with tree.boss.stream("go") as stream:
        for event in stream:
            depth, inner = _nesting(event)
            if state == "child" and depth == 1 and isinstance(inner, TextDelta):
                break
            if state == "grandchild" and depth == 2 and isinstance(inner, TextDelta):
                break
            if state == "tool" and isinstance(inner, ToolStart) and depth == 1:
                assert tree.held.wait(30)  # the child's tool runs in a worker of the child
                break
    (lead,) = set(tree.boss_model.run_ids)
    snapshot = store.get(lead or "")
    assert snapshot is not None and snapshot.status == "cancelled"
    tree.check_after_cancel(store, snapshot.cancel_reason or "")


def test_a_child_allowed_a_longer_grace_does_not_hold_its_caller_past_its_own() -> None:
    """The lead's grace period bounds its wait for a child whose tool ignores the cancel
    (the child runs in a worker, abandoned after the lead's grace as any tool is)."""
    entered, release = threading.Event(), threading.Event()

    @tool
    def stubborn() -> str:
        """Ignores cancel: returns when the test lets it."""
        entered.set()
        release.wait(60)
        return "late"

    researcher = Agent(
        ScriptedModel([{"tool_calls": [{"name": "stubborn", "input": {}}]}, "found"]),
        tools=[stubborn],
        tool_grace_period=GRACE,
    )
    boss = Agent(
        ScriptedModel([RESEARCH, "again"]),
        tools=[researcher.as_tool(name="research", description="Research")],
        tool_grace_period=0.05,
    )
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(result=boss.invoke("go")), daemon=True)
    thread.start()
    try:
        assert entered.wait(30)
        assert boss.cancel("stop") is True
        thread.join(GRACE / 2)
        assert not thread.is_alive(), "the lead waited for its child's grace period"
        assert not release.is_set()  # the child's tool still runs: the lead did not wait
    finally:
        release.set()
    assert out["result"].stop_reason == "cancelled"
    assert validate_history(boss.messages) == []
    answer = boss.messages[2]["content"][0]["toolResult"]
    assert answer["content"] == [{"text": CANCELLED_TEXT}]


class Interrupting:
    """Streams a little text, then raises KeyboardInterrupt (Ctrl-C in a model's read)."""

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Half"}}}
        raise KeyboardInterrupt


def _check_interrupted_lead(boss: Agent) -> None:
    assert not boss.is_running
    assert validate_history(boss.messages) == []
    answer = boss.messages[2]["content"][0]["toolResult"]
    assert answer["content"] == [{"text": CANCELLED_TEXT}]
    assert boss.messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert boss.invoke("again").text == "done"


@pytest.mark.parametrize("levels", [2, 3])
def test_ctrl_c_in_a_childs_model_ends_the_tree(levels: int) -> None:
    """Ctrl-C landing in the child's code (it runs on the caller's thread) ends every
    level as it ends a single run, then propagates."""
    deepest = Agent(Interrupting())
    template = deepest
    if levels == 3:
        template = Agent(
            ScriptedModel([DEEP]),
            tools=[deepest.as_tool(name="deep", description="Dig")],
        )
    boss = Agent(
        ScriptedModel([RESEARCH, "done"]),
        tools=[template.as_tool(name="research", description="Research")],
    )
    with pytest.raises(KeyboardInterrupt):
        boss.invoke("go")
    _check_interrupted_lead(boss)


def test_ctrl_c_while_a_childs_tool_runs_tells_the_tool_and_ends_the_tree() -> None:
    """A terminal's Ctrl-C (SIGINT to the main thread, which runs the lead and its lone
    child) while the child's tool runs: the tool is told, every level ends, then the
    KeyboardInterrupt propagates."""
    assert threading.current_thread() is threading.main_thread()
    told = threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """Presses Ctrl-C, then waits cooperatively."""
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        if context.wait(30):
            told.set()
        return "stopped"

    researcher = Agent(
        ScriptedModel([{"tool_calls": [{"name": "slow", "input": {}}]}, "found"]),
        tools=[slow],
        tool_grace_period=GRACE,
    )
    boss = Agent(
        ScriptedModel([RESEARCH, "done"]),
        tools=[researcher.as_tool(name="research", description="Research")],
        tool_grace_period=GRACE,
    )
    with pytest.raises(KeyboardInterrupt):
        boss.invoke("go")
    assert told.is_set(), "the child's tool was never told about Ctrl-C"
    _check_interrupted_lead(boss)
