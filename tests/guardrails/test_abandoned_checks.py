"""The one rule for a guardrail check the run stops waiting for (DESIGN 13): it never delays
the run's return, and it counts against the abandoned-thread cap of tools until it returns,
past the cap too (counted over it, so cancelled runs wait for their stuck tools meanwhile).
Each kind of check on a worker thread (an input check, an output ``every=`` judge) at a cap
of 0: the run returns while the check is stuck, and the count says so."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from agent_sync import Agent
from agent_sync.guardrails import Guardrail, GuardView
from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from agent_sync.tools import (
    abandoned_tool_threads,
    max_abandoned_tool_threads,
    set_max_abandoned_tool_threads,
)
from agent_sync.tools._abandoned import Abandonable
from tests.fixtures.bounds import HANG_BOUND


@pytest.fixture
def no_slots(quiet_cap: None) -> Iterator[None]:
    """A cap of 0, once the threads other tests left have ended (``quiet_cap``)."""
    limit = max_abandoned_tool_threads()
    set_max_abandoned_tool_threads(0)
    try:
        yield
    finally:
        set_max_abandoned_tool_threads(limit)


def _input_check(check: Callable[[GuardView], None]) -> Guardrail:
    return Guardrail(check, stage="input", mode="block", timeout=0.01, name="stuck")


def _output_judge(check: Callable[[GuardView], None]) -> Guardrail:
    return Guardrail(check, stage="output", every=4, timeout=0.01, name="stuck")


@pytest.mark.parametrize("make", [_input_check, _output_judge], ids=["input", "judge"])
def test_a_stuck_check_past_the_cap_never_holds_the_run_and_is_counted(
    no_slots: None, make: Callable[[Callable[[GuardView], None]], Guardrail]
) -> None:
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def stuck(view: GuardView) -> None:
        entered.set()
        release.wait(HANG_BOUND)  # ignores its cancel_token on purpose
        returned.set()

    before = abandoned_tool_threads()
    agent = Agent(ScriptedModel(["an answer to hold", "next"]))
    try:
        result = agent.invoke("hi", guardrails=[make(stuck)])
        assert entered.is_set() and not returned.is_set()  # not waited for
        assert result.stop_reason == "guardrail"  # past its timeout: fail closed
        assert abandoned_tool_threads() == before + 1  # counted, over the cap
    finally:
        release.set()
    for thread in [t for t in threading.enumerate() if t.name == "guardrail-stuck"]:
        thread.join(HANG_BOUND)
    assert abandoned_tool_threads() == before  # given back as it returned
    assert validate_history(agent.messages) == []
    assert agent.invoke("again").stop_reason == "end_turn"  # reusable


def test_abandon_and_end_count_once_in_either_order() -> None:
    before = abandoned_tool_threads()
    given_up = Abandonable()
    assert given_up.abandon() and not given_up.abandon()  # idempotent
    assert abandoned_tool_threads() == before + 1
    assert given_up.end()  # it had been given up: its slot is given back
    assert abandoned_tool_threads() == before
    returned = Abandonable()
    assert not returned.end()  # returned first: nothing was counted
    assert not returned.abandon() and not returned.abandoned
    assert abandoned_tool_threads() == before
