"""Ctrl-C at every point of a run's release, and of its start, in every kind of run.

The release (``RunDriver.release``, ``release_surely``, ``RunDriver.close``) gives the agent
back and closes the turn: it must run to its end whatever a Ctrl-C does, or the agent stays
held for good. It is protected (``agent_sync._signal_safe.ki_protected``): a Ctrl-C landing
in it, at its entry or between the undo stack's pop of an action and its run, is raised once
it returns. Each test sweeps every point where CPython would run the SIGINT handler
(tests/fixtures/interrupt_points.py: the process's handler, called in the right frame), in
five kinds of run, and checks after each: the Ctrl-C reached the caller (deferred, never
lost), the agent is idle, the history valid and closed, and the next call works with its
prompt in a message of its own.
"""

from __future__ import annotations

import inspect
import signal
import threading
from collections.abc import Callable
from types import CodeType
from typing import Any

import pytest

from agent_sync import Agent, RetryPolicy, tool, validate_history
from agent_sync.errors import ModelThrottledError
from agent_sync.run._driver import RunDriver, release_surely
from agent_sync.run._hooks import HookRunner
from agent_sync.testing import ScriptedModel
from tests.fixtures.interrupt_points import SIGNAL, Interrupter, run_interrupted


@tool
def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: What to look up.
    """
    return f"result for {q}"


def _agent(kind: str) -> Agent:
    if kind == "tool round":
        turns: list[Any] = [{"tool_calls": [{"name": "lookup", "input": {"q": "x"}}]}, "answer"]
        return Agent(ScriptedModel(turns, repeat=True), tools=[lookup])
    if kind == "retry back-off":
        turns = [{"error": ModelThrottledError("slow down")}, "answer"]
        retry = RetryPolicy(initial_delay=0.001, max_delay=0.001, jitter=0)
        return Agent(ScriptedModel(turns, repeat=True), retry=retry)
    return Agent(ScriptedModel(["answer"], repeat=True))


def _operation(kind: str, agent: Agent) -> Callable[[], object]:
    if kind == "timeout=":
        return lambda: agent.invoke("question", timeout=30)
    if kind == "stream":

        def stream() -> None:
            with agent.stream("question") as events:
                for _ in events:
                    pass

        return stream
    return lambda: agent.invoke("question")


Region = tuple[frozenset[CodeType], frozenset[CodeType]]  # Interrupter's within, only_in

KINDS = ["invoke", "timeout=", "tool round", "retry back-off", "stream"]

# The release and all it calls, from its entry (the protecting wrapper's, when protected).
_RELEASES = (release_surely, RunDriver.release, RunDriver.close)
RELEASE: Region = (
    frozenset(f.__code__ for f in _RELEASES)
    | frozenset(inspect.unwrap(f).__code__ for f in _RELEASES),
    frozenset(),
)
# The run's start: the steps' generator's own frame (its entry, the hooks' return, ...)
# and the hooks' run_started.
START: Region = (
    frozenset(),
    frozenset({RunDriver._drive.__code__, HookRunner.run_started.__code__}),
)


def _sweep(kind: str, region: Region) -> int:
    """Interrupt ``kind``'s run at each point of ``region``; check the agent after each."""
    within, only_in = region
    counter = Interrupter(SIGNAL, within=within, only_in=only_in)
    assert not run_interrupted(counter, _operation(kind, _agent(kind)))
    assert counter.points > 3, counter
    interrupted = 0
    for at in range(1, counter.points + 1):
        agent = _agent(kind)
        interrupter = Interrupter(SIGNAL, at, within=within, only_in=only_in)
        stopped = run_interrupted(interrupter, _operation(kind, agent))
        where = interrupter.where
        if not where:
            continue  # this run went through fewer points (timing): nothing was pressed
        assert stopped, f"{kind}: the Ctrl-C at {where} was lost"
        interrupted += 1
        _check(agent, f"{kind}, Ctrl-C at {where}")
    assert interrupted >= counter.points // 2, (interrupted, counter.points)
    return interrupted


def _check(agent: Agent, what: str) -> None:
    assert not agent.is_running, f"{what}: the agent is held"
    assert validate_history(agent.messages) == [], (what, agent.messages)
    assert agent.messages[-1]["role"] == "assistant", (what, agent.messages)
    result = agent.invoke("next")
    assert result.stop_reason == "end_turn", (what, result)
    assert {"role": "user", "content": [{"text": "next"}]} in agent.messages, (
        what,
        agent.messages,
    )
    assert validate_history(agent.messages) == [] and not agent.is_running, what


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_anywhere_in_the_release_leaves_the_agent_reusable(kind: str) -> None:
    """Today: a Ctrl-C at the entry of ``release_surely`` or just after the undo stack pops
    an action leaves the agent held (``is_running``) and every later call refused."""
    assert threading.current_thread() is threading.main_thread()
    _sweep(kind, RELEASE)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_at_the_start_of_a_run_closes_its_turn(kind: str) -> None:
    """Today: a Ctrl-C in the hooks' ``run_started`` (before the steps' ``try``) leaves the
    prompt without a closing turn, and the next prompt joins the same user message."""
    assert threading.current_thread() is threading.main_thread()
    _sweep(kind, START)


def test_a_ctrl_c_in_a_protected_section_is_raised_when_it_returns() -> None:
    """A real SIGINT to the main thread inside a protected function: the function runs to
    its end, and KeyboardInterrupt is raised as it returns (by the outermost one)."""
    from agent_sync._signal_safe import ki_protected

    assert threading.current_thread() is threading.main_thread()
    steps: list[str] = []

    @ki_protected
    def inner() -> None:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # handled as this returns
        steps.append("inner")

    @ki_protected
    def outer() -> str:
        inner()
        steps.append("outer")  # the inner section's end does not raise: this one does
        return "done"

    with pytest.raises(KeyboardInterrupt):
        outer()
    assert steps == ["inner", "outer"]
    assert outer.__name__ == "outer"


def test_the_handler_is_only_installed_over_pythons_default() -> None:
    """An application's own SIGINT handler is left in place; Python's default is replaced
    when a protected function is entered."""
    from agent_sync._signal_safe import _on_sigint, ki_protected

    assert threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT)
    seen: list[int] = []

    def own(signum: int, frame: object) -> None:
        seen.append(signum)

    protected = ki_protected(lambda: signal.getsignal(signal.SIGINT))
    assert previous is _on_sigint  # installed at import: the test process had the default
    try:
        signal.signal(signal.SIGINT, own)
        assert protected() is own
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert protected() is _on_sigint
    finally:
        signal.signal(signal.SIGINT, previous)
