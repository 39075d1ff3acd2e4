"""Input queued in a guarded run that pauses for approval (DESIGN 13): its paused state
records that the run has input checks (``RunState.input_checked``), so a cancel of the
paused run never writes that input to the history unchecked. A resume checks it as any
inject; a cancel through a store keeps it, unsent, in the cancelled run's
``queued_inputs`` and hands it back in the done record the web closes the log with; a
local cancel (no store: nothing records it) says how much was not delivered, in a warning."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from agent_sync import Agent, Approve, RunState, tool, validate_history
from agent_sync.guardrails import GuardView, Trip, guardrail
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import MemoryRunStore
from agent_sync.stores._event_log import EventLogStore
from agent_sync.stores._rules import cancelled_while_lost
from agent_sync.testing import ScriptedModel
from agent_sync.web._follow import close_log

QUESTION = "a question asked meanwhile"
ASKS = {"text": "on it", "tool_calls": [{"name": "wipe", "input": {"path": "/a"}}]}


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return f"wiped {path}"


@guardrail(stage="input")
def no_attacks(view: GuardView) -> Trip | None:
    return Trip("injection") if "attack" in view.text else None


def _agent(model: ScriptedModel, **options: Any) -> Agent:
    return Agent(model, tools=[wipe], guardrails=[no_attacks], **options)


def _pause_with(agent: Agent, text: str) -> str:
    """Run until the gated call pauses the run, injecting ``text`` as its model call ends
    (before the pause): the paused run's id."""
    with agent.stream("wipe it") as stream:
        for event in stream:
            if event.type == "message" and event.message["role"] == "assistant":
                stream.inject(text)
    result = stream.result
    assert result is not None and result.stop_reason == "paused"
    return result.run_id


def test_a_local_cancel_of_a_paused_run_never_writes_its_unchecked_input(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel([ASKS, "the next answer"])
    agent = _agent(model)
    run_id = _pause_with(agent, QUESTION)
    with caplog.at_level(logging.WARNING, logger="agent_sync"):
        assert agent.cancel() is True
    assert "meanwhile" not in repr(agent.messages)  # never committed unchecked
    assert agent.messages[-1]["content"] == [{"text": CANCELLED_TEXT}]
    assert validate_history(agent.messages) == []
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert run_id in warning.getMessage() and "blocks=<1>" in warning.getMessage()
    assert "meanwhile" not in caplog.text  # said, never shown: nothing checked it
    assert agent.invoke("and now").text == "the next answer"
    assert "meanwhile" not in repr(model.calls[-1].messages)  # the model never saw it


@pytest.mark.parametrize("how", ["store.cancel", "another agent"])
def test_a_paused_run_cancelled_through_a_store_hands_its_input_back(
    make_store: Callable[[], EventLogStore], how: str
) -> None:
    model = ScriptedModel([ASKS, "the next answer"])
    store = make_store()
    run_id = _pause_with(_agent(model, store=store, conversation_id="c1"), QUESTION)
    other = make_store()  # another worker's
    if how == "store.cancel":
        assert other.cancel(run_id, "changed my mind") is True
    else:
        assert _agent(model, store=other, conversation_id="c1").cancel() is True
    logged = list(other.load("c1").messages)
    assert "meanwhile" not in repr(logged) and validate_history(logged) == []
    snapshot = other.get(run_id)
    assert snapshot is not None and snapshot.status == "cancelled"
    assert snapshot.queued_inputs == (({"text": QUESTION},),)  # kept, never sent
    # the web closes the log of a paused run it cancels: the done record hands it back
    assert close_log(other, run_id, 0, 60.0)
    (record,) = [event.data for event in other.read_events(run_id)]
    assert record["type"] == "done" and record["stop_reason"] == "cancelled"
    assert record["unchecked_input"] == [{"text": QUESTION}]
    again = _agent(model, store=make_store(), conversation_id="c1")
    assert again.invoke("and now").text == "the next answer"
    assert "meanwhile" not in repr(model.calls[-1].messages)


def test_the_paused_state_records_its_checks_and_a_resume_checks_the_input() -> None:
    store = MemoryRunStore()
    model = ScriptedModel([ASKS, "never"])
    _pause_with(_agent(model, store=store, conversation_id="c1"), "an attack, injected")
    stored = store.load("c1").run
    assert stored is not None and stored.state.input_checked
    data = stored.state.to_dict()
    assert RunState.from_dict(data).input_checked  # survives the round trip
    del data["input_checked"]  # a state stored by an earlier version
    assert not RunState.from_dict(data).input_checked
    resumer = _agent(model, store=store, conversation_id="c1")
    (request,) = resumer.pending_approvals
    result = resumer.resume({request.id: Approve()})
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    assert result.guardrail.stage == "input"
    assert len(model.calls) == 1  # never sent
    logged = list(store.load("c1").messages)
    assert "attack" not in repr(logged) and validate_history(logged) == []


def test_without_input_checks_a_cancelled_pause_writes_its_input_as_before() -> None:
    store = MemoryRunStore()
    agent = Agent(ScriptedModel([ASKS]), tools=[wipe], store=store, conversation_id="c1")
    run_id = _pause_with(agent, QUESTION)
    assert store.cancel(run_id, None) is True
    logged = list(store.load("c1").messages)
    assert {"text": QUESTION} in logged[-2]["content"]  # nothing to pass: nothing lost
    snapshot = store.get(run_id)
    assert snapshot is not None and snapshot.queued_inputs == ()
    assert close_log(store, run_id, 0, 60.0)
    assert "unchecked_input" not in store.read_events(run_id)[-1].data


def test_a_lost_run_cancelled_before_a_recoverer_took_it_keeps_its_input_too() -> None:
    """A running guarded run whose worker died is cancelled by the store's same rule."""
    store = MemoryRunStore()
    _pause_with(_agent(ScriptedModel([ASKS]), store=store, conversation_id="c1"), QUESTION)
    stored = store.load("c1").run
    assert stored is not None
    running = replace(stored.state, status="running", approvals=())  # as its worker left it
    cancelled = cancelled_while_lost(running, "gave up")
    assert cancelled.queued_inputs == (({"text": QUESTION},),)
    assert "meanwhile" not in repr(cancelled.messages)
    assert validate_history(list(cancelled.messages)) == []
