"""The input stage (DESIGN 13): the prompt is checked before anything of the run leaves it
(in block mode, before the model is called; race mode: tests/guardrails/test_input_race.py);
a trip leaves ``agent.messages`` as it was (and, in block mode, calls no model); a Redact is
what the model and the history get; a check past its timeout trips (or passes,
``on_error="pass"``); a cancel while a check is pending ends the run at once."""

from __future__ import annotations

import threading

import pytest

from agent_sync import Agent, UsageError, validate_history
from agent_sync.events import Done, GuardrailTripped, TextDelta
from agent_sync.guardrails import STOPPED_TEXT, Guardrail, GuardView, PatternGuard, Redact, Trip
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND


def _off_topic(view: GuardView) -> Trip | None:
    return Trip("off topic") if "poem" in view.text else None


@pytest.mark.parametrize("mode", ["block", "race"])
def test_an_input_trip_calls_no_model_and_leaves_the_history(mode: str) -> None:
    # race mode: the trip races the model call, which may have started (and used a turn)
    turns = ["first answer", "second answer"] if mode == "block" else ["an answer"]
    model = ScriptedModel(turns, repeat=mode == "race")
    guard = Guardrail(_off_topic, stage="input", mode=mode)  # type: ignore[arg-type]
    agent = Agent(model, guardrails=[guard])
    assert agent.invoke("hello").text == turns[0]
    before = agent.messages
    events = list(agent.stream("write a poem"))
    assert not any(isinstance(e, TextDelta) for e in events)
    trips = [e for e in events if isinstance(e, GuardrailTripped)]
    assert [(t.name, t.stage, t.reason) for t in trips] == [("_off_topic", "input", "off topic")]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.result.stop_reason == "guardrail" and done.result.text == ""
    assert done.result.message == {"role": "assistant", "content": [{"text": STOPPED_TEXT}]}
    assert agent.messages == before
    if mode == "block":
        assert len(model.calls) == 1  # the model was never called with it
    assert agent.invoke("hello again").text == turns[-1]
    assert "poem" not in repr(model.calls[-1].messages)
    assert validate_history(agent.messages) == []


def test_an_input_trip_on_a_first_prompt_leaves_an_empty_history() -> None:
    model = ScriptedModel(["answer"])
    agent = Agent(model, guardrails=[PatternGuard(r"\d{3}-\d{2}-\d{4}", stage="input")])
    result = agent.invoke("my ssn is 123-45-6789")
    assert result.stop_reason == "guardrail" and agent.messages == []
    assert model.calls == []


def test_an_input_redaction_is_what_the_model_and_history_get() -> None:
    model = ScriptedModel(["ok"])
    guard = PatternGuard(r"\d{3}-\d{2}-\d{4}", stage="input", action="redact")
    agent = Agent(model, guardrails=[guard])
    assert agent.invoke("my ssn is 123-45-6789").text == "ok"
    assert agent.messages[0]["content"] == [{"text": "my ssn is [redacted]"}]
    assert "6789" not in repr(model.calls[0].messages)


def test_a_check_past_its_timeout_trips_or_passes() -> None:
    release = threading.Event()

    def slow(view: GuardView) -> None:
        release.wait(HANG_BOUND)

    try:
        agent = Agent(ScriptedModel(["ok"]))
        result = agent.invoke(
            "hi", guardrails=[Guardrail(slow, stage="input", mode="block", timeout=0.05)]
        )
        assert result.stop_reason == "guardrail" and result.guardrail is not None
        assert "timeout" in result.guardrail.reason
        lenient = Guardrail(slow, stage="input", timeout=0.05, on_error="pass")
        assert agent.invoke("hi", guardrails=[lenient]).text == "ok"
    finally:
        release.set()


def test_cancel_while_an_input_check_is_pending_ends_the_run() -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(view: GuardView) -> Redact | None:
        entered.set()
        release.wait(HANG_BOUND)  # ignores its cancel_token on purpose
        return None

    model = ScriptedModel(["ok"])
    guard = Guardrail(stuck, stage="input", mode="block", timeout=HANG_BOUND)
    agent = Agent(model, guardrails=[guard])
    results: list[Done] = []

    def run() -> None:
        results.extend(e for e in agent.stream("hi") if isinstance(e, Done))

    worker = threading.Thread(target=run, name="test-input-cancel")
    worker.start()
    try:
        assert entered.wait(HANG_BOUND)
        agent.cancel("user left")
        worker.join(HANG_BOUND)  # returns without the check: it is abandoned
        assert not worker.is_alive()
    finally:
        release.set()
    assert results[0].result.stop_reason == "cancelled"
    assert results[0].result.message["content"] == [{"text": "Cancelled by user"}]
    assert model.calls == []
    assert agent.messages == []  # the prompt never passed its checks: not committed
    assert agent.invoke("again", guardrails=[]).text == "ok"


def test_input_injected_while_the_input_is_checked_is_refused_never_dropped() -> None:
    """An inject that lands while the input checks run (before the first model call) was
    accepted, then dropped with the run's queue when the prompt tripped: the run's input
    is not open until it has passed, so such an inject is refused."""
    checking, release = threading.Event(), threading.Event()

    def gate(view: GuardView) -> Trip | None:
        checking.set()
        release.wait(HANG_BOUND)
        return Trip("off topic") if "poem" in view.text else None

    model = ScriptedModel(["answer"])
    agent = Agent(model, guardrails=[Guardrail(gate, stage="input", mode="block")])
    results = []
    runner = threading.Thread(target=lambda: results.append(agent.invoke("write a poem")))
    runner.start()
    try:
        assert checking.wait(HANG_BOUND)
        with pytest.raises(UsageError, match="input"):
            agent.inject("and a limerick")
    finally:
        release.set()
        runner.join(HANG_BOUND)
    assert results[0].stop_reason == "guardrail"
    assert "limerick" not in repr(agent.messages) and agent.messages == []
    assert model.calls == []


def test_input_a_store_took_while_the_prompt_tripped_is_handed_back_never_answered() -> None:
    """Input injected through the store while the input checks ran is accepted by the
    store (another process may send it): the tripped run never checked it, so it commits
    none of it (the next call would send it unchecked) and hands it back in its result; it
    never goes on to answer it (its prompt was blocked: no model call)."""
    checking, release = threading.Event(), threading.Event()

    def gate(view: GuardView) -> Trip:
        checking.set()
        release.wait(HANG_BOUND)
        return Trip("off topic")

    store = MemoryRunStore()
    model = ScriptedModel(["never said"])
    guard = Guardrail(gate, stage="input", mode="block")
    agent = Agent(model, guardrails=[guard], store=store, conversation_id="c1")
    results = []
    runner = threading.Thread(target=lambda: results.append(agent.invoke("write a poem")))
    runner.start()
    try:
        assert checking.wait(HANG_BOUND)
        run = agent.active_run
        assert run is not None
        store.inject(run.run_id, "and a limerick")
    finally:
        release.set()
        runner.join(HANG_BOUND)
    assert results[0].stop_reason == "guardrail"
    assert results[0].unchecked_input == ({"text": "and a limerick"},)
    assert model.calls == []
    assert list(store.load("c1").messages) == [] == agent.messages
