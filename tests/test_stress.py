"""Thread safety, proven: random cancels, many agents at once, no leaked threads.

Random cancel *times* here are not synchronisation: a canceller waits a random moment on
an Event nobody sets (a timed wait), to land the cancel anywhere in the run. Every history
is then checked against the invariant and every agent is used again.
"""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent_sync import Agent, ConcurrentInvocationError, ToolContext, tool, validate_history
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import assert_valid

pytestmark = pytest.mark.stress


@tool
def lookup(q: str, context: ToolContext) -> str:
    """Cooperative lookup that takes a moment."""
    context.wait(random.uniform(0, 0.002))
    return f"result for {q}"


@tool
def stubborn(q: str) -> str:
    """Non-cooperative: ignores cancel for a moment."""
    threading.Event().wait(random.uniform(0, 0.003))
    return q


def multi_turn_script() -> list[dict]:
    """Text, parallel tools, more text, a second tool round, then an answer."""
    return [
        {
            "text": "Let me look.",
            "tool_calls": [
                {"name": "lookup", "input": {"q": "a"}},
                {"name": "stubborn", "input": {"q": "b"}},
            ],
            "chunk_size": 3,
            "chunk_delay": 0.0002,
        },
        {
            "reasoning": "hmm",
            "tool_calls": [{"name": "lookup", "input": {"q": "c"}}],
            "chunk_size": 2,
            "chunk_delay": 0.0002,
        },
        {"text": "Here is the answer you wanted.", "chunk_size": 4, "chunk_delay": 0.0002},
    ]


def run_with_random_cancel(agent: Agent, rng: random.Random) -> str:
    delay = rng.uniform(0, 0.01)
    pause = threading.Event()
    canceller = threading.Thread(
        target=lambda: (pause.wait(delay), agent.cancel("random")), name="test-random-cancel"
    )
    canceller.start()
    result = agent.invoke("question", timeout=10)
    canceller.join(5)
    assert not canceller.is_alive()
    return result.stop_reason


def test_hundreds_of_random_cancels_leave_every_history_valid() -> None:
    rng = random.Random(1234)
    outcomes: dict[str, int] = {}
    for _ in range(300):
        model = ScriptedModel(multi_turn_script(), repeat=True)
        agent = Agent(model, tools=[lookup, stubborn], tool_grace_period=0.005)
        reason = run_with_random_cancel(agent, rng)
        outcomes[reason] = outcomes.get(reason, 0) + 1
        assert_valid(agent)
        # reusable: a second run on the same agent completes normally
        follow_up = agent.invoke("and now?")
        assert follow_up.stop_reason in ("end_turn", "max_cycles")
        assert_valid(agent)
    assert outcomes.get("cancelled", 0) > 100, outcomes  # the cancels really landed mid-run
    assert outcomes.get("end_turn", 0) > 0, outcomes


def test_many_threads_each_with_its_own_agent_and_random_cancels() -> None:
    problems: list[str] = []
    start = threading.Barrier(8, timeout=10)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        model = ScriptedModel(multi_turn_script(), repeat=True)
        agent = Agent(model, tools=[lookup, stubborn], tool_grace_period=0.005)
        start.wait()
        for _ in range(40):
            if rng.random() < 0.5:
                run_with_random_cancel(agent, rng)
            else:
                agent.invoke("question", timeout=10)
            problems.extend(validate_history(agent.messages))
            if agent.is_running:
                problems.append("agent still running after invoke returned")

    threads = [
        threading.Thread(target=worker, args=(n,), name=f"test-worker-{n}") for n in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads)
    assert problems == []


def _contend(agent: Agent, barrier: threading.Barrier, outcomes: list[str]) -> None:
    barrier.wait()
    try:
        agent.invoke("hi")
        outcomes.append("ran")
    except ConcurrentInvocationError:
        outcomes.append("refused")


def test_two_threads_racing_on_one_agent_one_wins_one_is_refused() -> None:
    for _ in range(100):
        agent = Agent(ScriptedModel(["answer"], repeat=True))
        barrier = threading.Barrier(2, timeout=5)
        outcomes: list[str] = []
        threads = [
            threading.Thread(
                target=_contend, args=(agent, barrier, outcomes), name=f"test-contender-{n}"
            )
            for n in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5)
        assert "ran" in outcomes
        assert_valid(agent)
        # each run added exactly one user+assistant pair: a refused call touched nothing
        assert len(agent.messages) == 2 * outcomes.count("ran")


def test_no_thread_outlives_a_cancelled_run(thread_baseline: set[threading.Thread]) -> None:
    release = threading.Event()
    started = threading.Event()

    @tool
    def slow(q: str) -> str:
        """Blocks until released (non-cooperative)."""
        started.set()
        release.wait(30)
        return q

    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "slow", "input": {"q": "x"}},
                    {"name": "lookup", "input": {"q": "y"}},
                ]
            }
        ]
    )
    agent = Agent(model, tools=[slow, lookup], tool_grace_period=0.01)
    runner = threading.Thread(
        target=agent.invoke, args=("go",), kwargs={"timeout": 30}, name="test-runner"
    )
    runner.start()
    assert started.wait(5)
    agent.cancel()
    runner.join(5)
    assert not runner.is_alive()
    release.set()  # the abandoned tool may now finish
    for thread in set(threading.enumerate()) - thread_baseline:
        thread.join(5)
    leftover = [t.name for t in set(threading.enumerate()) - thread_baseline if t.is_alive()]
    assert leftover == []


class InvokeCancelMachine(RuleBasedStateMachine):
    """Random sequences of invoke / cancel-at-event-k / stream-and-abandon on one agent."""

    def __init__(self) -> None:
        super().__init__()
        self.agent = Agent(
            ScriptedModel(multi_turn_script(), repeat=True),
            tools=[lookup, stubborn],
            tool_grace_period=0.005,
        )

    @rule()
    def invoke_to_the_end(self) -> None:
        assert self.agent.invoke("q").stop_reason in ("end_turn", "max_cycles")

    @rule(k=st.integers(min_value=0, max_value=40))
    def cancel_at_event(self, k: int) -> None:
        stream = self.agent.stream("q")
        for index, _ in enumerate(stream):
            if index == k:
                self.agent.cancel("rule")
        assert stream.result is not None

    @rule(k=st.integers(min_value=0, max_value=40))
    def abandon_stream_at_event(self, k: int) -> None:
        stream = self.agent.stream("q")
        for index, _ in enumerate(stream):
            if index == k:
                break
        stream.close()

    @rule()
    def idle_cancel(self) -> None:
        assert self.agent.cancel() is False

    @invariant()
    def history_is_valid_and_agent_idle(self) -> None:
        assert validate_history(self.agent.messages) == []
        assert not self.agent.is_running
        if self.agent.messages:
            assert self.agent.messages[-1]["role"] == "assistant"


TestInvokeCancelMachine = InvokeCancelMachine.TestCase
TestInvokeCancelMachine.settings = settings(
    max_examples=40,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
