"""Thread safety, proven: cancels at every point of a run, many agents at once, no leaked
threads.

Nothing here assumes machine speed (CI is a loaded 2-core box):

* every checkpoint of a run is reached on purpose: the cancel is sent from inside the run,
  after its k-th stream event or from inside a tool, for every k, so each outcome is known;
* random cancel *times* are drawn from the length of an uncancelled run measured first on
  this machine, and only what holds at any time is asserted (a valid history, an idle and
  reusable agent), never how many cancels landed.

The random soaks run a few rounds here; ``python bench/soak_stress.py`` runs them for long
(``AGENT_SYNC_SOAK``, :mod:`tests.fixtures.soak`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent_sync import Agent, ConcurrentInvocationError, ToolContext, tool, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.messages import StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.doubles import assert_valid
from tests.fixtures.soak import rounds

pytestmark = pytest.mark.stress


@tool
def lookup(q: str, context: ToolContext) -> str:
    """Cooperative lookup.

    Args:
        q: What to look up.
    """
    context.raise_if_cancelled()
    return f"result for {q}"


@tool
def stubborn(q: str) -> str:
    """Non-cooperative: does a little work and never looks at cancel.

    Args:
        q: Echoed back.
    """
    return q + str(sum(range(2000)) % 7)


def multi_turn_script() -> list[dict[str, object]]:
    """Text, parallel tools, reasoning and a second tool round, then an answer."""
    return [
        {
            "text": "Let me look.",
            "tool_calls": [
                {"name": "lookup", "input": {"q": "a"}},
                {"name": "stubborn", "input": {"q": "b"}},
            ],
            "chunk_size": 3,
        },
        {"reasoning": "hmm", "tool_calls": [{"name": "lookup", "input": {"q": "c"}}]},
        {"text": "Here is the answer you wanted.", "chunk_size": 4},
    ]


class CancelAtEvent:
    """Cancels the agent from inside the stream, right after its ``at``-th event overall."""

    def __init__(self, at: int) -> None:
        self.inner = ScriptedModel(multi_turn_script(), repeat=True)
        self.at = at
        self.seen = 0
        self.agent: Agent | None = None

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        for event in self.inner.stream(request, cancel=cancel):
            yield event
            self.seen += 1
            if self.seen == self.at and self.agent is not None:
                self.agent.cancel("at event")


def new_agent(model: object = None) -> Agent:
    return Agent(
        model or ScriptedModel(multi_turn_script(), repeat=True),  # type: ignore[arg-type]
        tools=[lookup, stubborn],
        tool_grace_period=0.005,
    )


def test_a_cancel_after_every_stream_event_leaves_a_valid_reusable_history() -> None:
    total = CancelAtEvent(at=0)
    reference = new_agent(total)
    assert reference.invoke("question").stop_reason == "end_turn"
    assert total.seen > 20  # the script really spans three model calls
    for at in range(1, total.seen):
        model = CancelAtEvent(at)
        agent = new_agent(model)
        model.agent = agent
        result = agent.invoke("question")
        assert result.stop_reason == "cancelled", at
        assert_valid(agent)
        assert not agent.is_running
        model.at = -1  # no more cancels: the agent must simply work again
        assert agent.invoke("and now?").stop_reason == "end_turn"
        assert_valid(agent)


def test_a_cancel_from_inside_each_tool_leaves_a_valid_history() -> None:
    @tool
    def canceller(context: ToolContext) -> str:
        """Cancels its own run."""
        context.agent.cancel("from a tool")
        return "cancelled it"

    for name in ("lookup", "stubborn"):
        model = ScriptedModel(
            [{"tool_calls": [{"name": name, "input": {"q": "x"}}, {"name": "canceller"}]}],
            repeat=True,
        )
        agent = Agent(model, tools=[lookup, stubborn, canceller], tool_grace_period=0.005)
        result = agent.invoke("question")
        assert result.stop_reason == "cancelled"
        assert_valid(agent)


def uncancelled_run_seconds() -> float:
    """How long one whole run takes on this machine, now (the slowest of three)."""
    durations = []
    for _ in range(3):
        agent = new_agent()
        started = time.perf_counter()
        assert agent.invoke("question").stop_reason == "end_turn"
        durations.append(time.perf_counter() - started)
    return max(durations)


def run_with_random_cancel(agent: Agent, rng: random.Random, span: float) -> str:
    delay = rng.uniform(0, span)
    pause = threading.Event()  # never set: a timed wait places the cancel, it syncs nothing
    canceller = threading.Thread(
        target=lambda: (pause.wait(delay), agent.cancel("random")), name="test-random-cancel"
    )
    canceller.start()
    result = agent.invoke("question")
    canceller.join(10)
    assert not canceller.is_alive()
    return result.stop_reason


def test_hundreds_of_random_cancels_leave_every_history_valid() -> None:
    rng = random.Random(1234)
    span = uncancelled_run_seconds()
    for _ in range(rounds(60)):
        agent = new_agent()
        reason = run_with_random_cancel(agent, rng, span)
        assert reason in ("cancelled", "end_turn")
        assert_valid(agent)
        assert not agent.is_running
        assert agent.invoke("and now?").stop_reason == "end_turn"  # reusable
        assert_valid(agent)


def test_many_threads_each_with_its_own_agent_and_random_cancels() -> None:
    span = uncancelled_run_seconds()
    problems: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8, timeout=30)

    def worker(seed: int) -> None:
        try:
            rng = random.Random(seed)
            agent = new_agent()
            start.wait()
            for _ in range(rounds(10)):
                if rng.random() < 0.5:
                    run_with_random_cancel(agent, rng, span * 4)  # 8 threads: runs are slower
                else:
                    agent.invoke("question")
                problems.extend(validate_history(agent.messages))
                if agent.is_running:
                    problems.append("agent still running after invoke returned")
        except BaseException as exc:  # a background failure fails the test
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(n,), name=f"test-worker-{n}") for n in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(50)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert problems == []


def _contend(agent: Agent, barrier: threading.Barrier, outcomes: list[str]) -> None:
    barrier.wait()
    try:
        agent.invoke("hi")
        outcomes.append("ran")
    except ConcurrentInvocationError:
        outcomes.append("refused")


def test_two_threads_racing_on_one_agent_one_wins_one_is_refused() -> None:
    for _ in range(rounds(50)):
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
            thread.join(HANG_BOUND)
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
    assert started.wait(HANG_BOUND)
    agent.cancel()
    runner.join(HANG_BOUND)
    assert not runner.is_alive()
    release.set()  # the abandoned tool may now finish
    for thread in set(threading.enumerate()) - thread_baseline:
        thread.join(HANG_BOUND)
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
    max_examples=rounds(20),
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
