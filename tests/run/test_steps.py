"""agent.steps(): one model call and its tools per iteration; leaving early cancels."""

from __future__ import annotations

import pytest

from agent_sync import Agent, ConcurrentInvocationError, Step, tool
from agent_sync.errors import ModelError
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import assert_valid, texts
from tests.fixtures.garbage import collect_garbage


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


SCRIPT = [
    {"text": "adding", "tool_calls": [{"name": "add", "input": {"a": 1, "b": 2}}]},
    {"tool_calls": [{"name": "add", "input": {"a": 3, "b": 4}}]},
    "1+2=3 and 3+4=7",
]


def test_one_step_per_model_call_then_the_result() -> None:
    agent = Agent(ScriptedModel(SCRIPT), tools=[add])
    with agent.steps("add things") as run:
        steps = list(run)
    assert [s.cycle for s in steps] == [1, 2, 3]
    assert all(isinstance(s, Step) for s in steps)
    assert steps[0].message is agent.messages[1]
    assert [r["content"] for r in steps[0].tool_results] == [[{"text": "3"}]]
    assert [r["content"] for r in steps[1].tool_results] == [[{"text": "7"}]]
    assert steps[2].tool_results == () and texts(steps[2].message) == ["1+2=3 and 3+4=7"]
    assert run.result is not None and run.result.stop_reason == "end_turn"
    assert run.result.run_id == run.run_id
    assert_valid(agent)


def test_leaving_early_cancels_with_a_valid_history() -> None:
    model = ScriptedModel(SCRIPT)
    agent = Agent(model, tools=[add])
    with agent.steps("add things") as run:
        for step in run:
            assert step.cycle == 1
            break
    assert len(model.calls) == 1
    assert run.result is not None and run.result.stop_reason == "cancelled"
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert_valid(agent)
    assert agent.invoke("again").stop_reason in ("end_turn", "max_cycles")


def test_invoke_stream_and_steps_write_the_same_history() -> None:
    histories = []
    for drive in ("invoke", "stream", "steps"):
        agent = Agent(ScriptedModel(SCRIPT), tools=[add])
        if drive == "invoke":
            agent.invoke("add things")
        elif drive == "stream":
            with agent.stream("add things") as stream:
                list(stream)
        else:
            with agent.steps("add things") as run:
                list(run)
        for message in agent.messages:  # ids are generated per model: compare the rest
            for block in message["content"]:
                block.get("toolUse", {}).pop("toolUseId", None)
                block.get("toolResult", {}).pop("toolUseId", None)
        histories.append(agent.messages)
    assert histories[0] == histories[1] == histories[2]


def test_steps_takes_the_agent_at_once() -> None:
    agent = Agent(ScriptedModel(SCRIPT), tools=[add])
    with agent.steps("one"):
        with pytest.raises(ConcurrentInvocationError):
            agent.steps("two")
        with pytest.raises(ConcurrentInvocationError):
            agent.invoke("three")
    assert not agent.is_running


def test_a_model_error_is_raised_from_the_iteration() -> None:
    agent = Agent(
        ScriptedModel([{"text": "so far", "error": ModelError("down"), "error_after": 1}])
    )
    with agent.steps("go") as run:
        with pytest.raises(ModelError, match="down"):
            list(run)
    assert run.status == "failed" and run.result is None
    assert not agent.is_running
    assert agent.messages[-1]["role"] == "user"


def test_an_unread_steps_run_closed_keeps_the_prompt_and_closes_the_turn() -> None:
    agent = Agent(ScriptedModel(SCRIPT), tools=[add])
    run = agent.steps("never read")
    run.close()
    assert [m["role"] for m in agent.messages] == ["user", "assistant"]
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert run.status == "cancelled"
    assert_valid(agent)


def test_a_dropped_steps_run_is_closed_by_the_garbage_collector() -> None:

    agent = Agent(ScriptedModel(SCRIPT), tools=[add])
    run = agent.steps("add things")
    next(run)
    del run
    collect_garbage()
    assert not agent.is_running
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert_valid(agent)


def test_only_the_steps_handle_iterates_its_run() -> None:
    from agent_sync import UsageError

    agent = Agent(ScriptedModel(SCRIPT), tools=[add])
    with agent.steps("add things") as run:
        view = agent.active_run
        assert view == run and hash(view) == hash(run)
        with pytest.raises(UsageError, match="agent.steps"):
            next(iter(view))  # type: ignore[arg-type]
        assert [s.cycle for s in run] == [1, 2, 3]
