"""An MCP call in a run needs no tool thread: the run's thread hands it to the connection's
loop and takes its answer back (the tool's direct path); with more calls in a round than
workers, the calls run in workers as any tool's do, in order."""

from __future__ import annotations

import _thread
import threading
from typing import Any

import pytest

from agent_sync import Agent
from agent_sync.mcp import MCPServer
from agent_sync.testing import ScriptedModel
from tests.mcp.conftest import stdio_no_grace
from tests.mcp.test_cancel import (
    LONG,
    Invoke,
    assert_cancelled_and_usable,
    call_of,
    cancelled_notice,
)


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
    server = stdio_no_grace(everything_cmd, name="everything")
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


def test_ctrl_c_in_a_direct_tool_call_cancels_it_at_the_server(
    everything: tuple[MCPServer, Any],
) -> None:
    """A tool called directly in the main thread (``tool(...)``) and interrupted by Ctrl-C:
    KeyboardInterrupt reaches the caller and the server is told the call is cancelled."""
    server, seen = everything
    (long_tool,) = server.tools(include=["trigger-long-running-operation"])
    request: dict[str, Any] = {}

    def interrupt_when_called() -> None:
        request.update(call_of(seen, "trigger-long-running-operation"))
        _thread.interrupt_main()  # as a terminal's Ctrl-C: KeyboardInterrupt in the main thread

    helper = threading.Thread(target=interrupt_when_called, daemon=True)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        long_tool(duration=600, steps=600)
    helper.join(30)
    assert cancelled_notice(seen, request["id"])["params"]["requestId"] == request["id"]
    (echo,) = server.tools(include=["echo"])
    assert echo(message="still here")["content"] == [{"text": "Echo: still here"}]
