"""Injected input goes through the input stage (DESIGN 13) before it is committed to the
history: a trip stops the run as an input trip does (the inject is in no message the model,
the history or the store gets), and a Redact is what they get."""

from __future__ import annotations

from agent_sync import Agent, validate_history
from agent_sync.events import AgentEvent, GuardrailTripped, InputInjected
from agent_sync.guardrails import STOPPED_TEXT, Guardrail, GuardView, PatternGuard, Trip
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.doubles import BackgroundInvoke
from tests.run._gates import Gate, PausingModel, gate_call


def _no_attacks(view: GuardView) -> Trip | None:
    return Trip("injection") if "attack" in view.text else None


def test_an_inject_during_tools_that_trips_stops_the_run_without_it() -> None:
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "never", "after"])
    agent = Agent(model, tools=[gate.tool], guardrails=[Guardrail(_no_attacks, stage="input")])
    events: list[AgentEvent] = []
    with agent.stream("go") as stream:
        for event in stream:
            events.append(event)
            if event.type == "tool_start":
                stream.inject("an attack, injected")
                gate.opened.set()
    trips = [e for e in events if isinstance(e, GuardrailTripped)]
    assert [(t.stage, t.reason) for t in trips] == [("input", "injection")]
    assert not any(isinstance(e, InputInjected) for e in events)
    result = stream.result
    assert result is not None and result.stop_reason == "guardrail"
    assert "attack" not in repr(agent.messages) and len(model.calls) == 1
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert agent.messages[-1]["content"] == [{"text": STOPPED_TEXT}]
    assert validate_history(agent.messages) == []
    assert agent.invoke("go on").text == "never"  # the agent goes on
    assert "attack" not in repr(model.calls[-1].messages)


def test_an_inject_queued_at_the_end_of_the_turn_that_trips_is_not_answered() -> None:
    model = PausingModel(ScriptedModel(["first answer", "never"]))
    agent = Agent(model, guardrails=[Guardrail(_no_attacks, stage="input")])
    call = BackgroundInvoke(agent)
    assert model.paused.wait(HANG_BOUND)
    agent.inject("an attack")
    model.resume.set()
    result = call.result(HANG_BOUND)
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    assert agent.messages == [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [{"text": "first answer"}]},
    ]
    assert model.calls == 1


def test_an_inject_is_redacted_before_the_model_and_history_see_it() -> None:
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "ok"])
    ssn = PatternGuard(r"\d{3}-\d{2}-\d{4}", stage="input", action="redact")
    agent = Agent(model, tools=[gate.tool], guardrails=[ssn])
    with agent.stream("go") as stream:
        for event in stream:
            if event.type == "tool_start":
                stream.inject("mine is 123-45-6789")
                gate.opened.set()
    assert agent.messages[2]["content"][1:] == [{"text": "mine is [redacted]"}]
    assert "6789" not in repr(model.calls[1].messages) and "6789" not in repr(agent.messages)
