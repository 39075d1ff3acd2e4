"""Parts of ``agent_sync.mcp.serve`` that need no client: a run's result as a tool result,
and the table of runs paused for a client's answers (real agents on scripted models)."""

from __future__ import annotations

import time

import pydantic

from agent_sync import Agent, CancelToken, tool
from agent_sync.mcp._serve import _answer
from agent_sync.mcp._serve_approvals import Paused, PausedRuns
from agent_sync.testing import ScriptedModel


class Invoice(pydantic.BaseModel):
    number: str
    total: float


def test_an_output_type_answer_is_structured_content_beside_the_text() -> None:
    final = {"tool_calls": [{"name": "final_result", "input": {"number": "F-1", "total": "9.5"}}]}
    invoice = _answer(Agent(ScriptedModel([final])).invoke("x", output_type=Invoice))
    assert not invoice.is_error
    assert invoice.structured_content == {"number": "F-1", "total": 9.5}
    numbers = _answer(
        Agent(ScriptedModel(['{"result": [3, 1, 2]}'])).invoke("x", output_type=list[int])
    )
    assert numbers.structured_content == {"result": [3, 1, 2]}  # an object, as MCP asks
    text = _answer(Agent(ScriptedModel(["plain"])).invoke("x"))
    assert text.structured_content is None and text.content[0].text == "plain"  # type: ignore[union-attr]


def test_a_run_that_did_not_answer_is_an_error_result() -> None:
    token = CancelToken()
    token.cancel("shutting down")
    stopped = _answer(Agent(ScriptedModel(["never"])).invoke("x", cancel=token))
    assert stopped.is_error
    assert stopped.content[0].text == "the run was cancelled (shutting down)"  # type: ignore[union-attr]


@tool(requires_approval=True)
def wipe() -> str:
    """Wipe."""
    return "wiped"


def test_a_paused_run_not_answered_in_time_is_cancelled_and_its_agent_ready() -> None:
    agent = Agent(
        ScriptedModel([{"tool_calls": [{"name": "wipe", "input": {}}]}, "ok"]), tools=[wipe]
    )
    result = agent.invoke("wipe it")
    assert agent.is_paused
    runs = PausedRuns()
    late = runs.put(
        Paused(agent=agent, approvals=result.approvals, owned=True, expires=time.monotonic() - 1)
    )
    assert late is not None
    assert runs.take(late) is None  # expired: swept, not handed out
    assert not agent.is_paused
    assert agent.invoke("again").stop_reason == "end_turn"  # the history was left valid
    kept = runs.put(Paused(agent=agent, approvals=(), owned=False, expires=time.monotonic() + 60))
    assert kept is not None and runs.take(kept) is not None and runs.take(kept) is None
