"""Server tool names that are not valid model tool names map one to one: ``a.b`` and ``a_b``,
or two names of only non-ASCII letters, stay apart; valid names are unchanged; the mapping is
the same on every connection and in every process (a stored history's names resolve)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, validate_history
from agent_sync.mcp import MCPServer
from agent_sync.testing import ScriptedModel
from tests.mcp._own_server import ODD_NAMES
from tests.mcp.conftest import own_stdio

PROVIDER_RULE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # Bedrock's, Anthropic's and OpenAI's

# Pinned: the names a history stored by another process holds must still resolve.
EXPECTED = {
    "a.b": "a_b_2e7336dc8e",
    "a_b": "a_b",
    "天气": "___4d94732547",
    "名前": "___7ec2629241",
    "x" * 70: "x" * 53 + "_c71bd10922",
    "ping": "ping",
}


@pytest.fixture(scope="module")
def server() -> Iterator[MCPServer]:
    """One odd server for the module: each test uses the connection it finds (or makes) and
    closes it where its case is a new connection (each child costs the ``mcp`` SDK's imports,
    seconds on two busy cores)."""
    odd = own_stdio("odd", name="odd")
    yield odd
    odd.close()


def names(server: MCPServer) -> dict[str, str]:
    return {tool.mcp_name: tool.name for tool in server.agent_tools()}


def test_names_that_had_to_change_stay_apart_and_each_calls_its_own_tool(
    server: MCPServer,
) -> None:
    mapped = names(server)
    assert {odd: mapped[odd] for odd in EXPECTED} == EXPECTED
    assert len(set(mapped.values())) == len(mapped)
    assert all(PROVIDER_RULE.fullmatch(name) for name in mapped.values())
    calls = [{"name": mapped[odd], "input": {}} for odd in ODD_NAMES]
    agent = Agent(ScriptedModel([{"tool_calls": calls}, "done"]), tools=[server])
    assert agent.invoke("call them all").text == "done"
    results = [block["toolResult"] for block in agent.messages[2]["content"]]
    assert [r["content"] for r in results] == [
        [{"json": {"result": f"I am {odd}"}}] for odd in ODD_NAMES
    ]
    assert validate_history(agent.messages) == []


def test_the_mapping_is_the_same_on_a_new_connection_and_with_a_prefix(
    server: MCPServer,
) -> None:
    first = names(server)
    server.close()
    assert names(server) == first  # a new child process, the same names
    prefixed = {tool.mcp_name: tool.name for tool in server.tools(prefix="odd_")}
    assert prefixed["a_b"] == "odd_a_b"
    assert prefixed["a.b"] != prefixed["a_b"] and prefixed["a.b"].startswith("odd_a_b_")


def test_a_stored_history_resolves_after_a_reconnect(server: MCPServer) -> None:
    call: dict[str, Any] = {"tool_calls": [{"name": EXPECTED["天气"], "input": {}}]}
    agent = Agent(ScriptedModel([call, "one", call, "two"]), tools=[server])
    agent.invoke("first")
    server.close()  # the next run connects a new process
    agent.invoke("second")
    last = agent.messages[-2]["content"][0]["toolResult"]
    assert last["status"] == "success"
    assert last["content"] == [{"json": {"result": "I am 天气"}}]
