"""``requires_approval=`` of a server: the existing approval pause, and nothing reaches the
server before the decision (what it received is recorded)."""

from __future__ import annotations

from typing import Any

import pytest

from agent_sync import Agent, Approve, Deny, validate_history
from agent_sync.mcp import MCPServer
from agent_sync.testing import ScriptedModel
from tests.mcp._recording import TeeRecorder
from tests.mcp.conftest import own_stdio, stdio_no_grace

TWO_CALLS = {
    "tool_calls": [
        {"name": "echo", "input": {"message": "gated"}},
        {"name": "get-sum", "input": {"a": 1, "b": 2}},
    ]
}


def calls_before_marker(server: MCPServer, seen: TeeRecorder) -> list[str]:
    """The tools called so far: a marker call goes down the same pipe after them, so once
    the recorder has it, it has everything sent before."""
    server.tools(include=["echo"])[0](message="marker")
    seen.wait_for(lambda m: _called(m) == "echo" and m["params"]["arguments"] == MARKER, 30)
    names = [_called(m) for m in seen.messages]
    return [name for name in names[: names.index("echo", _marker_at(seen))] if name]


MARKER = {"message": "marker"}


def _called(message: dict[str, Any]) -> str | None:
    return message["params"]["name"] if message.get("method") == "tools/call" else None


def _marker_at(seen: TeeRecorder) -> int:
    return next(
        i
        for i, m in enumerate(seen.messages)
        if _called(m) == "echo" and m["params"]["arguments"] == MARKER
    )


def tool_calls(seen: TeeRecorder, count: int) -> list[str]:
    """The first ``count`` tools called (waits for them)."""
    seen.wait_for(lambda m: sum(_called(x) is not None for x in seen.messages) >= count, 30)
    return [name for name in map(_called, seen.messages) if name][:count]


@pytest.mark.parametrize("gate", [{"echo"}, True, lambda use, context: use["name"] == "echo"])
def test_a_gated_call_waits_for_the_decision_before_reaching_the_server(
    everything_cmd: list[str], recorder: TeeRecorder, gate: Any
) -> None:
    server = stdio_no_grace(recorder.wrap(everything_cmd), requires_approval=gate)
    try:
        agent = Agent(ScriptedModel([TWO_CALLS, "done"]), tools=[server])
        paused = agent.invoke("go")
        assert paused.stop_reason == "paused"
        gated = {request.tool_use["name"] for request in paused.approvals}
        assert gated == ({"echo", "get-sum"} if gate is True else {"echo"})
        assert calls_before_marker(server, recorder) == []  # nothing before the decision
        result = agent.resume({request.id: Approve() for request in paused.approvals})
        assert result.text == "done"
        assert sorted(tool_calls(recorder, 3)[1:]) == ["echo", "get-sum"]  # after the marker
        results = [b["toolResult"] for b in agent.messages[2]["content"]]
        assert results[0]["content"] == [{"text": "Echo: gated"}]
        assert validate_history(agent.messages) == []
    finally:
        server.close()


def test_a_denied_call_never_reaches_the_server(
    everything_cmd: list[str], recorder: TeeRecorder
) -> None:
    with stdio_no_grace(recorder.wrap(everything_cmd), requires_approval={"echo"}) as server:
        echo = {"tool_calls": [{"name": "echo", "input": {"message": "no"}}]}
        agent = Agent(ScriptedModel([echo, "fine"]), tools=[server])
        (request,) = agent.invoke("go").approvals
        agent.resume({request.id: Deny("not now")})
        denied = agent.messages[2]["content"][0]["toolResult"]
        assert denied["status"] == "error" and "not now" in denied["content"][0]["text"]
        assert calls_before_marker(server, recorder) == []


def test_an_is_error_result_is_an_error_result() -> None:
    with own_stdio("grow") as server:
        fail = {"tool_calls": [{"name": "fail", "input": {"why": "the disk is full"}}]}
        agent = Agent(ScriptedModel([fail, "sorry"]), tools=[server])
        agent.invoke("go")
        result = agent.messages[2]["content"][0]["toolResult"]
        assert result["status"] == "error"
        assert "the disk is full" in result["content"][0]["text"]
