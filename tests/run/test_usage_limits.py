"""UsageLimits (DESIGN section 14): each limit stops the run where it says (before a model
call, after a response, before a tool batch), cleanly: ``stop_reason == "usage_limit"``,
``result.usage_limit`` named, the history valid, the agent reusable, limits per run."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, AgentResult, UsageError, UsageLimits, tool, validate_history
from agent_sync.events import Done, ToolStart
from agent_sync.messages import Message
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer

ran: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note."""
    ran.append(text)
    return "noted"


def _call_turn(*texts: str, output: int = 10, inputs: int = 10) -> dict[str, Any]:
    calls = [{"name": "note", "input": {"text": t}} for t in texts]
    return {"tool_calls": calls, "usage": {"inputTokens": inputs, "outputTokens": output}}


def _answer(text: str = "done", output: int = 10, inputs: int = 10) -> dict[str, Any]:
    return {"text": text, "usage": {"inputTokens": inputs, "outputTokens": output}}


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


def _results(message: Message) -> list[dict[str, Any]]:
    return [b["toolResult"] for b in message["content"] if "toolResult" in b]


def _stopped(result: AgentResult, agent: Agent, limit: str) -> None:
    assert result.stop_reason == "usage_limit"
    assert result.usage_limit == limit
    validate_history(agent.messages)
    assert agent.messages[-1]["role"] == "assistant"
    assert not agent.is_running


def test_requests_stop_before_the_model_call() -> None:
    model = ScriptedModel([_call_turn("a"), _call_turn("b"), _answer()])
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(requests=2))
    result = agent.invoke("go")
    _stopped(result, agent, "requests")
    assert len(model.calls) == 2  # the third call was never made
    assert ran == ["a", "b"]  # the second response's tools ran: the limit is on calls
    assert result.text == "Stopped: reached the usage limit (requests)."
    assert result.metrics.cycles == 2


def test_tokens_reached_stop_before_the_next_call() -> None:
    model = ScriptedModel([_call_turn("a", inputs=100), _answer()])
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(input_tokens=100))
    result = agent.invoke("go")
    _stopped(result, agent, "input_tokens")
    assert len(model.calls) == 1 and ran == ["a"]  # not passed: its tools ran, then stop


def test_a_response_that_passes_a_limit_runs_nothing_it_asked_for() -> None:
    model = ScriptedModel([_call_turn("a", "b", output=50), _answer()])
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(output_tokens=40))
    events = list(agent.stream("go"))
    result = events[-1].result  # type: ignore[attr-defined]
    _stopped(result, agent, "output_tokens")
    assert ran == [] and not any(isinstance(e, ToolStart) for e in events)
    assert len(model.calls) == 1
    answers = _results(agent.messages[-2])
    assert [a["status"] for a in answers] == ["error", "error"]
    assert answers[0]["content"] == [{"text": "not run: output token limit"}]
    assert result.message == agent.messages[-1]


def test_a_final_answer_that_passes_a_limit_is_kept() -> None:
    model = ScriptedModel([_answer("the whole answer", output=500)])
    agent = Agent(model, usage_limits=UsageLimits(total_tokens=100))
    result = agent.invoke("go")
    _stopped(result, agent, "total_tokens")
    assert result.text == "the whole answer"
    assert agent.messages[-1]["content"] == [{"text": "the whole answer"}]


def test_a_final_answer_within_the_limits_ends_as_usual() -> None:
    agent = Agent(ScriptedModel([_answer()]), usage_limits=UsageLimits(total_tokens=100))
    result = agent.invoke("go")
    assert result.stop_reason == "end_turn" and result.usage_limit is None


def test_a_batch_that_would_pass_tool_calls_does_not_start() -> None:
    model = ScriptedModel([_call_turn("a"), _call_turn("b", "c"), _answer()])
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(tool_calls=2))
    result = agent.invoke("go")
    _stopped(result, agent, "tool_calls")
    assert ran == ["a"]  # the batch of two would make three: none of it started
    answers = _results(agent.messages[-2])
    assert [a["content"] for a in answers] == [[{"text": "not run: tool call limit"}]] * 2
    assert result.metrics.tool_calls == 1


def test_a_batch_that_reaches_tool_calls_runs() -> None:
    model = ScriptedModel([_call_turn("a", "b"), _answer()])
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(tool_calls=2))
    result = agent.invoke("go")
    assert result.stop_reason == "end_turn" and sorted(ran) == ["a", "b"]


def test_limits_count_per_run_and_the_agent_is_reusable() -> None:
    model = ScriptedModel([_call_turn("a"), _answer()], repeat=True)
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(requests=1))
    first = agent.invoke("one")
    _stopped(first, agent, "requests")
    second = agent.invoke("two")  # from zero again: one call, the script's answer
    assert second.stop_reason == "end_turn" and second.usage_limit is None
    third = agent.invoke("three")
    _stopped(third, agent, "requests")
    assert len(model.calls) == 3


def test_the_stored_end_names_the_limit_as_the_live_one_does() -> None:
    """A follower that missed the live ``done`` is told the run's end from the store: the
    same record (the text aside), ``usage_limit`` included."""
    from agent_sync._run_log._records import closing_record, done_record
    from agent_sync.stores import MemoryRunStore

    store = MemoryRunStore()
    model = ScriptedModel([_call_turn("a"), _answer()])
    limits = UsageLimits(requests=1)
    agent = Agent(model, tools=[note], usage_limits=limits, store=store, conversation_id="c1")
    result = agent.invoke("go")
    _stopped(result, agent, "requests")
    snapshot = store.get(result.run_id)
    assert snapshot is not None and snapshot.usage_limit == "requests"
    live = done_record(Done(result=result, run_id=result.run_id))
    assert closing_record(snapshot) == {**live, "text": ""}


def test_per_call_limits_replace_the_agents() -> None:
    model = ScriptedModel([_call_turn("a"), _answer()], repeat=True)
    agent = Agent(model, tools=[note], usage_limits=UsageLimits(requests=1))
    result = agent.invoke("go", usage_limits=None)
    assert result.stop_reason == "end_turn" and len(model.calls) == 2
    result = Agent(ScriptedModel([_answer()])).invoke("go", usage_limits=UsageLimits(requests=0))
    assert result.stop_reason == "usage_limit" and result.usage_limit == "requests"


def test_a_zero_limit_stops_before_anything_is_sent() -> None:
    model = ScriptedModel([_answer()])
    agent = Agent(model, usage_limits=UsageLimits(output_tokens=0))
    result = agent.invoke("go")
    _stopped(result, agent, "output_tokens")
    assert model.calls == []
    assert agent.messages[0] == {"role": "user", "content": [{"text": "go"}]}


def test_queued_input_is_kept_when_a_limit_stops_the_run() -> None:
    started, release = threading.Event(), threading.Event()

    @tool
    def wait() -> str:
        """Wait."""
        started.set()
        release.wait(10)
        return "ok"

    model = ScriptedModel([{"tool_calls": [{"name": "wait", "input": {}}]}, _answer()])
    agent = Agent(model, tools=[wait], usage_limits=UsageLimits(requests=1))
    stream = agent.stream("go")
    results: list[AgentResult] = []
    reader = threading.Thread(
        target=lambda: results.extend(e.result for e in stream if isinstance(e, Done))
    )
    reader.start()
    assert started.wait(10)
    agent.inject("and also this")
    release.set()
    reader.join(10)
    assert not reader.is_alive()
    _stopped(results[0], agent, "requests")
    assert {"text": "and also this"} in agent.messages[-2]["content"]


def test_a_cancel_is_still_a_cancel() -> None:
    model = ScriptedModel([_answer()])
    agent = Agent(model, usage_limits=UsageLimits(requests=0))
    stream = agent.stream("go")
    stream.cancel()
    result = [e for e in stream if isinstance(e, Done)][0].result
    assert result.stop_reason == "cancelled" and result.usage_limit is None
    validate_history(agent.messages)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests": -1},
        {"input_tokens": 1.5},
        {"output_tokens": "10"},
        {"total_tokens": True},
        {"tool_calls": -3},
        {"cost_usd": -0.01},
        {"cost_usd": float("nan")},
        {"cost_usd": float("inf")},
        {"cost_usd": "1"},
    ],
)
def test_bad_limits_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match=next(iter(kwargs))):
        UsageLimits(**kwargs)


def test_usage_limits_must_be_usage_limits() -> None:
    with pytest.raises(UsageError, match="usage_limits must be a UsageLimits"):
        Agent(ScriptedModel([]), usage_limits={"requests": 1})  # type: ignore[arg-type]
    agent = Agent(ScriptedModel([_answer()]))
    with pytest.raises(UsageError, match="usage_limits must be a UsageLimits"):
        agent.invoke("go", usage_limits=3)  # type: ignore[arg-type]
    assert agent.messages == [] and not agent.is_running


# -- cost, from genai-prices --


@pytest.fixture
def models() -> Iterator[list[AnthropicModel]]:
    """Models to close at the end (their pooled sockets with them)."""
    made: list[AnthropicModel] = []
    yield made
    for model in made:
        model.close()


def _anthropic(
    server: AnthropicServer, model_id: str, models: list[AnthropicModel]
) -> AnthropicModel:
    args = {"base_url": server.base_url, "api_key": "test-key-0123456789"}
    models.append(AnthropicModel(model_id, client_args=args))
    return models[-1]


def test_cost_stops_a_run_priced_by_genai_prices(models: list[AnthropicModel]) -> None:
    # claude-sonnet-4: $3 per million input tokens, $15 per million output tokens
    turns = [
        {
            "tool_calls": [{"name": "note", "input": {"text": "a"}}],
            "usage": {"inputTokens": 1000, "outputTokens": 100},
        },  # $0.0045
        {
            "tool_calls": [{"name": "note", "input": {"text": "b"}}],
            "usage": {"inputTokens": 1000, "outputTokens": 100},
        },  # $0.009 so far
        "never sent",
    ]
    with AnthropicServer(turns) as server:
        agent = Agent(
            _anthropic(server, "claude-sonnet-4-20250514", models),
            tools=[note],
            usage_limits=UsageLimits(cost_usd=0.008),
        )
        result = agent.invoke("go")
        assert len(server.requests) == 2
    _stopped(result, agent, "cost_usd")
    assert ran == ["a"]  # the second response passed $0.008: its call did not run
    assert _results(agent.messages[-2])[0]["content"] == [{"text": "not run: cost limit"}]


def test_cost_counts_cached_tokens_at_their_price(models: list[AnthropicModel]) -> None:
    # Anthropic's inputTokens leave the cache out: 100 uncached at $3/M plus 100000 read
    # from the cache at $0.30/M is $0.0303; counted as uncached it would be $0.3003.
    turns = [
        {
            "tool_calls": [{"name": "note", "input": {"text": "a"}}],
            "usage": {"inputTokens": 100, "outputTokens": 0, "cacheReadInputTokens": 100000},
        },
        "the answer",
    ]
    with AnthropicServer(turns) as server:
        agent = Agent(
            _anthropic(server, "claude-sonnet-4-20250514", models),
            tools=[note],
            usage_limits=UsageLimits(cost_usd=0.05),
        )
        result = agent.invoke("go")
    assert result.stop_reason == "end_turn" and ran == ["a"]


def test_an_unknown_model_with_a_cost_limit_is_refused_before_anything_is_sent(
    models: list[AnthropicModel],
) -> None:
    with AnthropicServer(["hi"]) as server:
        model = _anthropic(server, "claude-from-the-future-9", models)
        with pytest.raises(UsageError, match="genai-prices does not know the model"):
            Agent(model, usage_limits=UsageLimits(cost_usd=1.0))
        agent = Agent(model)
        with pytest.raises(UsageError, match="claude-from-the-future-9"):
            agent.invoke("go", usage_limits=UsageLimits(cost_usd=1.0))
        assert server.requests == [] and agent.messages == []
        Agent(model, usage_limits=UsageLimits(requests=1))  # other limits need no price


def test_without_genai_prices_a_cost_limit_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # as if not installed
    with pytest.raises(UsageError, match=r"agent_sync\[prices\]"):
        Agent(OpenAIModel("gpt-4o", api_key="sk-test"), usage_limits=UsageLimits(cost_usd=1.0))
    Agent(OpenAIModel("gpt-4o", api_key="sk-test"), usage_limits=UsageLimits(requests=1))


def test_a_model_genai_prices_cannot_price_is_refused() -> None:
    with pytest.raises(UsageError, match="needs a model genai-prices can price"):
        Agent(ScriptedModel(["hi"]), usage_limits=UsageLimits(cost_usd=1.0))


def test_other_providers_are_priced() -> None:
    bedrock = BedrockModel("us.anthropic.claude-3-5-haiku-20241022-v1:0", region_name="us-east-1")
    Agent(bedrock, usage_limits=UsageLimits(cost_usd=1.0))
    Agent(OpenAIModel("gpt-4o", api_key="sk-test"), usage_limits=UsageLimits(cost_usd=1.0))
    local = OpenAIModel("llama-local", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(UsageError, match="llama-local"):
        Agent(local, usage_limits=UsageLimits(cost_usd=1.0))
