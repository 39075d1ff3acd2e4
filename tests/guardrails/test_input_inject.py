"""Injected input goes through the input stage (DESIGN 13) before it is committed to the
history: a trip stops the run as an input trip does (the inject is in no message the model,
the history or the store gets), and a Redact is what they get."""

from __future__ import annotations

import pytest

from agent_sync import Agent, validate_history
from agent_sync.errors import UsageError
from agent_sync.events import AgentEvent, GuardrailTripped, InputInjected
from agent_sync.guardrails import STOPPED_TEXT, Guardrail, GuardView, PatternGuard, Trip
from agent_sync.run._inbox import Inbox
from agent_sync.testing import ScriptedModel
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
    with agent.stream("go") as stream:
        for event in stream:  # the first text: the prompt passed its checks, input is taken
            if event.type == "text" and not model.resume.is_set():
                stream.inject("an attack")  # queued before the answer ends
                model.resume.set()  # the model pauses after its first delta, or not at all
    result = stream.result
    assert result is not None
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


def test_input_injected_while_an_inject_is_checked_is_refused_never_dropped() -> None:
    """The loop takes queued input and holds the inbox in one step: what comes while that
    input is checked is refused (``UsageError``), so an inject trip drops nothing the run
    accepted (it dropped such input before)."""
    refused: list[str] = []

    def check(view: GuardView) -> Trip | None:
        if "attack" not in view.text:
            return None
        try:  # a user's inject while this check runs
            agent.inject("a question asked meanwhile")
        except UsageError as exc:
            refused.append(str(exc))
        return Trip("injection")

    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "never"])
    agent = Agent(model, tools=[gate.tool], guardrails=[Guardrail(check, stage="input")])
    with agent.stream("go") as stream:
        for event in stream:
            if event.type == "tool_start":
                stream.inject("an attack, injected")
                gate.opened.set()
    assert len(refused) == 1 and "being checked" in refused[0]
    result = stream.result
    assert result is not None and result.stop_reason == "guardrail"
    assert "attack" not in repr(agent.messages) and "meanwhile" not in repr(agent.messages)
    assert validate_history(agent.messages) == []


def test_the_inbox_is_held_from_the_take_to_the_pass() -> None:
    inbox = Inbox()
    inbox.put([{"text": "first"}])
    assert inbox.take(hold=True) == [{"text": "first"}]
    with pytest.raises(UsageError, match="being checked"):
        inbox.put([{"text": "meanwhile"}])
    inbox.open()
    inbox.put([{"text": "after"}])
    assert inbox.take(hold=True) == [{"text": "after"}]
    inbox.open()
    assert inbox.take(hold=True) == [] and inbox.take_or_close(hold=True) == []
    with pytest.raises(UsageError, match="over"):
        inbox.put([{"text": "late"}])
