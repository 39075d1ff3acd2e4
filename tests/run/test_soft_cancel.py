"""cancel(mode="after_turn"): the turn in flight and its tools finish, then the run stops."""

from __future__ import annotations

from agent_sync import Agent
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke, assert_valid, texts
from tests.run._gates import Gate, PausingModel, gate_call


def test_after_turn_keeps_the_real_tool_results_and_makes_no_further_model_call() -> None:
    gate = Gate(cooperative=True)
    model = ScriptedModel([{"text": "working", "tool_calls": [gate_call()]}, "never sent"])
    agent = Agent(model, tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    assert agent.cancel("user pressed stop after this", mode="after_turn") is True
    gate.opened.set()  # the tool finishes normally: it did not see a hard cancel
    result = call.result()
    assert result.stop_reason == "cancelled"
    assert result.cancel_reason == "user pressed stop after this"
    assert len(model.calls) == 1
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "success"
    assert tool_result["content"] == [{"text": "gate result"}]
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert_valid(agent)


def test_after_turn_during_the_last_model_turn_lets_the_run_end_normally() -> None:
    model = PausingModel(ScriptedModel([{"text": "a long answer", "chunk_size": 2}]))
    agent = Agent(model)
    call = BackgroundInvoke(agent)
    assert model.paused.wait(10)
    assert agent.cancel(mode="after_turn") is True
    model.resume.set()
    result = call.result()
    # nothing was cut: the answer is whole and the run ended by itself
    assert result.stop_reason == "end_turn"
    assert result.text == "a long answer"
    assert_valid(agent)


def test_now_after_after_turn_escalates() -> None:
    gate = Gate(cooperative=True)
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "never sent"])
    agent = Agent(model, tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    assert agent.cancel("soft", mode="after_turn") is True
    assert agent.cancel("hard") is True  # the tool is told now and gives up
    result = call.result()
    assert result.stop_reason == "cancelled"
    assert result.cancel_reason == "hard"
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["content"] == [{"text": "gave up"}]
    assert len(model.calls) == 1
    assert_valid(agent)


def test_after_turn_on_a_finished_run_is_false_and_the_next_run_is_untouched() -> None:
    agent = Agent(ScriptedModel(["one", "two"]))
    with agent.stream("a") as stream:
        list(stream)
    assert stream.cancel(mode="after_turn") is False
    assert agent.invoke("b").stop_reason == "end_turn"
