"""run.inject / agent.inject: queued input goes out once, is answered, and is never lost."""

from __future__ import annotations

import pytest

from agent_sync import Agent, UsageError, validate_history
from agent_sync.events import InputInjected, MessageComplete
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke, assert_valid, texts
from tests.run._gates import Gate, PausingModel, gate_call


def test_input_injected_during_tools_follows_the_tool_results() -> None:
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "answered both"])
    agent = Agent(model, tools=[gate.tool])
    with agent.stream("go") as stream:
        events = []
        for event in stream:
            events.append(event)
            if event.type == "tool_start":
                stream.inject("also: use metric units")
                gate.opened.set()
    results_message = agent.messages[2]
    assert results_message["role"] == "user"
    assert "toolResult" in results_message["content"][0]
    assert results_message["content"][1:] == [{"text": "also: use metric units"}]
    injected = [e for e in events if isinstance(e, InputInjected)]
    assert len(injected) == 1 and injected[0].content == ({"text": "also: use metric units"},)
    # the event comes after the message that carries the input
    index = events.index(injected[0])
    assert isinstance(events[index - 1], MessageComplete)
    assert model.calls[1].messages[-1] == results_message
    assert_valid(agent)


def test_input_queued_when_the_model_ends_its_turn_gets_one_more_model_call() -> None:
    model = PausingModel(ScriptedModel(["first answer", "answer to the follow-up"]))
    agent = Agent(model)
    call = BackgroundInvoke(agent)
    assert model.paused.wait(10)
    agent.inject([{"text": "and one more thing"}])
    model.resume.set()
    result = call.result()
    assert result.stop_reason == "end_turn"
    assert result.text == "answer to the follow-up"
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert agent.messages[2]["content"] == [{"text": "and one more thing"}]
    assert result.metrics.cycles == 2
    assert_valid(agent)


def test_queued_input_is_written_before_the_closing_message_on_cancel_during_tools() -> None:
    gate = Gate(cooperative=True)
    agent = Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "never"]), tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    agent.inject("keep me")
    agent.cancel("stop")
    result = call.result()
    assert result.stop_reason == "cancelled"
    user = agent.messages[2]
    assert "toolResult" in user["content"][0] and user["content"][1] == {"text": "keep me"}
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert str(agent.messages).count("keep me") == 1
    assert_valid(agent)


def test_queued_input_survives_a_cancel_mid_stream() -> None:
    model = PausingModel(ScriptedModel([{"text": "partial answer here", "chunk_size": 3}]))
    agent = Agent(model)
    call = BackgroundInvoke(agent)
    assert model.paused.wait(10)
    agent.inject("keep me too")
    agent.cancel()
    result = call.result()
    assert result.stop_reason == "cancelled"
    roles = [m["role"] for m in agent.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert agent.messages[2]["content"] == [{"text": "keep me too"}]
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert_valid(agent)


def test_queued_input_is_kept_when_the_model_fails() -> None:
    from agent_sync.errors import ModelError

    model = PausingModel(
        ScriptedModel(
            [{"text": "a b c d", "chunk_size": 1, "error": ModelError("boom"), "error_after": 3}]
        )
    )
    agent = Agent(model)
    call = BackgroundInvoke(agent)
    assert model.paused.wait(10)
    agent.inject("do not lose me")
    model.resume.set()
    with pytest.raises(ModelError):
        call.result()
    assert agent.messages[-1]["role"] == "user"
    assert {"text": "do not lose me"} in agent.messages[-1]["content"]
    assert validate_history(agent.messages) == []
    assert not agent.is_running


@pytest.mark.parametrize("bad", ["", "   ", [], [{"toolUse": {}}], 42, [{"text": 1}]])
def test_invalid_injected_input_is_a_usage_error_and_nothing_is_queued(bad: object) -> None:
    gate = Gate()
    agent = Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "done"]), tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    run = agent.active_run
    assert run is not None
    with pytest.raises(UsageError):
        run.inject(bad)
    assert run.snapshot().queued_inputs == ()
    gate.opened.set()
    call.result()
    assert_valid(agent)


def test_injected_blocks_are_copied() -> None:
    gate = Gate()
    agent = Agent(ScriptedModel([{"tool_calls": [gate_call()]}, "done"]), tools=[gate.tool])
    call = BackgroundInvoke(agent)
    assert gate.entered.wait(10)
    blocks = [{"text": "original"}]
    agent.inject(blocks)  # type: ignore[arg-type]
    blocks[0]["text"] = "changed later"
    gate.opened.set()
    call.result()
    assert {"text": "original"} in agent.messages[2]["content"]
    assert "changed later" not in str(agent.messages)
