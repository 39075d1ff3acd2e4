"""The run handle: ids on results and events, active_run, handles bound to their own run."""

from __future__ import annotations

import threading

import pytest

from agent_sync import Agent, Run, UsageError
from agent_sync.events import Done
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke, assert_valid
from tests.run._gates import Gate, gate_call


def test_every_event_and_the_result_carry_the_run_id() -> None:
    gate = Gate()
    gate.opened.set()
    agent = Agent(
        ScriptedModel([{"text": "checking", "tool_calls": [gate_call()]}, "done"]),
        tools=[gate.tool],
    )
    with agent.stream("go") as stream:
        events = list(stream)
    run_ids = {event.run_id for event in events}
    assert len(run_ids) == 1
    (run_id,) = run_ids
    assert run_id.startswith("run_") and run_id == stream.run_id
    assert {e.type for e in events} >= {"text", "message", "tool_start", "tool_end", "done"}
    done = events[-1]
    assert isinstance(done, Done) and done.result.run_id == run_id
    assert done.to_dict()["run_id"] == run_id


def test_run_ids_are_unique() -> None:
    agent = Agent(ScriptedModel(["a"] * 50))
    ids = {agent.invoke("hi").run_id for _ in range(50)}
    assert len(ids) == 50


def test_active_run_is_the_run_in_progress_and_none_when_idle() -> None:
    gate = Gate()
    agent = Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "done"]), tools=[gate.tool])
    assert agent.active_run is None
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    run = agent.active_run
    assert isinstance(run, Run)
    assert run.status == "running"
    gate.opened.set()
    result = call.result()
    assert result.run_id == run.run_id
    assert agent.active_run is None
    assert run.status == "done" and run.result is result


def test_a_stale_handle_never_reaches_the_next_run() -> None:
    gate = Gate()
    agent = Agent(
        ScriptedModel(["first", {"tool_calls": [gate_call()]}, "second"]), tools=[gate.tool]
    )
    with agent.stream("one") as first:
        list(first)
    call = BackgroundInvoke(agent, "two")
    assert gate.entered.wait(10)
    assert first.cancel("late") is False
    assert first.run.cancel("late", mode="after_turn") is False
    with pytest.raises(UsageError, match="over"):
        first.inject("late input")
    gate.opened.set()
    result = call.result()
    assert result.stop_reason == "end_turn"
    assert "late input" not in str(agent.messages)
    assert_valid(agent)


def test_idle_agent_cancel_is_false_and_inject_is_a_usage_error() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    assert agent.cancel() is False
    with pytest.raises(UsageError, match="idle"):
        agent.inject("hello?")
    assert agent.invoke("hi").stop_reason == "end_turn"


def test_unknown_cancel_mode_is_a_usage_error() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    with agent.stream("go") as stream:
        with pytest.raises(UsageError, match="mode"):
            stream.cancel(mode="later")  # type: ignore[arg-type]
        assert [e.type for e in stream][-1] == "done"


def test_the_handle_is_usable_from_other_threads_while_the_run_moves() -> None:
    gate = Gate()
    agent = Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "done"]), tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    run = agent.active_run
    assert run is not None
    seen: list[str] = []

    def poke() -> None:
        snap = run.snapshot()
        seen.append(snap.phase)

    threads = [threading.Thread(target=poke) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == ["tools"] * 8
    gate.opened.set()
    assert call.result().stop_reason == "end_turn"
