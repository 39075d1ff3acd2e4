"""Progress: an MCP server's ``notifications/progress`` and any tool's
``context.report_progress(...)`` become ``ToolProgress`` events and ``tool_progress`` frames."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool
from agent_sync._run_log._records import records_of
from agent_sync.errors import UsageError
from agent_sync.events import AgentEvent, ToolEnd, ToolProgress, ToolStart
from agent_sync.mcp import MCPServer
from agent_sync.testing import ScriptedModel
from agent_sync.web._sse import encode_event


def tool_events(events: list[AgentEvent]) -> list[AgentEvent]:
    return [e for e in events if isinstance(e, (ToolStart, ToolProgress, ToolEnd))]


def test_an_mcp_servers_progress_notifications_are_events(
    everything: tuple[MCPServer, Any],
) -> None:
    server, _ = everything
    steps = {
        "tool_calls": [
            {"name": "trigger-long-running-operation", "input": {"duration": 0.04, "steps": 4}}
        ]
    }
    agent = Agent(ScriptedModel([steps, "done"]), tools=[server])
    events = tool_events(list(agent.stream("go")))
    start, *progress, end = events
    assert isinstance(start, ToolStart) and isinstance(end, ToolEnd)
    call_id = start.tool_use["toolUseId"]
    assert [(p.tool_use_id, p.progress, p.total) for p in progress] == [  # type: ignore[union-attr]
        (call_id, float(step), 4.0) for step in range(1, 5)
    ]
    assert end.result["status"] == "success"
    assert all(p.run_id == start.run_id for p in progress)


@tool
def crawl(pages: int, context: ToolContext) -> str:
    """Crawl some pages."""
    for page in range(1, pages + 1):
        context.report_progress(page, total=pages, message=f"page {page}")
    return "crawled"


def test_any_tool_reports_progress_through_its_context() -> None:
    agent = Agent(
        ScriptedModel([{"tool_calls": [{"name": "crawl", "input": {"pages": 2}}]}, "ok"]),
        tools=[crawl],
    )
    events = tool_events(list(agent.stream("go")))
    assert [type(e).__name__ for e in events] == ["ToolStart", "ToolProgress", "ToolProgress",
                                                 "ToolEnd"]  # fmt: skip
    first = events[1]
    assert isinstance(first, ToolProgress)
    assert (first.progress, first.total, first.message) == (1.0, 2.0, "page 1")
    frame = encode_event(first)
    assert frame is not None
    kind, data = frame.decode().strip().split("\n")
    assert kind == "event: tool_progress"
    assert json.loads(data.removeprefix("data: ")) == {
        "id": first.tool_use_id,
        "progress": 1.0,
        "total": 2.0,
        "message": "page 1",
    }
    (record,) = records_of(first, cycle=1)
    assert record["type"] == "tool_progress" and record["id"] == first.tool_use_id


def test_report_progress_refuses_what_is_not_a_number() -> None:
    @tool
    def bad(context: ToolContext) -> str:
        """Report nonsense."""
        with pytest.raises(UsageError, match="progress must be finite"):
            context.report_progress(float("nan"))
        with pytest.raises(UsageError, match="total must be a number"):
            context.report_progress(1, total="all")  # type: ignore[arg-type]
        return "checked"

    agent = Agent(
        ScriptedModel([{"tool_calls": [{"name": "bad", "input": {}}]}, "ok"]), tools=[bad]
    )
    agent.invoke("go")
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "checked"}]
