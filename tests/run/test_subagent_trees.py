"""A sub-agent tree's bounds: how deep it may go (``as_tool(max_depth=...)``), that
nothing of it runs once its top-level run has returned, and that the paused children of
a lead live as long as the lead (no module-wide holder keeps them).

The trees are agents that call themselves (the runaway case): the template is given its
own tool through a tool source, so every level is a copy of the lead.
"""

from __future__ import annotations

import gc
import inspect
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync._subagent import DEFAULT_MAX_DEPTH
from agent_sync.cancel import CancelScope
from agent_sync.errors import UsageError
from agent_sync.messages import StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.run import _subruns
from agent_sync.testing import ScriptedModel
from agent_sync.tools.decorator import Tool
from tests.fixtures.garbage import collect_garbage

pytestmark = pytest.mark.timeout(120)

RUNAWAY = 40  # starts past which the model stops recursing (the unbounded tree's guard)


class Itself:
    """A tool source giving an agent its own ``as_tool()`` (set once the agent exists)."""

    def __init__(self) -> None:
        self.tools: list[Tool[Any]] = []

    def agent_tools(self, cancel: CancelScope | None = None) -> Sequence[Tool[Any]]:
        return self.tools


class Recursing:
    """The model of an agent that calls itself: a run started with ``level-N`` asks for
    ``width`` calls of ``me`` with ``level-N+1`` (the level of the run each would start);
    a run given its tools' results answers ``done``. It counts the calls made once
    ``returned`` is set, and a run at ``block_level`` waits for ``gate`` without looking
    at its cancel (a model that ignores it: its callers abandon it)."""

    def __init__(self, width: int = 1, block_level: int | None = None) -> None:
        self.width = width
        self.block_level = block_level
        self.lock = threading.Lock()
        self.levels: list[int] = []  # the level of each run started
        self.refusals: list[str] = []  # the error results the model was given
        self.returned = threading.Event()
        self.late = 0  # calls made after `returned`
        self.blocked = threading.Semaphore(0)
        self.gate = threading.Event()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        with self.lock:
            if self.returned.is_set():
                self.late += 1
        last = request.messages[-1]["content"][-1]
        if "toolResult" in last:
            for block in request.messages[-1]["content"]:
                result = block["toolResult"]
                if result.get("status") == "error":
                    with self.lock:
                        self.refusals.append(str(result["content"]))
            return ScriptedModel(["done"]).stream(request, cancel=cancel)
        level = int(str(last["text"]).rsplit("-", 1)[1])
        with self.lock:
            self.levels.append(level)
            runaway = len(self.levels) > RUNAWAY
        if level == self.block_level:
            self.blocked.release()
            self.gate.wait(60)
        if runaway:
            return ScriptedModel(["done"]).stream(request, cancel=cancel)
        call = {"name": "me", "input": {"prompt": f"level-{level + 1}"}}
        return ScriptedModel([{"tool_calls": [call] * self.width}]).stream(request, cancel=cancel)


def _recursive(model: Recursing, **as_tool: Any) -> Agent:
    source = Itself()
    tools: list[Any] = [source]  # a tool source, as an MCP server is
    agent = Agent(model, tools=tools, tool_grace_period=0.2)
    source.tools.append(agent.as_tool(name="me", description="Ask yourself", **as_tool))
    return agent


def test_an_agent_that_calls_itself_stops_at_the_documented_max_depth() -> None:
    model = Recursing()
    agent = _recursive(model)
    result = agent.invoke("level-0")
    assert result.text == "done"
    # the top-level run and one run per level down to the limit; the next call refused
    assert model.levels == list(range(DEFAULT_MAX_DEPTH + 1))
    (refusal,) = model.refusals
    assert f"max_depth of {DEFAULT_MAX_DEPTH}" in refusal and "'me'" in refusal
    assert validate_history(agent.messages) == []


def test_max_depth_is_per_tool_and_checked() -> None:
    model = Recursing()
    agent = _recursive(model, max_depth=2)
    assert agent.invoke("level-0").text == "done"
    assert model.levels == [0, 1, 2] and len(model.refusals) == 1
    assert "max_depth of 2" in model.refusals[0]
    assert agent.invoke("level-0").text == "done"  # every call is bounded the same way
    assert model.levels == [0, 1, 2, 0, 1, 2]
    bad: Any
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(UsageError, match="max_depth"):
            agent.as_tool(name="me", description="Ask yourself", max_depth=bad)
    default = inspect.signature(Agent.as_tool).parameters["max_depth"].default
    assert default == DEFAULT_MAX_DEPTH  # the facade documents the same default


def test_nothing_of_a_tree_runs_after_its_top_level_run_returned() -> None:
    """Two calls per level (tool workers, which a cancelled caller abandons after its
    grace period): the runs at the deepest level ignore the cancel; once the lead's
    ``invoke`` has returned, they are let go, and not one more model call is made."""
    model = Recursing(width=2, block_level=2)
    agent = _recursive(model, max_depth=2)
    waiter = threading.Thread(
        target=lambda: (
            all(model.blocked.acquire(timeout=30) for _ in range(4)) and agent.cancel("enough")
        ),
        daemon=True,
    )
    waiter.start()
    result = agent.invoke("level-0")
    model.returned.set()
    waiter.join(30)
    assert result.stop_reason == "cancelled" and result.cancel_reason == "enough"
    model.gate.set()  # the abandoned runs go on from here: they must end, calling nothing
    for thread in threading.enumerate():
        if thread.name.startswith("agent_sync-tool-"):
            thread.join(30)
            assert not thread.is_alive()
    assert sorted(model.levels) == [0, 1, 1, 2, 2, 2, 2] and model.late == 0
    assert validate_history(agent.messages) == []


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return f"wiped {path}"


def test_a_dropped_paused_lead_frees_its_paused_children() -> None:
    janitor = Agent(
        ScriptedModel([{"tool_calls": [{"name": "wipe", "input": {"path": "/tmp/x"}}]}]),
        tools=[wipe],
    )
    lead = Agent(
        ScriptedModel([{"tool_calls": [{"name": "clean", "input": {"prompt": "tidy"}}]}]),
        tools=[janitor.as_tool(name="clean", description="Clean up")],
    )
    # Agents other tests left for the collector are not this run's: only a new one is the
    # copy (held here, so no id of theirs is reused; collected after the test).
    earlier = {id(o): o for o in gc.get_objects() if type(o) is Agent}
    paused = lead.invoke("go")
    assert paused.stop_reason == "paused"
    (request,) = paused.approvals
    assert _subruns.held(lead) == [request.run_id]
    collect_garbage()
    (copy,) = (o for o in gc.get_objects() if type(o) is Agent and id(o) not in earlier)
    child, dropped = weakref.ref(copy), weakref.ref(lead)
    del lead, paused, copy, earlier
    collect_garbage()
    assert dropped() is None and child() is None  # the paused child went with its lead
