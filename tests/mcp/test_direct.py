"""An MCP call in a run needs no tool thread: the run's thread hands it to the connection's
loop and takes its answer back (the tool's direct path); with more calls in a round than
workers, the calls run in workers as any tool's do, in order."""

from __future__ import annotations

import threading
from typing import Any

from agent_sync import Agent
from agent_sync.mcp import MCPServer
from agent_sync.testing import ScriptedModel
from tests.mcp.test_cancel import LONG, Invoke, assert_cancelled_and_usable, call_of


def tool_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("agent_sync-tool-")}


def test_a_call_in_flight_holds_no_tool_thread(everything: tuple[MCPServer, Any]) -> None:
    server, seen = everything
    server.connect()
    agent = Agent(ScriptedModel([LONG, "never"]), tools=[server])
    before = tool_threads()  # other tests' abandoned ones, if any
    run = Invoke(agent)
    call_of(seen, "trigger-long-running-operation")
    assert tool_threads() <= before
    assert agent.cancel("stop") is True
    assert_cancelled_and_usable(agent, server, run.result())


def test_more_calls_than_workers_run_in_workers_in_order(everything_cmd: list[str]) -> None:
    server = MCPServer.stdio(everything_cmd, name="everything")
    try:
        calls = [{"name": "echo", "input": {"message": m}} for m in ("one", "two", "three")]
        agent = Agent(
            ScriptedModel([{"tool_calls": calls}, "done"]),
            tools=[server],
            tool_executor="sequential",
        )
        assert agent.invoke("go").text == "done"
        texts = [block["toolResult"]["content"] for block in agent.messages[2]["content"]]
        assert texts == [[{"text": f"Echo: {m}"}] for m in ("one", "two", "three")]
    finally:
        server.close()
