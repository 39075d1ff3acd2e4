"""Injected input is committed only once its input checks passed it, whatever ends the run
(DESIGN 13): input a run took as it ended, which nothing checked (a cancel never waits for
a check), is never written to the history (the next call would send it unchecked), nor
lost: it is handed back in ``result.unchecked_input`` and the store's done record. A store's
inject that reopens a finished run is checked before the model sees it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from agent_sync import Agent, UsageLimits, validate_history
from agent_sync._run_log._records import done_record
from agent_sync.errors import ModelError
from agent_sync.events import Done, InputInjected
from agent_sync.guardrails import Guardrail, GuardView, PatternGuard, Trip
from agent_sync.result import AgentResult
from agent_sync.stores import RunStore
from agent_sync.testing import ScriptedModel
from agent_sync.testing.run_store_contract._signals import _EndHeld
from agent_sync.web import encode_event
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.doubles import BackgroundInvoke
from tests.run._gates import Gate, gate_call

QUESTION = "a question asked meanwhile"


def _no_attacks(view: GuardView) -> Trip | None:
    return Trip("injection") if "attack" in view.text else None


def _checked(**options: Any) -> Guardrail:
    return Guardrail(_no_attacks, stage="input", **options)


def _after_the_tools(stream: Any, event: Any) -> bool:
    """Inject once the tool round's message is out: after its injects were checked, before
    the next model call (where a cancel, a usage limit or max_cycles ends the run)."""
    if event.type == "message" and event.message["role"] == "user":
        stream.inject(QUESTION)
        return True
    return False


def _cancel_after_the_tools(stream: Any, event: Any) -> bool:
    if _after_the_tools(stream, event):
        stream.cancel()
        return True
    return False


def _during_the_tool(gate: Gate) -> Callable[[Any, Any], bool]:
    def inject(stream: Any, event: Any) -> bool:
        if event.type == "tool_start":
            stream.inject(QUESTION)
            gate.opened.set()  # its result trips the tool_result check
            return True
        return False

    return inject


ENDINGS = ["cancelled", "usage_limit", "max_cycles", "tool_result trip"]


@pytest.mark.parametrize("ending", ENDINGS)
def test_input_queued_as_the_run_ends_is_handed_back_never_committed(ending: str) -> None:
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "the next answer"])
    guards: list[Guardrail | PatternGuard] = [_checked()]
    options: dict[str, Any] = {}
    act: Callable[[Any, Any], bool] = _after_the_tools
    if ending == "cancelled":
        act = _cancel_after_the_tools
    elif ending == "usage_limit":
        options["usage_limits"] = UsageLimits(requests=1)
    elif ending == "max_cycles":
        options["max_cycles"] = 1
    else:
        guards.append(PatternGuard("gate result", stage="tool_result", name="results"))
        act = _during_the_tool(gate)
    if ending != "tool_result trip":
        gate.opened.set()
    agent = Agent(model, tools=[gate.tool], guardrails=guards, **options)
    events: list[Any] = []
    acted = False
    with agent.stream("go") as stream:
        for event in stream:
            events.append(event)
            acted = acted or act(stream, event)
    result = stream.result
    assert acted and result is not None
    stop = "guardrail" if ending == "tool_result trip" else ending
    assert result.stop_reason == stop
    assert "meanwhile" not in repr(agent.messages)  # never committed unchecked
    assert result.unchecked_input == ({"text": QUESTION},)  # nor lost: handed back
    frame = encode_event(Done(result=result, run_id=result.run_id))  # the web's done frame
    assert frame is not None and b'"unchecked_input"' in frame and QUESTION.encode() in frame
    assert not any(isinstance(e, InputInjected) for e in events)
    assert validate_history(agent.messages) == []
    assert len(model.calls) == 1  # the model never saw it
    assert agent.invoke("and now").text == "the next answer"
    assert "meanwhile" not in repr(model.calls[-1].messages)


def test_input_whose_check_a_cancel_cut_short_is_handed_back() -> None:
    """A cancel while an inject is checked returns without waiting for the check (the
    check is abandoned): the inject is neither committed nor dropped."""
    checking, release = threading.Event(), threading.Event()

    def slow(view: GuardView) -> None:
        if "slow" in view.text:
            checking.set()
            release.wait(HANG_BOUND)  # ignores its cancel token: abandoned
        return None

    gate = Gate()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "the next answer"])
    guard = Guardrail(slow, stage="input", mode="block", timeout=HANG_BOUND)
    agent = Agent(model, tools=[gate.tool], guardrails=[guard], tool_grace_period=0.05)
    call = BackgroundInvoke(agent)
    try:
        assert gate.entered.wait(HANG_BOUND)
        agent.inject("a slow question")
        gate.opened.set()
        assert checking.wait(HANG_BOUND)
        assert agent.cancel("enough") is True
        result = call.result(HANG_BOUND)
    finally:
        release.set()
    assert result.stop_reason == "cancelled"
    assert "slow" not in repr(agent.messages)
    assert result.unchecked_input == ({"text": "a slow question"},)  # it was dropped
    assert validate_history(agent.messages) == []
    assert len(model.calls) == 1


def test_without_input_checks_queued_input_is_committed_as_before() -> None:
    gate = Gate()
    gate.opened.set()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "never"])
    guard = PatternGuard(r"sk-[A-Za-z0-9]{20,}", stage="output", name="keys")
    agent = Agent(model, tools=[gate.tool], guardrails=[guard])
    with agent.stream("go") as stream:
        for event in stream:
            _cancel_after_the_tools(stream, event)
    result = stream.result
    assert result is not None and result.unchecked_input == ()
    assert {"text": QUESTION} in agent.messages[-2]["content"]  # unchecked: none to pass
    assert validate_history(agent.messages) == []


def test_a_failed_runs_queued_input_is_checked_by_the_next_call() -> None:
    """A failed run has no result to hand input back in: it keeps queued input in its
    trailing user message (``invoke()`` retries it), which the next call checks as its
    prompt, so it is never sent unchecked."""
    gate = Gate()
    gate.opened.set()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, {"error": ModelError("down")}])
    agent = Agent(model, tools=[gate.tool], guardrails=[_checked(mode="block")])
    with pytest.raises(ModelError), agent.stream("go") as stream:
        for event in stream:
            if event.type == "message" and event.message["role"] == "user":
                stream.inject("an attack, injected")
    assert {"text": "an attack, injected"} in agent.messages[-1]["content"]
    assert validate_history(agent.messages) == []
    result = agent.invoke("again")
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    assert result.guardrail.stage == "input"
    assert len(model.calls) == 2 and "attack" not in repr(model.calls[1].messages)


# -- through a store: input it accepted as the run's end was stored --


def _late(
    make_store: Callable[[], RunStore], where: str, agent_of: Callable[[RunStore], Agent], text: str
) -> tuple[AgentResult, RunStore]:
    store = make_store()
    held = _EndHeld(store, hold_signals=where == "queued")
    agent = agent_of(held)
    (result,) = held.inject_at_the_held_commit(lambda: agent.invoke("hello"), text, where)
    return result, store


@pytest.mark.parametrize("where", ["delivered", "queued"])
def test_a_store_inject_that_reopens_the_run_is_checked_first(
    make_store: Callable[[], RunStore], where: str
) -> None:
    """The run's turn was over when the store accepted the inject: the run goes on to
    answer it, but only once its input checks passed it (a trip: never sent, never in the
    stored history)."""
    model = ScriptedModel(["first answer", "never"])

    def agent_of(store: RunStore) -> Agent:
        return Agent(model, store=store, conversation_id="c1", guardrails=[_checked()])

    result, store = _late(make_store, where, agent_of, "an attack, injected")
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    assert result.guardrail.stage == "input" and result.unchecked_input == ()
    assert len(model.calls) == 1  # never sent
    logged = list(store.load("c1").messages)
    assert "attack" not in repr(logged)
    assert [m["role"] for m in logged] == ["user", "assistant"]
    assert validate_history(logged) == []


@pytest.mark.parametrize("where", ["delivered", "queued"])
def test_a_store_inject_that_reopens_the_run_is_answered_as_checked(
    make_store: Callable[[], RunStore], where: str
) -> None:
    model = ScriptedModel(["first answer", "the late question, answered"])
    redact = PatternGuard(r"\d{4}", stage="input", action="redact", name="pins")

    def agent_of(store: RunStore) -> Agent:
        return Agent(model, store=store, conversation_id="c1", guardrails=[redact])

    result, store = _late(make_store, where, agent_of, "my pin is 6789")
    assert result.text == "the late question, answered"
    assert "6789" not in repr(model.calls[1].messages)  # redacted: checked before sent
    logged = list(store.load("c1").messages)
    assert {"text": "my pin is [redacted]"} in logged[2]["content"]
    assert "6789" not in repr(logged) and validate_history(logged) == []


@pytest.mark.parametrize("where", ["delivered", "queued"])
def test_a_store_inject_that_reaches_a_stopped_run_is_handed_back(
    make_store: Callable[[], RunStore], where: str
) -> None:
    """A run a usage limit stopped never goes on: input the store accepted as its end was
    stored is not committed unchecked, but handed back in the result and the done
    record."""
    gate = Gate()
    gate.opened.set()
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "the next answer"])

    def agent_of(store: RunStore) -> Agent:
        return Agent(
            model, tools=[gate.tool], store=store, conversation_id="c1",
            guardrails=[_checked()], usage_limits=UsageLimits(requests=1),
        )  # fmt: skip

    result, store = _late(make_store, where, agent_of, QUESTION)
    assert result.stop_reason == "usage_limit"
    logged = list(store.load("c1").messages)
    assert "meanwhile" not in repr(logged) and validate_history(logged) == []
    assert result.unchecked_input == ({"text": QUESTION},)
    record = done_record(Done(result=result, run_id=result.run_id))
    assert record["unchecked_input"] == [{"text": QUESTION}]
    assert len(model.calls) == 1
    again = Agent(model, store=store, conversation_id="c1", guardrails=[_checked()])
    assert again.invoke("and now").text == "the next answer"
    assert "meanwhile" not in repr(model.calls[-1].messages)
