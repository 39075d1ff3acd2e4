"""``tools/list_changed``: a server whose tool list changes is current from the next run on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_sync import Agent, validate_history
from agent_sync.mcp import MCPServer
from agent_sync.testing import ScriptedModel
from tests.mcp.conftest import own_stdio


def test_a_tool_the_server_adds_is_there_at_the_next_run() -> None:
    server = own_stdio("grow", name="grow")
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "add_tool", "input": {"name": "fresh"}}]},
            "added",
            {"tool_calls": [{"name": "fresh", "input": {}}]},
            "used it",
        ]
    )
    agent = Agent(model, tools=[server])
    try:
        agent.invoke("add a tool")
        assert [spec["name"] for spec in model.calls[0].tool_specs] == ["ping", "fail", "add_tool"]
        agent.invoke("use it")
        assert [spec["name"] for spec in model.calls[2].tool_specs] == [
            "ping",
            "fail",
            "add_tool",
            "fresh",
        ]
        result = agent.messages[-2]["content"][0]["toolResult"]
        assert result["status"] == "success"
        assert result["content"] == [{"json": {"result": "I am fresh"}}]
        assert validate_history(agent.messages) == []
        assert "fresh" in agent.tools  # the agent's tools as of its last run
    finally:
        server.close()


@pytest.fixture(scope="module")
def unchanged() -> Iterator[MCPServer]:
    """One ``grow`` server for the tests that never add a tool (a start is ~0.5 s, mostly
    the SDK's import); not connected until the first of them uses it."""
    with own_stdio("grow") as server:
        yield server


def test_a_server_in_an_iterator_of_tools_is_kept(unchanged: MCPServer) -> None:
    model = ScriptedModel(["ok"])
    Agent(model, tools=iter([unchanged])).invoke("hi")
    assert "ping" in [spec["name"] for spec in model.calls[0].tool_specs]


def test_the_same_tool_objects_while_the_list_is_unchanged(unchanged: MCPServer) -> None:
    first = unchanged.agent_tools()
    assert unchanged.agent_tools() is first
