"""run.state: a RunState that round-trips through JSON exactly and holds nothing process-local."""

from __future__ import annotations

import json

import pytest

from agent_sync import Agent, RunState, UsageError
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke
from tests.run._gates import Gate, gate_call


def _round_trip(state: RunState) -> RunState:
    return RunState.from_dict(json.loads(json.dumps(state.to_dict())))


def test_a_finished_run_round_trips_exactly() -> None:
    gate = Gate()
    gate.opened.set()
    script = ["earlier answer", {"text": "a", "tool_calls": [gate_call()]}, "b"]
    agent = Agent(ScriptedModel(script), tools=[gate.tool])
    agent.invoke("earlier")  # the second run's state holds only its own messages
    with agent.stream("go") as stream:
        list(stream)
    state = stream.run.state
    assert state.to_dict()["format"] == "agent_sync.run/1"
    assert state.status == "done" and state.next_step is None and state.stop_reason == "end_turn"
    assert state.history_start == 2
    assert list(state.messages) == agent.messages[2:]
    assert state.usage == stream.result.usage  # type: ignore[union-attr]
    again = _round_trip(state)
    assert again == state
    assert again.to_dict() == state.to_dict()


def test_a_run_in_its_tool_round_names_the_pending_calls_and_queued_input() -> None:
    gate = Gate()
    agent = Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "done"]), tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    agent.inject("later")
    run = agent.active_run
    assert run is not None
    state = run.state
    assert (state.status, state.next_step, state.cycle) == ("running", "tools", 1)
    assert [t["name"] for t in state.pending_tool_uses] == ["wait_for_gate"]
    assert state.queued_inputs == (({"text": "later"},),)
    assert _round_trip(state) == state
    gate.opened.set()
    call.result()


def test_bytes_survive_the_round_trip() -> None:
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG\x00\xff"}}}
    agent = Agent(ScriptedModel(["a picture"]))
    with agent.stream([{"text": "look"}, image]) as stream:  # type: ignore[list-item]
        list(stream)
    state = stream.run.state
    data = json.loads(json.dumps(state.to_dict()))
    assert _round_trip(state) == state
    assert RunState.from_dict(data).messages[0]["content"][1] == image


def test_a_cancelled_run_records_why() -> None:
    agent = Agent(ScriptedModel(["never"]))
    stream = agent.stream("go")
    stream.cancel("changed my mind")
    list(stream)
    state = stream.run.state
    assert (state.status, state.stop_reason, state.cancel_reason) == (
        "cancelled",
        "cancelled",
        "changed my mind",
    )
    assert _round_trip(state) == state


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "agent_sync.run/2"}, "unknown RunState format 'agent_sync.run/2'"),
        ({"format": None}, "unknown RunState format None"),
        ({"status": "sleeping"}, "status"),
        ({"next_step": "dance"}, "next_step"),
        ({"cycle": "3"}, "cycle"),
        ({"cycle": True}, "cycle"),
        ({"messages": {}}, "messages"),
        ({"stop_reason": 5}, "stop_reason"),
    ],
)
def test_bad_dicts_fail_fast_with_a_clear_error(change: dict[str, object], message: str) -> None:
    agent = Agent(ScriptedModel(["hi"]))
    with agent.stream("go") as stream:
        list(stream)
    data = {**stream.run.state.to_dict(), **change}
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        RunState.from_dict(data)


def test_a_missing_field_is_named() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    with agent.stream("go") as stream:
        list(stream)
    data = stream.run.state.to_dict()
    del data["run_id"]
    with pytest.raises(UsageError, match="'run_id'"):
        RunState.from_dict(data)
    with pytest.raises(UsageError, match="mapping"):
        RunState.from_dict([])  # type: ignore[arg-type]
