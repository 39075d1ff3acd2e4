"""Issue 10 item 5: a tool's context reaches its own run only, never a later one."""

from __future__ import annotations

import threading

import pytest

from agent_sync import Agent, ToolContext, tool
from agent_sync.errors import UsageError
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke, assert_valid

STUCK = {"tool_calls": [{"name": "stuck", "input": {}}]}
GATE = {"tool_calls": [{"name": "gate", "input": {}}]}


def test_an_abandoned_tool_cannot_cancel_or_reach_a_later_run() -> None:
    release = threading.Event()  # lets the abandoned tool go on, while run 2 is live
    started = threading.Event()
    late_done = threading.Event()
    in_run2 = threading.Event()
    outcome: dict[str, object] = {}
    threads: list[threading.Thread] = []

    @tool
    def stuck(context: ToolContext) -> str:
        """Ignores cancel; once released (during run 2) it tries to reach the agent."""
        threads.append(threading.current_thread())
        started.set()
        release.wait(30)
        try:
            outcome["agent.cancel"] = context.agent.cancel("late")
            outcome["context.cancel"] = context.cancel("late")
            outcome["is_running"] = context.agent.is_running
            for name in ("messages", "invoke"):
                try:
                    getattr(context.agent, name)
                    outcome[name] = "reached"
                except UsageError:
                    outcome[name] = "refused"
        finally:
            late_done.set()
        return "late"

    @tool
    def gate() -> str:
        """Run 2's tool: holds run 2 open until the abandoned tool has acted."""
        in_run2.set()
        assert late_done.wait(30)
        return "gate passed"

    model = ScriptedModel([STUCK, GATE, "run 2 done"])
    agent = Agent(model, tools=[stuck, gate], tool_grace_period=0)
    try:
        run1 = BackgroundInvoke(agent, "first")
        assert started.wait(10)
        assert agent.cancel("user")
        assert run1.result(timeout=30).stop_reason == "cancelled"  # stuck was abandoned

        run2 = BackgroundInvoke(agent, "second")
        assert in_run2.wait(10)  # run 2 is live, inside its own tool
        release.set()
        result2 = run2.result(timeout=30)
    finally:
        release.set()
        late_done.set()
        agent.cancel("test cleanup")
    for thread in threads:
        thread.join(30)
    assert result2.stop_reason == "end_turn", result2.cancel_reason
    assert result2.text == "run 2 done"
    assert outcome == {
        "agent.cancel": False,
        "context.cancel": False,
        "is_running": False,
        "messages": "refused",
        "invoke": "refused",
    }
    assert "late" not in str(agent.messages[-4:])
    assert_valid(agent)


def test_context_cancel_cancels_the_tools_own_run() -> None:
    @tool
    def stopper(context: ToolContext) -> str:
        """Decides the run should stop."""
        assert context.agent.is_running
        assert context.cancel("tool says stop") is True
        assert context.cancelled
        return "stopping"

    model = ScriptedModel([{"tool_calls": [{"name": "stopper", "input": {}}]}, "never"])
    agent = Agent(model, tools=[stopper])
    result = agent.invoke("go")
    assert result.stop_reason == "cancelled"
    assert result.cancel_reason == "tool says stop"
    assert len(model.calls) == 1
    assert_valid(agent)


def test_context_agent_reads_pass_through_and_cannot_edit_the_history() -> None:
    seen: dict[str, object] = {}

    @tool
    def reader(context: ToolContext) -> str:
        """Reads the agent while its run is live."""
        seen["model"] = context.agent.model
        history = context.agent.messages
        seen["length"] = len(history)
        history.append({"role": "user", "content": [{"text": "injected"}]})  # a copy
        with pytest.raises(UsageError):
            context.agent.messages = []
        seen["repr"] = repr(context.agent)
        return "read"

    model = ScriptedModel([{"tool_calls": [{"name": "reader", "input": {}}]}, "done"])
    agent = Agent(model, tools=[reader])
    assert agent.invoke("go").stop_reason == "end_turn"
    assert seen["model"] is model
    assert seen["length"] == 2
    assert "injected" not in str(agent.messages)
    assert "live" in str(seen["repr"])
    assert_valid(agent)
