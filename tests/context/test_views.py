"""The views the context policies send: valid for every provider over long conversations
with tool rounds, bounded as configured, ending with the current user message; the stored
history keeps everything."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sync import Agent, tool, validate_history
from agent_sync.context import PLACEHOLDER_TEXT, SUMMARY_HEADING, SlidingWindow, Summarizing
from agent_sync.errors import UsageError
from agent_sync.messages import Message
from agent_sync.testing import ScriptedModel


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key} " * 5


def _script(rounds: list[int], rng: random.Random) -> list[Any]:
    """One scripted turn list: per invocation, ``n`` tool rounds (1-3 calls each) then text."""
    turns: list[Any] = []
    for number, tool_rounds in enumerate(rounds):
        for _ in range(tool_rounds):
            calls = [
                {"name": "lookup", "input": {"key": f"k{number}-{i}"}}
                for i in range(rng.randint(1, 3))
            ]
            turns.append({"tool_calls": calls})
        turns.append(f"answer {number} " + "x" * rng.randint(0, 200))
    return turns


def _converse(policy: Any, rounds: list[int], seed: int = 0) -> tuple[Agent, ScriptedModel]:
    rng = random.Random(seed)
    model = ScriptedModel(_script(rounds, rng))
    agent = Agent(model, tools=[lookup], context=policy)
    for number in range(len(rounds)):
        result = agent.invoke(f"question {number} " + "y" * rng.randint(0, 300))
        assert result.stop_reason == "end_turn"
    return agent, model


def _check_view(view: list[Message], history: list[Message]) -> None:
    assert validate_history(view) == []
    assert view[-1]["role"] == "user"
    assert view[0]["role"] == "user"
    assert not any("toolResult" in block for block in view[0]["content"])


def _is_slice(part: list[Message], history: list[Message]) -> bool:
    if not part:
        return True
    return any(history[i : i + len(part)] == part for i, m in enumerate(history) if m == part[0])


def _check_all(agent: Agent, model: ScriptedModel) -> None:
    """Every view sent is valid and is the stored messages themselves (behind at most one
    lead message: a placeholder, or a summary, alone or before the prompt it leads)."""
    history = agent.messages
    assert validate_history(history) == []
    for call in model.calls:
        view = list(call.messages)
        _check_view(view, history)
        first = view[0]["content"][0].get("text", "")
        body = view
        if first.startswith((PLACEHOLDER_TEXT, SUMMARY_HEADING)):
            rest = view[0]["content"][1:]
            body = ([{"role": "user", "content": rest}] if rest else []) + view[1:]
        assert _is_slice(body, history)


@pytest.mark.parametrize("max_messages", [3, 4, 5, 7, 12, 40])
def test_a_sliding_window_sends_valid_bounded_views_and_the_history_keeps_everything(
    max_messages: int,
) -> None:
    rounds = [random.Random(i).choice([0, 0, 1, 2, 4]) for i in range(40)]
    agent, model = _converse(SlidingWindow(max_messages=max_messages), rounds)
    _check_all(agent, model)
    assert len(agent.messages) == 2 * len(rounds) + 2 * sum(rounds)  # nothing was dropped
    for call in model.calls:
        assert len(call.messages) <= max_messages
    # the last call saw the last question, the first the first
    assert "question 39" in str(model.calls[-1].messages[-1])
    assert model.calls[0].messages[0]["content"][0]["text"].startswith("question 0")


def test_a_window_sends_as_much_as_fits_and_starts_behind_a_placeholder_inside_a_tool_loop() -> (
    None
):
    agent, model = _converse(SlidingWindow(max_messages=5), [12])  # one prompt, 12 tool rounds
    last = list(model.calls[-1].messages)
    assert last[0] == {"role": "user", "content": [{"text": PLACEHOLDER_TEXT}]}
    assert last[1]["role"] == "assistant"
    assert len(last) == 5
    assert last[1:] == agent.messages[-5:-1]  # the stored messages, as they are


def test_a_token_budget_bounds_the_view_using_the_provider_usage() -> None:
    # every call reports 10 input tokens per 4 characters... the scripted model's estimate
    rounds = [1] * 30
    agent, model = _converse(SlidingWindow(max_messages=1000, max_tokens=600), rounds)
    _check_all(agent, model)
    sizes = [len(str(call.messages)) for call in model.calls]
    assert max(len(call.messages) for call in model.calls) < 60  # far less than the history
    assert len(agent.messages) == 120
    assert max(sizes[10:]) < 4 * 600 * 2  # within about the budget (the estimate is rough)


def test_a_view_that_cannot_shrink_is_the_current_round_whatever_the_budget() -> None:
    agent, model = _converse(SlidingWindow(max_messages=3, max_tokens=1), [3, 0])
    _check_all(agent, model)
    for call in model.calls:
        assert 1 <= len(call.messages) <= 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rounds=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=15),
    max_messages=st.integers(min_value=3, max_value=20),
    max_tokens=st.one_of(st.none(), st.integers(min_value=1, max_value=2000)),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_every_sliding_window_view_is_valid(
    rounds: list[int], max_messages: int, max_tokens: int | None, seed: int
) -> None:
    agent, model = _converse(
        SlidingWindow(max_messages=max_messages, max_tokens=max_tokens), rounds, seed
    )
    _check_all(agent, model)
    for call in model.calls:
        assert len(call.messages) <= max_messages


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rounds=st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12),
    keep_last=st.integers(min_value=1, max_value=8),
    trigger=st.integers(min_value=50, max_value=1500),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_every_summarizing_view_is_valid(
    rounds: list[int], keep_last: int, trigger: int, seed: int
) -> None:
    summarizer = ScriptedModel(["the summary so far"], repeat=True)
    policy = Summarizing(summarizer, keep_last=keep_last, trigger_tokens=trigger)
    agent, model = _converse(policy, rounds, seed)
    _check_all(agent, model)
    for call in summarizer.calls:  # one user message: a transcript, valid anywhere
        assert len(call.messages) == 1 and validate_history(list(call.messages)) == []


def test_summarizing_replaces_the_older_part_with_one_summary_and_keeps_the_last() -> None:
    summarizer = ScriptedModel([f"summary {i}" for i in range(1, 50)])
    policy = Summarizing(summarizer, keep_last=4, trigger_tokens=400)
    agent, model = _converse(policy, [1] * 20)
    _check_all(agent, model)
    assert summarizer.calls, "the conversation passed the trigger: a summary was written"
    last = list(model.calls[-1].messages)
    first = last[0]["content"][0]["text"]
    assert first.startswith(SUMMARY_HEADING) and first.endswith(f"summary {len(summarizer.calls)}")
    assert len(last) <= 4 + 3  # the kept messages (back to a valid start) and the summary
    assert last[-1] == agent.messages[-2]  # the last question, as stored
    # a later summary continues the earlier one instead of starting over
    assert "summary 1" in summarizer.calls[1].messages[0]["content"][0]["text"]
    assert len(agent.messages) == 80
    # the summary calls' usage is the run's
    assert sum(1 for _ in summarizer.calls) >= 2


def test_summarizing_under_the_trigger_sends_everything() -> None:
    summarizer = ScriptedModel([])
    agent, model = _converse(Summarizing(summarizer, trigger_tokens=100_000), [1, 0, 2])
    assert summarizer.calls == []
    assert list(model.calls[-1].messages) == agent.messages[:-1]


def test_the_summary_call_usage_is_counted_in_the_run() -> None:
    summarizer = ScriptedModel(
        [{"text": "short summary", "usage": {"inputTokens": 1000, "outputTokens": 7}}],
        repeat=True,
    )
    history: list[Message] = []
    for i in range(10):
        history += [
            {"role": "user", "content": [{"text": f"q{i} " + "z" * 400}]},
            {"role": "assistant", "content": [{"text": f"a{i}"}]},
        ]
    model = ScriptedModel([{"text": "done", "usage": {"inputTokens": 50, "outputTokens": 3}}])
    agent = Agent(
        model, messages=history, context=Summarizing(summarizer, keep_last=2, trigger_tokens=300)
    )
    result = agent.invoke("next")
    calls = len(summarizer.calls)  # the older messages, in pieces of about 1,200 characters
    assert calls > 1
    assert result.usage["inputTokens"] == 50 + 1000 * calls
    assert result.usage["outputTokens"] == 3 + 7 * calls


def test_bad_policy_settings_are_refused_clearly() -> None:
    with pytest.raises(UsageError, match="max_messages"):
        SlidingWindow(max_messages=2)
    with pytest.raises(UsageError, match="max_tokens"):
        SlidingWindow(max_tokens=0)
    with pytest.raises(UsageError, match="keep_last"):
        Summarizing(None, keep_last=0)
    with pytest.raises(UsageError, match="model"):
        Summarizing("gpt")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="context must be"):
        Agent(ScriptedModel([]), context=40)  # type: ignore[arg-type]
