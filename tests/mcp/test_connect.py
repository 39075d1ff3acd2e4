"""Connecting is part of the run: a server in ``tools=`` connects under the run's cancel
scope, so ``timeout=``, ``cancel()`` and a calling run's cancel stop a connect to a server
that never answers at once (not after ``startup_timeout``), the attempt is wound down (no
process or thread left), and a Ctrl-C during the connect is a ``KeyboardInterrupt``, never
an ``MCPError``."""

from __future__ import annotations

import signal
import threading

import pytest

from agent_sync import Agent, AgentResult, validate_history
from agent_sync.mcp import MCPServer
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel
from tests.mcp._recording import TeeRecorder
from tests.mcp.test_cancel import Invoke
from tests.mcp.test_faults import gone, own

NEVER = 600.0  # startup_timeout: longer than any test may run


def mute(recorder: TeeRecorder) -> MCPServer:
    return MCPServer.stdio(recorder.wrap(own("mute")), startup_timeout=NEVER, name="mute")


def connecting(recorder: TeeRecorder) -> None:
    """Wait until the client has sent its first request to the server."""
    recorder.wait_for(lambda m: m.get("method") in ("initialize", "server/discover"), 30)


def assert_wound_down(recorder: TeeRecorder) -> None:
    """The attempt's loop thread ends (bounded), and the processes it started are gone."""
    for thread in threading.enumerate():
        if thread.name == "agent_sync-mcp-mute":
            thread.join(30)
            assert not thread.is_alive()
    for processes in recorder.processes:
        assert gone(processes["tee_pid"]) and gone(processes["server_pid"])


def assert_cancelled(agent: Agent, result: AgentResult, reason: str) -> None:
    """Cancelled as any run is: "Cancelled by user", a valid history, the agent idle."""
    assert result.stop_reason == "cancelled" and result.cancel_reason == reason
    assert agent.messages == [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]},
    ]
    assert validate_history(agent.messages) == [] and not agent.is_running


def test_a_timeout_stops_a_connect_that_never_answers(recorder: TeeRecorder) -> None:
    server = mute(recorder)
    agent = Agent(ScriptedModel(["never"]), tools=[server])
    run = Invoke(agent, timeout=0.3)
    assert_cancelled(agent, run.result(), "timeout")  # before: waited out startup_timeout
    assert_wound_down(recorder)
    assert not server.connected


def test_cancel_stops_a_connect_and_the_next_run_connects_again(recorder: TeeRecorder) -> None:
    server = mute(recorder)
    agent = Agent(ScriptedModel(["never"]), tools=[server])
    run = Invoke(agent)
    connecting(recorder)
    assert agent.cancel("stop")
    assert_cancelled(agent, run.result(), "stop")
    assert_wound_down(recorder)
    assert not server.connected


def test_a_calling_runs_cancel_stops_a_sub_agents_connect(recorder: TeeRecorder) -> None:
    server = mute(recorder)
    child = Agent(ScriptedModel(["never"]), tools=[server])
    call = {"tool_calls": [{"name": "helper", "input": {"prompt": "go"}}]}
    helper = child.as_tool(name="helper", description="Helps")
    boss = Agent(ScriptedModel([call, "never"]), tools=[helper])
    run = Invoke(boss)
    connecting(recorder)
    assert boss.cancel()
    result = run.result()
    assert result.stop_reason == "cancelled"
    assert validate_history(boss.messages) == []
    assert_wound_down(recorder)


def test_ctrl_c_during_a_connect_is_a_keyboard_interrupt(recorder: TeeRecorder) -> None:
    assert threading.current_thread() is threading.main_thread()
    server = mute(recorder)
    agent = Agent(ScriptedModel(["never"]), tools=[server])
    main = threading.main_thread().ident
    assert main is not None

    def press_ctrl_c() -> None:
        connecting(recorder)
        signal.pthread_kill(main, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    with pytest.raises(KeyboardInterrupt):
        agent.invoke("go")
    presser.join(30)
    assert validate_history(agent.messages) == [] and not agent.is_running
    assert agent.messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert_wound_down(recorder)
