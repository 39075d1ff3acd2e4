"""The Agent running on AnthropicModel against the local SSE fake: the user's view.

Tool round trips, the agent's retry policy over real 429s, cancel during back-off and
mid-stream, and the history invariant after each return.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from agent_sync import Agent, AgentResult, RetryPolicy, ToolContext, tool, validate_history
from agent_sync.errors import ModelThrottledError
from agent_sync.events import ModelRetry, TextDelta
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import AnthropicModel
from agent_sync.testing.anthropic_server import AnthropicServer
from tests.fixtures.bounds import HANG_BOUND

from ._anthropic_fixtures import anthropic_fixtures

API_KEY = "sk-ant-agent-test"
FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.05, jitter=0.0)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name.
    """
    return f"sunny in {city}"


server, model = anthropic_fixtures(API_KEY)


def test_tool_round_trip(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns(
        {"tool_calls": [{"id": "toolu_w", "name": "get_weather", "input": {"city": "Oslo"}}]},
        "It is sunny in Oslo.",
    )
    agent = Agent(model, tools=[get_weather], system_prompt="Be brief.", retry=FAST_RETRY)
    result = agent.invoke("Weather in Oslo?")
    assert result.stop_reason == "end_turn"
    assert result.text == "It is sunny in Oslo."
    assert result.usage["totalTokens"] > 0
    assert validate_history(agent.messages) == []
    # The second request carried the tool result back in Anthropic's shape.
    second = server.requests[1].body
    assert second["system"] == "Be brief."
    assert second["tools"][0]["name"] == "get_weather"
    assert second["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_w",
         "content": [{"type": "text", "text": "sunny in Oslo"}]}
    ]  # fmt: skip


def test_invalid_tool_json_becomes_an_error_result_and_the_loop_continues(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {"tool_calls": [{"id": "toolu_x", "name": "get_weather", "input": {}}],
         "raw_tool_input": {0: '{"city": '}},
        "Sorry, let me try differently.",
    )  # fmt: skip
    agent = Agent(model, tools=[get_weather], retry=FAST_RETRY)
    result = agent.invoke("Weather?")
    assert result.text == "Sorry, let me try differently."
    tool_result = server.requests[1].body["messages"][-1]["content"][0]
    assert tool_result["tool_use_id"] == "toolu_x" and tool_result["is_error"] is True
    assert validate_history(agent.messages) == []


def test_two_429s_then_success_are_retried_by_the_agent(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(
        {"status": 429, "retry_after": 0.01},
        {"status": 529, "error_message": "Overloaded"},
        "Finally.",
    )
    agent = Agent(model, retry=FAST_RETRY)
    result = agent.invoke("hello")
    assert result.text == "Finally."
    assert len(server.requests) == 3
    assert validate_history(agent.messages) == []


def test_429_storm_exhausts_retries_with_a_valid_history(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns(*[{"status": 429, "retry_after": 0} for _ in range(4)])
    agent = Agent(model, retry=FAST_RETRY)
    with pytest.raises(ModelThrottledError):
        agent.invoke("hello")
    assert len(server.requests) == 4
    assert validate_history(agent.messages) == []
    assert agent.messages[-1]["role"] == "user"  # nothing the user sent is lost


def test_cancel_during_429_back_off(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns(*[{"status": 429, "retry_after": 30} for _ in range(3)])
    agent = Agent(model, retry=RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30))
    stream = agent.stream("hello")
    for event in stream:
        if isinstance(event, ModelRetry):
            break  # the agent is about to wait ~30 s
    started = time.monotonic()
    assert agent.cancel("user left") is True
    stream.close()
    assert time.monotonic() - started < HANG_BOUND
    assert stream.result is not None and stream.result.stop_reason == "cancelled"
    assert len(server.requests) == 1  # no request after the cancel
    assert validate_history(agent.messages) == []
    assert agent.is_running is False


def test_cancel_while_the_stream_is_silent(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"text": "Partial answer that then stalls", "stall_after": 5}, "next")
    agent = Agent(model, retry=FAST_RETRY)
    streamed = threading.Event()
    results: list[AgentResult] = []

    def consume() -> None:
        with agent.stream("go") as events:
            for event in events:
                if isinstance(event, TextDelta) and "answer" in event.text:
                    streamed.set()  # the client holds "Partial answer t", then it goes silent
        assert events.result is not None
        results.append(events.result)

    worker = threading.Thread(target=consume, name="agent-stream")
    worker.start()
    assert streamed.wait(HANG_BOUND) and server.wait_for_stall()
    assert agent.cancel() is True
    worker.join(HANG_BOUND)
    assert not worker.is_alive()
    result = results[0]
    assert result.stop_reason == "cancelled"
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert result.message["content"][0]["text"].startswith("Partial")
    assert validate_history(agent.messages) == []
    assert server.wait_for_idle()
    assert agent.invoke("again").text == "next"  # ready for the next call on the same pool


def test_cancel_during_a_cooperative_tool(server: AnthropicServer, model: AnthropicModel) -> None:
    entered = threading.Event()

    @tool
    def slow_lookup(query: str, context: ToolContext) -> str:
        """Look something up slowly.

        Args:
            query: What to look up.
        """
        entered.set()
        context.wait(30)
        return "too late"

    server.add_turns({"tool_calls": [{"id": "toolu_s", "name": "slow_lookup",
                                      "input": {"query": "q"}}]})  # fmt: skip
    agent = Agent(model, tools=[slow_lookup], retry=FAST_RETRY)
    results: list[AgentResult] = []
    worker = threading.Thread(target=lambda: results.append(agent.invoke("go")), name="invoke")
    worker.start()
    assert entered.wait(HANG_BOUND)
    agent.cancel()
    worker.join(HANG_BOUND)
    assert not worker.is_alive()
    assert results[0].stop_reason == "cancelled"
    assert validate_history(agent.messages) == []


@pytest.mark.stress
def test_many_agents_on_one_model_with_random_cancels(
    server: AnthropicServer, model: AnthropicModel, thread_baseline: set[threading.Thread]
) -> None:
    rng = random.Random(1234)
    agents = 8
    server.add_turns(*[{"text": "word " * 60, "chunk_size": 5} for _ in range(agents * 6)])
    barrier = threading.Barrier(agents)
    failures: list[str] = []
    stop_reasons: list[str] = []

    def run(cancel_at: int, hold: bool) -> None:
        # hold: the stream waits at cancel_at until the cancel was called (one agent does,
        # so that a cancel lands whatever the machine's speed; the others race theirs)
        agent = Agent(model, retry=FAST_RETRY)
        reached, called = threading.Event(), threading.Event()

        def cancel() -> None:
            if reached.wait(HANG_BOUND):
                agent.cancel()
            called.set()

        canceller = threading.Thread(target=cancel, name="canceller")
        canceller.start()
        barrier.wait(HANG_BOUND)
        with agent.stream("go") as stream:
            for count, _ in enumerate(stream):
                if count == cancel_at:
                    reached.set()
                    if hold:
                        called.wait(HANG_BOUND)
        assert stream.result is not None
        stop_reasons.append(stream.result.stop_reason)
        reached.set()  # the run may have ended before the cancel point: release the canceller
        canceller.join(HANG_BOUND)
        after = agent.invoke("again")  # the agent and the shared pool are ready again
        problems = validate_history(agent.messages)
        if problems or after.stop_reason != "end_turn":
            failures.append(f"cancel_at={cancel_at}: {problems} {after.stop_reason}")

    workers = [  # the held one's cancel point is inside its answer (about 64 events)
        threading.Thread(
            target=run, args=(rng.randrange(0, 40 if i == 0 else 80), i == 0), name=f"agent-{i}"
        )
        for i in range(agents)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_BOUND * 2)
    assert not any(worker.is_alive() for worker in workers)
    assert failures == []
    assert "cancelled" in stop_reasons and len(stop_reasons) == agents
    model.close()
    assert server.wait_for_idle()
    # Server handler threads end just after their connection closes: not ours to count.
    leftover = {
        thread.name
        for thread in set(threading.enumerate()) - thread_baseline
        if "process_request_thread" not in thread.name
    }
    assert leftover == set()
