"""CancelToken passed to runs: one token cancels every run it was passed to, across agents."""

from __future__ import annotations

import pytest

from agent_sync import Agent, CancelToken, UsageError
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke, assert_valid
from tests.run._gates import Gate, gate_call


def test_one_token_cancels_runs_of_two_agents() -> None:
    token = CancelToken()
    gates = [Gate(cooperative=True), Gate(cooperative=True)]
    agents = [
        Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "never"]), tools=[gate.tool])
        for gate in gates
    ]
    calls = [BackgroundInvoke(agent, cancel=token) for agent in agents]
    for gate in gates:
        assert gate.entered.wait(10)
    assert token.cancel("request ended") is True
    for call, agent in zip(calls, agents, strict=True):
        result = call.result()
        assert (result.stop_reason, result.cancel_reason) == ("cancelled", "request ended")
        assert_valid(agent)


def test_a_cancelled_token_stops_a_new_run_before_any_model_call() -> None:
    token = CancelToken()
    token.cancel("job aborted")
    model = ScriptedModel(["never"])
    agent = Agent(model)
    result = agent.invoke("go", cancel=token)
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "job aborted")
    assert model.calls == []
    with agent.stream("again", cancel=token) as stream:
        assert [e.type for e in stream][-1] == "done"
    assert_valid(agent)


def test_a_token_does_not_reach_runs_it_was_not_passed_to() -> None:
    token = CancelToken()
    agent = Agent(ScriptedModel(["one", "two"]))
    assert agent.invoke("a", cancel=token).stop_reason == "end_turn"
    token.cancel()
    assert agent.invoke("b").stop_reason == "end_turn"


def test_cancel_must_be_a_token() -> None:
    agent = Agent(ScriptedModel(["x"]))
    with pytest.raises(UsageError, match="CancelToken"):
        agent.invoke("go", cancel="now")  # type: ignore[arg-type]
    assert not agent.is_running
