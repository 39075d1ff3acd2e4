"""The retry policy: what is retried, how long it waits, and that it stops on cancel."""

from __future__ import annotations

import pytest

from agent_sync import Agent, ModelError, RetryPolicy, UsageError
from agent_sync.errors import ModelConnectionError, ModelHTTPError, ModelThrottledError
from agent_sync.events import ModelRetry
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import assert_valid

FAST = RetryPolicy(initial_delay=0.001, max_delay=0.01, jitter=0)


def test_retryable_errors_before_content_are_retried_then_succeed() -> None:
    model = ScriptedModel(
        [
            {"error": ModelThrottledError("429")},
            {"error": ModelHTTPError("503", status=503)},
            {"error": ModelConnectionError("reset")},
            "finally",
        ]
    )
    agent = Agent(model, retry=FAST)
    events = list(agent.stream("go"))
    retries = [e for e in events if isinstance(e, ModelRetry)]
    assert [r.attempt for r in retries] == [1, 2, 3]
    assert retries[0].error == "ModelThrottledError: 429"
    assert events[-1].result.text == "finally"  # type: ignore[union-attr]
    assert events[-1].result.metrics.retries == 3  # type: ignore[union-attr]
    assert len(model.calls) == 4
    assert_valid(agent)


def test_non_retryable_error_is_raised_at_once() -> None:
    model = ScriptedModel([{"error": ModelHTTPError("bad request", status=400)}, "unused"])
    with pytest.raises(ModelHTTPError, match="bad request"):
        Agent(model, retry=FAST).invoke("go")
    assert len(model.calls) == 1


def test_error_after_content_is_not_retried() -> None:
    model = ScriptedModel(
        [
            {
                "text": "half an answer",
                "chunk_size": 2,
                "error": ModelThrottledError("late"),
                "error_after": 2,
            },
            "unused",
        ]
    )
    with pytest.raises(ModelThrottledError):
        Agent(model, retry=FAST).invoke("go")
    assert len(model.calls) == 1


def test_attempts_are_bounded() -> None:
    model = ScriptedModel([{"error": ModelThrottledError("429")}], repeat=True)
    agent = Agent(model, retry=RetryPolicy(max_attempts=3, initial_delay=0.001, jitter=0))
    with pytest.raises(ModelThrottledError):
        agent.invoke("go")
    assert len(model.calls) == 3
    assert_valid(agent)


def test_delays_grow_exponentially_and_are_capped() -> None:
    policy = RetryPolicy(initial_delay=1, max_delay=5, jitter=0)
    assert [policy.delay_for(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_jitter_stays_within_bounds() -> None:
    policy = RetryPolicy(initial_delay=1, max_delay=100, jitter=0.5)
    for _ in range(50):
        assert 2 <= policy.delay_for(2) <= 2.5


def test_retry_after_is_honoured_up_to_max_delay() -> None:
    policy = RetryPolicy(initial_delay=1, max_delay=20, jitter=0)
    assert policy.delay_for(1, ModelThrottledError(retry_after=7)) == 7
    assert policy.delay_for(1, ModelThrottledError(retry_after=70)) == 20
    assert policy.delay_for(3, ModelThrottledError(retry_after=0.5)) == 4


def test_agent_waits_the_policy_delays() -> None:
    model = ScriptedModel(
        [
            {"error": ModelThrottledError("a", retry_after=0.02)},
            {"error": ModelThrottledError("b")},
            "ok",
        ]
    )
    agent = Agent(model, retry=RetryPolicy(initial_delay=0.001, max_delay=1, jitter=0))
    delays = [e.delay for e in agent.stream("go") if isinstance(e, ModelRetry)]
    assert delays == [0.02, 0.002]


def test_invalid_policy_is_refused() -> None:
    with pytest.raises(UsageError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(UsageError):
        RetryPolicy(initial_delay=-1)


def test_plain_model_errors_are_not_retryable_by_default() -> None:
    assert ModelError("x").retryable is False
    assert ModelThrottledError().retryable is True
    assert ModelHTTPError("x", status=500).retryable is True
    assert ModelHTTPError("x", status=401).retryable is False


def test_a_jittered_back_off_never_draws_from_the_global_random_state() -> None:
    """An application (or a property test) may seed ``random``; a run's back-off, in its
    thread, must not move that state (Hypothesis reported another test's retry as "the
    random module used inside strategies")."""
    import random

    random.seed(42)
    state = random.getstate()
    model = ScriptedModel([{"error": ModelThrottledError("429")}, "after one retry"])
    jittered = RetryPolicy(initial_delay=0.001, max_delay=0.01, jitter=0.001)
    assert Agent(model, retry=jittered).invoke("go").text == "after one retry"
    assert random.getstate() == state
