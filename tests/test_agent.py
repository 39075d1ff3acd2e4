"""Agent: invoke, stream, results, history, errors, and the one-invocation guard."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator

import pytest

from agent_sync import Agent, ConcurrentInvocationError, ModelError, UsageError, tool
from agent_sync.errors import ModelStreamError
from agent_sync.events import Done, MessageComplete, TextDelta, ToolEnd, ToolStart
from agent_sync.messages import CANCELLED_TEXT, StreamEvent
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.doubles import BackgroundInvoke, ObservedModel, assert_valid
from tests.fixtures.garbage import collect_garbage


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return f"21 C and sunny in {city}"


WEATHER_SCRIPT = [
    {"text": "Let me check.", "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
    "It is 21 C and sunny in Oslo.",
]


def test_invoke_runs_tools_and_returns_the_final_answer() -> None:
    model = ScriptedModel(WEATHER_SCRIPT)
    agent = Agent(model, tools=[get_weather], system_prompt="Be brief.")
    result = agent.invoke("Weather in Oslo?")
    assert result.stop_reason == "end_turn"
    assert result.cancel_reason is None
    assert result.text == "It is 21 C and sunny in Oslo."
    assert result.message is agent.messages[-1]
    assert result.metrics.cycles == 2
    assert result.metrics.tool_calls == 1
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "success"
    assert tool_result["content"] == [{"text": "21 C and sunny in Oslo"}]
    # the model saw the tool result and the system prompt on its second call
    assert model.calls[1].messages[-1] == agent.messages[2]
    assert model.calls[0].system_prompt == "Be brief."
    assert [s["name"] for s in model.calls[0].tool_specs] == ["get_weather"]
    json.dumps(agent.messages)  # storable as JSON
    assert_valid(agent)


def test_call_is_invoke() -> None:
    agent = Agent(ScriptedModel(["hi there"]))
    assert agent("hello").text == "hi there"


def test_usage_is_summed_over_the_invocation() -> None:
    model = ScriptedModel(
        [
            {
                "tool_calls": [{"name": "get_weather", "input": {"city": "A"}}],
                "usage": {"inputTokens": 10, "outputTokens": 3},
            },
            {"text": "done", "usage": {"inputTokens": 20, "outputTokens": 5}},
        ]
    )
    result = Agent(model, tools=[get_weather]).invoke("go")
    assert result.usage == {"inputTokens": 30, "outputTokens": 8, "totalTokens": 38}


def test_stream_yields_deltas_tool_events_messages_then_done() -> None:
    agent = Agent(ScriptedModel(WEATHER_SCRIPT), tools=[get_weather])
    events = list(agent.stream("Weather in Oslo?"))
    kinds = [e.type for e in events]
    assert kinds[-1] == "done"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        "Let me check.It is 21 C and sunny in Oslo."
    )
    start = next(e for e in events if isinstance(e, ToolStart))
    end = next(e for e in events if isinstance(e, ToolEnd))
    assert start.tool_use["name"] == "get_weather"
    assert end.result["content"] == [{"text": "21 C and sunny in Oslo"}]
    assert kinds.index("tool_start") < kinds.index("tool_end")
    assert sum(isinstance(e, MessageComplete) for e in events) == 3
    done = events[-1]
    assert isinstance(done, Done)
    assert done.result.stop_reason == "end_turn"
    assert done.to_dict()["text"] == "It is 21 C and sunny in Oslo."
    assert not agent.is_running
    assert_valid(agent)


def test_stream_closed_early_cancels_and_releases_the_agent() -> None:
    agent = Agent(ScriptedModel([{"text": "a long answer " * 20, "chunk_size": 3}, "next"]))
    stream = agent.stream("go")
    for event in stream:
        if isinstance(event, TextDelta):
            break
    assert agent.is_running  # break alone does not end a generator
    stream.close()
    assert not agent.is_running
    assert stream.result is not None
    assert stream.result.stop_reason == "cancelled"
    assert stream.result.cancel_reason == "stream closed"
    assert agent.messages[-1]["content"][-1] == {"text": CANCELLED_TEXT}
    assert_valid(agent)
    assert agent.invoke("again").text == "next"


def test_stream_in_with_block_is_closed_on_exit() -> None:
    agent = Agent(ScriptedModel([{"text": "abcdefghij" * 5, "chunk_size": 2}]))
    with agent.stream("go") as stream:
        next(iter(stream))
    assert not agent.is_running
    assert_valid(agent)


def test_stream_garbage_collected_midway_cancels() -> None:
    agent = Agent(ScriptedModel([{"text": "abcdefghij" * 5, "chunk_size": 2}]))
    stream = agent.stream("go")
    next(stream)
    del stream
    collect_garbage()
    assert not agent.is_running
    assert agent.messages[-1]["content"][-1] == {"text": CANCELLED_TEXT}
    assert_valid(agent)


def test_stream_never_iterated_then_closed_keeps_prompt_and_closes_turn() -> None:
    model = ScriptedModel(["unused"])
    agent = Agent(model)
    stream = agent.stream("hello")
    stream.close()
    assert model.calls == []
    assert agent.messages == [
        {"role": "user", "content": [{"text": "hello"}]},
        {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]},
    ]
    assert_valid(agent)


def test_second_invoke_on_a_busy_agent_is_refused_and_touches_nothing() -> None:
    model = ObservedModel(ScriptedModel([{"text": "slow", "stall_after": 0}]))
    agent = Agent(model)
    running = BackgroundInvoke(agent, "first")
    assert model.called.wait(HANG_BOUND)
    before = copy.deepcopy(agent.messages)
    with pytest.raises(ConcurrentInvocationError):
        agent.invoke("second")
    with pytest.raises(ConcurrentInvocationError):
        agent.stream("third")
    with pytest.raises(ConcurrentInvocationError):
        agent.messages = []
    assert agent.messages == before
    assert agent.is_running
    agent.cancel()
    assert running.result().stop_reason == "cancelled"
    assert model.count == 1
    assert_valid(agent)


def test_model_error_raises_and_leaves_history_ending_with_the_prompt() -> None:
    model = ScriptedModel([{"error": ModelError("bad request", provider="scripted")}, "recovered"])
    agent = Agent(model)
    with pytest.raises(ModelError, match="bad request"):
        agent.invoke("hello")
    assert agent.messages == [{"role": "user", "content": [{"text": "hello"}]}]
    assert_valid(agent)
    assert not agent.is_running
    # invoke() with no prompt answers the pending user message
    assert agent.invoke().text == "recovered"
    assert_valid(agent)


def test_prompt_after_an_error_joins_the_pending_user_message() -> None:
    model = ScriptedModel([{"error": ModelError("boom")}, "ok"])
    agent = Agent(model)
    with pytest.raises(ModelError):
        agent.invoke("first")
    agent.invoke("second")
    assert agent.messages[0] == {"role": "user", "content": [{"text": "first"}, {"text": "second"}]}
    assert_valid(agent)


def test_model_error_mid_stream_discards_the_partial_answer() -> None:
    model = ScriptedModel(
        [
            {
                "text": "partial answer",
                "chunk_size": 2,
                "error": ModelError("reset"),
                "error_after": 3,
            }
        ]
    )
    agent = Agent(model)
    with pytest.raises(ModelError):
        agent.invoke("hello")
    assert agent.messages == [{"role": "user", "content": [{"text": "hello"}]}]


def test_max_cycles_stops_and_answers_pending_tools() -> None:
    loop_turn = {"tool_calls": [{"name": "get_weather", "input": {"city": "X"}}]}
    model = ScriptedModel([loop_turn], repeat=True)
    agent = Agent(model, tools=[get_weather], max_cycles=3)
    result = agent.invoke("loop forever")
    assert result.stop_reason == "max_cycles"
    assert result.metrics.cycles == 3
    assert len(model.calls) == 3
    assert "max_cycles" in result.text
    assert_valid(agent)


def test_unknown_tool_becomes_an_error_result_and_the_loop_continues() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "teleport", "input": {}}]}, "Sorry."])
    agent = Agent(model, tools=[get_weather])
    result = agent.invoke("go")
    assert result.text == "Sorry."
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "error"
    assert "Unknown tool 'teleport'" in tool_result["content"][0]["text"]
    assert "get_weather" in tool_result["content"][0]["text"]
    assert_valid(agent)


def test_invalid_tool_json_becomes_an_error_result() -> None:
    model = ScriptedModel(
        [{"tool_calls": [{"name": "get_weather", "raw_input": '{"city": "Os'}]}, "ok"]
    )
    agent = Agent(model, tools=[get_weather])
    agent.invoke("go")
    tool_use = agent.messages[1]["content"][0]["toolUse"]
    assert tool_use["input"] == {}  # stays a valid dict for every provider
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "error"
    assert "not valid JSON" in tool_result["content"][0]["text"]
    assert '{"city": "Os' in tool_result["content"][0]["text"]  # the model sees what it sent
    assert_valid(agent)


def test_input_that_breaks_the_schema_becomes_an_error_result() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "get_weather", "input": {"town": 3}}]}, "ok"])
    agent = Agent(model, tools=[get_weather])
    agent.invoke("go")
    text = agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"]
    assert "missing required parameter 'city'" in text
    assert "unknown parameter 'town'" in text


def test_tool_exception_becomes_an_error_result() -> None:
    @tool
    def fragile() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    model = ScriptedModel([{"tool_calls": [{"name": "fragile", "input": {}}]}, "ok"])
    agent = Agent(model, tools=[fragile])
    assert agent.invoke("go").stop_reason == "end_turn"
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    assert "RuntimeError: disk on fire" in result["content"][0]["text"]


def test_history_can_be_given_and_continued() -> None:
    history = [
        {"role": "user", "content": [{"text": "Hi, I'm Ada."}]},
        {"role": "assistant", "content": [{"text": "Hello Ada."}]},
    ]
    model = ScriptedModel(["You are Ada."])
    agent = Agent(model, messages=history)
    agent.invoke("Who am I?")
    assert model.calls[0].messages[:2] == history
    assert len(agent.messages) == 4
    history.append({"role": "user", "content": [{"text": "not seen"}]})
    assert len(agent.messages) == 4  # the agent copied the history


def test_invalid_history_is_refused() -> None:
    with pytest.raises(UsageError, match="two user messages"):
        Agent(ScriptedModel([]), messages=[{"role": "user", "content": [{"text": "a"}]}] * 2)


def test_usage_errors_are_clear() -> None:
    with pytest.raises(UsageError, match="stream"):
        Agent(object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="two tools"):
        Agent(ScriptedModel([]), tools=[get_weather, get_weather])
    agent = Agent(ScriptedModel([]))
    with pytest.raises(UsageError, match="empty"):
        agent.invoke("  ")
    with pytest.raises(UsageError, match="does not end with a user message"):
        agent.invoke()
    with pytest.raises(UsageError, match="timeout"):
        agent.invoke("hi", timeout=0)
    assert agent.messages == []
    assert not agent.is_running


def test_plain_functions_are_wrapped_as_tools() -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = ScriptedModel([{"tool_calls": [{"name": "add", "input": {"a": 2, "b": 3}}]}, "5"])
    agent = Agent(model, tools=[add])
    agent.invoke("2+3?")
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "5"}]


def test_concurrent_tools_run_in_parallel_and_report_in_call_order() -> None:
    barrier = threading.Barrier(3, timeout=5)

    @tool
    def meet(name: str) -> str:
        """Waits for the other two calls: only possible if all three run at once."""
        barrier.wait()
        return name

    calls = [{"name": "meet", "input": {"name": n}} for n in ("a", "b", "c")]
    agent = Agent(ScriptedModel([{"tool_calls": calls}, "ok"]), tools=[meet])
    agent.invoke("go")
    results = [b["toolResult"]["content"][0]["text"] for b in agent.messages[2]["content"]]
    assert results == ["a", "b", "c"]


def test_sequential_tools_run_one_at_a_time_in_order() -> None:
    order: list[str] = []
    active = threading.Semaphore(1)

    @tool
    def step(name: str) -> str:
        """Records its turn; fails if another step runs at the same time."""
        assert active.acquire(blocking=False), "two tools ran at once"
        order.append(name)
        active.release()
        return name

    calls = [{"name": "step", "input": {"name": n}} for n in ("1", "2", "3")]
    agent = Agent(
        ScriptedModel([{"tool_calls": calls}, "ok"]), tools=[step], tool_executor="sequential"
    )
    agent.invoke("go")
    assert order == ["1", "2", "3"]
    assert all(b["toolResult"]["status"] == "success" for b in agent.messages[2]["content"])


def test_reasoning_is_streamed_and_kept_with_its_signature() -> None:
    agent = Agent(ScriptedModel([{"reasoning": "think think", "text": "answer"}]))
    events = list(agent.stream("q"))
    assert "".join(e.text for e in events if e.type == "reasoning") == "think think"
    first = agent.messages[1]["content"][0]
    assert first == {
        "reasoningContent": {
            "reasoningText": {"text": "think think", "signature": "scripted-signature"}
        }
    }


def test_repr_hides_nothing_sensitive_and_says_the_state() -> None:
    agent = Agent(ScriptedModel(["x"]))
    assert repr(agent) == "<Agent idle model=ScriptedModel messages=0>"


def test_stream_cancel_targets_its_own_run_only() -> None:
    model = ScriptedModel(["first", {"text": "second", "stall_after": 1}])
    agent = Agent(model)
    first = agent.stream("one")
    events = list(first)
    assert events[-1].type == "done"
    assert first.cancel("late") is False  # its run is over: nothing to cancel
    second = agent.stream("two")
    next(second)
    assert first.cancel("late again") is False  # must not reach the second run
    assert agent.is_running
    assert second.cancel("stop") is True
    assert [e.type for e in second][-1] == "done"
    assert second.result is not None and second.result.cancel_reason == "stop"
    assert_valid(agent)


class TruncatedModel:
    """A stream that ends without its stop event (a dropped connection read as EOF)."""

    def stream(self, request: object, *, cancel: object) -> Iterator[StreamEvent]:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "The answ"}}}


@pytest.mark.parametrize("kind", ["invoke", "stream"])
def test_a_truncated_stream_is_a_model_stream_error_not_an_answer(kind: str) -> None:
    agent = Agent(TruncatedModel())
    with pytest.raises(ModelStreamError, match="stop event"):
        if kind == "invoke":
            agent.invoke("hi")
        else:
            for _ in agent.stream("hi"):
                pass
    assert not agent.is_running
    assert agent.messages == [{"role": "user", "content": [{"text": "hi"}]}]  # retry-able
    assert_valid(agent)
