"""``ToolContext[Deps]`` and ``deps=``, per-call ``params=`` (issue 17 item 7), and an
``async def`` tool's cancel (item 6): what a user of pydantic-ai expects, in blocking code."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, Approve, ToolContext, UsageError, tool, validate_history
from agent_sync.events import Done
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import cut_short_of


@dataclasses.dataclass
class Deps:
    db: dict[str, str]
    user: str = "ann"


SEEN: list[Any] = []


@tool
def lookup(key: str, context: ToolContext[Deps]) -> str:
    """Look a key up in the request's database."""
    SEEN.append(context.deps)
    return context.deps.db.get(key, "missing")


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    SEEN.clear()
    yield


def _asks(n: int = 1) -> list[Any]:
    return [{"tool_calls": [{"name": "lookup", "input": {"key": "k"}}]}, "done"] * n


def _answer(agent: Agent, index: int = 2) -> str:
    text: str = agent.messages[index]["content"][0]["toolResult"]["content"][0]["text"]
    return text


def test_the_context_is_hidden_from_the_schema_whatever_its_deps_type() -> None:
    assert lookup.context_param == "context"
    assert lookup.input_schema == {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
    }


def test_the_agents_deps_reach_every_tool_call() -> None:
    deps = Deps(db={"k": "from the agent"})
    agent = Agent(ScriptedModel(_asks(2)), tools=[lookup], deps=deps)
    agent.invoke("first")
    agent.invoke("second")
    assert SEEN == [deps, deps] and SEEN[0] is deps  # the object itself, not a copy
    assert _answer(agent) == "from the agent"


def test_a_calls_deps_replace_the_agents_for_that_run_only() -> None:
    agent_deps, call_deps = Deps(db={"k": "agent"}), Deps(db={"k": "call"})
    agent = Agent(ScriptedModel(_asks(2)), tools=[lookup], deps=agent_deps)
    agent.invoke("first", deps=call_deps)
    agent.invoke("second")
    assert SEEN == [call_deps, agent_deps]
    assert SEEN[0] is call_deps


def test_deps_none_given_per_call_is_none() -> None:
    agent = Agent(ScriptedModel(_asks()), tools=[tool(name="lookup")(_deps_of)], deps=Deps({}))
    agent.invoke("go", deps=None)
    assert SEEN == [None]


def _deps_of(key: str, context: ToolContext[Any]) -> str:
    SEEN.append(context.deps)
    return "ok"


def test_stream_and_steps_take_deps() -> None:
    agent = Agent(ScriptedModel(_asks(2)), tools=[lookup])
    events = list(agent.stream("go", deps=Deps({"k": "streamed"})))
    assert isinstance(events[-1], Done) and _answer(agent) == "streamed"
    with agent.steps("again", deps=Deps({"k": "stepped"})) as run:
        for _ in run:
            pass
    assert [d.db["k"] for d in SEEN] == ["streamed", "stepped"]


@tool(requires_approval=lambda tool_use, context: context.deps.user != "admin")
def wipe(path: str, context: ToolContext[Deps]) -> str:
    """Wipe a path."""
    SEEN.append(("wipe", context.deps.user))
    return f"wiped {path}"


def test_an_approval_gate_and_a_resume_see_the_calls_deps() -> None:
    asks = [{"tool_calls": [{"name": "wipe", "input": {"path": "/tmp/x"}}]}, "done"]
    admin = Agent(ScriptedModel(asks), tools=[wipe])
    assert admin.invoke("wipe", deps=Deps({}, user="admin")).text == "done"  # not gated
    agent = Agent(ScriptedModel(asks), tools=[wipe], deps=Deps({}, user="bob"))
    (request,) = agent.invoke("wipe").approvals
    result = agent.resume({request.id: Approve()}, deps=Deps({}, user="carol"))
    assert result.text == "done"
    assert SEEN == [("wipe", "admin"), ("wipe", "carol")]


def test_deps_are_not_stored_a_resume_elsewhere_gets_its_own() -> None:
    """Another agent on the same store (as another process would) resumes the paused run:
    its tools get that agent's deps (or the resume's), never the first process's objects."""
    store = MemoryRunStore()
    asks = {"tool_calls": [{"name": "wipe", "input": {"path": "/r"}}]}
    first = Agent(
        ScriptedModel([asks]), tools=[wipe], store=store, conversation_id="c", deps=Deps({}, "bob")
    )
    (request,) = first.invoke("wipe").approvals
    other = Agent(
        ScriptedModel(["done", "done"]),
        tools=[wipe],
        store=store,
        conversation_id="c",
        deps=Deps({}, "worker-2"),
    )
    assert other.resume({request.id: Approve()}).text == "done"
    assert SEEN == [("wipe", "worker-2")]


def test_call_params_are_merged_over_the_agents_for_every_model_call_of_the_run() -> None:
    model = ScriptedModel(_asks(2))
    agent = Agent(model, tools=[lookup], params={"temperature": 0.7, "top_p": 0.9}, deps=Deps({}))
    agent.invoke("first", params={"temperature": 0, "seed": 7})
    agent.invoke("second")
    assert [call.params for call in model.calls] == [
        {"temperature": 0, "top_p": 0.9, "seed": 7},  # both calls of the first run
        {"temperature": 0, "top_p": 0.9, "seed": 7},
        {"temperature": 0.7, "top_p": 0.9},  # the next run: the agent's again
        {"temperature": 0.7, "top_p": 0.9},
    ]


def test_stream_steps_and_resume_take_params() -> None:
    model = ScriptedModel(
        ["a", "b", {"tool_calls": [{"name": "wipe", "input": {"path": "/"}}]}, "c"]
    )
    agent = Agent(model, tools=[wipe], deps=Deps({}, "bob"))
    list(agent.stream("a", params={"temperature": 1}))
    with agent.steps("b", params={"temperature": 2}) as run:
        for _ in run:
            pass
    (request,) = agent.invoke("c", params={"temperature": 3}).approvals
    agent.resume({request.id: Approve()}, params={"temperature": 4})
    assert [call.params for call in model.calls] == [{"temperature": t} for t in (1, 2, 3, 4)]


@pytest.mark.parametrize("params", ["temperature=0", {0: 1}, [("temperature", 0)]])
def test_params_that_are_not_a_dict_are_refused(params: Any) -> None:
    agent = Agent(ScriptedModel(["never"]))
    with pytest.raises(UsageError, match="params must be a dict"):
        agent.invoke("go", params=params)
    assert not agent.is_running and agent.messages == []  # nothing was touched
    with pytest.raises(UsageError, match="params must be a dict"):
        Agent(ScriptedModel(["never"]), params=params)


def test_an_async_tool_sees_cancelled_error_and_the_cancel_returns_at_once() -> None:
    """The tool awaits forever and the grace period is 60 s: only the task's cancel can
    end the call, so the run returns long before that, the coroutine got
    ``asyncio.CancelledError`` at its await, and the history is valid."""
    entered = threading.Event()
    seen: list[str] = []

    async def forever(url: str, context: ToolContext[Deps]) -> str:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(f"cancelled with deps {context.deps.user}")
            raise
        return "never"

    turns = [{"tool_calls": [{"name": "t", "input": {"url": "u"}}]}, "unused"]
    agent = Agent(
        ScriptedModel(turns), tools=[tool(name="t")(forever)], tool_grace_period=60, deps=Deps({})
    )
    timing: dict[str, float] = {}

    def cancel_when_entered() -> None:
        entered.wait(30)
        timing["cancel"] = time.perf_counter()
        agent.cancel("stop")

    canceller = threading.Thread(target=cancel_when_entered)
    canceller.start()
    result = agent.invoke("go")
    returned = time.perf_counter() - timing["cancel"]
    canceller.join(30)
    assert result.stop_reason == "cancelled" and result.cancel_reason == "stop"
    assert seen == ["cancelled with deps ann"]
    assert returned < cut_short_of(60)  # the grace is 60 s: the task was cancelled, not abandoned
    assert validate_history(agent.messages) == []
    answer = agent.messages[2]["content"][0]["toolResult"]
    assert answer["status"] == "error" and answer["content"][0]["text"] == CANCELLED_TEXT
