"""Agent + OpenAIModel end to end, over real HTTP to the local Chat Completions fake."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from agent_sync import Agent, AgentResult, RetryPolicy, tool, validate_history
from agent_sync.errors import ModelHTTPError
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import OpenAIModel
from agent_sync.testing.openai_server import OpenAIServer
from tests.fixtures.bounds import HANG_BOUND, cut_short_of

from ._openai_fixtures import openai_fixtures

FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.05, jitter=0)


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temperature_c": 21}


server, model = openai_fixtures("sk-agent-test")


def run_in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 (asserted by the test)
            box["error"] = exc
        box["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=target, name="test-invoke")
    thread.start()
    return thread, box


def test_tool_round_trip(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns(
        {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}, "id": "call_1"}]},
        "It is 21 degrees in Oslo.",
    )
    agent = Agent(model, tools=[get_weather], system_prompt="Be brief.")
    result = agent.invoke("Weather in Oslo?")
    assert result.stop_reason == "end_turn"
    assert result.text == "It is 21 degrees in Oslo."
    assert validate_history(agent.messages) == []
    second = server.requests[1].body["messages"]
    assert second[0] == {"role": "system", "content": "Be brief."}
    assert second[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == "call_1"
    assert '"temperature_c": 21' in second[3]["content"]
    assert result.usage["totalTokens"] > 0


def test_two_rate_limits_then_success_are_retried_by_the_agent(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns(
        {"status": 429, "retry_after": 0, "error_message": "Rate limit reached"},
        {"status": 429, "retry_after": 0, "error_message": "Rate limit reached"},
        "third time lucky",
    )
    agent = Agent(model, retry=FAST_RETRY)
    result = agent.invoke("hi")
    assert result.text == "third time lucky"
    assert len(server.requests) == 3
    assert validate_history(agent.messages) == []


def test_error_surviving_retries_leaves_history_valid(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns({"status": 401, "error_message": "Incorrect API key provided"})
    agent = Agent(model, retry=FAST_RETRY)
    with pytest.raises(ModelHTTPError) as info:
        agent.invoke("hi")
    assert info.value.status == 401
    assert len(server.requests) == 1  # not retryable
    assert validate_history(agent.messages) == []
    assert not agent.is_running


def test_rate_limit_storm_then_cancel_during_back_off(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    server.add_turns(*[{"status": 429, "retry_after": 30} for _ in range(5)])
    agent = Agent(model, retry=RetryPolicy(max_attempts=5, max_delay=60))
    seen_retry = threading.Event()
    results: list[AgentResult] = []

    def consume() -> None:
        stream = agent.stream("hi")
        for event in stream:
            if event.type == "retry":
                seen_retry.set()
        assert stream.result is not None
        results.append(stream.result)

    thread, box = run_in_thread(consume)
    assert seen_retry.wait(HANG_BOUND)
    assert agent.cancel("user")
    thread.join(HANG_BOUND)
    assert not thread.is_alive() and "error" not in box
    assert box["elapsed"] < cut_short_of(30)  # the back-off asked for 30 s
    assert results[0].stop_reason == "cancelled"
    assert len(server.requests) == 1
    assert validate_history(agent.messages) == []


def test_cancel_while_the_stream_is_silent(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"text": "The answer is", "chunk_size": 4, "stall_after": 3}, "recovered")
    agent = Agent(model)
    first_text = threading.Event()

    def consume() -> AgentResult:
        stream = agent.stream("question")
        for event in stream:
            if event.type == "text":
                first_text.set()
        assert stream.result is not None
        return stream.result

    thread, box = run_in_thread(consume)
    assert first_text.wait(HANG_BOUND) and server.wait_for_stall(1)
    cancelled_at = time.monotonic()
    assert agent.cancel("stop")
    thread.join(HANG_BOUND)
    assert time.monotonic() - cancelled_at < cut_short_of(30)  # the read timeout is 30 s
    result: AgentResult = box["result"]
    assert result.stop_reason == "cancelled" and result.cancel_reason == "stop"
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert result.message["content"][0]["text"].startswith("The")  # streamed text is kept
    assert validate_history(agent.messages) == []
    assert server.wait_for_idle()
    assert agent.invoke("again").text == "recovered"


def test_timeout_before_headers(server: OpenAIServer, model: OpenAIModel) -> None:
    server.add_turns({"stall_headers": True})
    agent = Agent(model)
    started = time.monotonic()
    result = agent.invoke("hi", timeout=0.3)
    assert time.monotonic() - started < cut_short_of(30)  # the read timeout is 30 s
    assert result.stop_reason == "cancelled" and result.cancel_reason == "timeout"
    assert validate_history(agent.messages) == []
    assert server.wait_for_idle()


def test_agents_in_threads_share_one_model(server: OpenAIServer, model: OpenAIModel) -> None:
    count = 6
    server.add_turns(*[{"text": f"answer {i}", "chunk_size": 2} for i in range(count)])
    barrier = threading.Barrier(count)
    texts: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        agent = Agent(model)
        barrier.wait(HANG_BOUND)
        text = agent.invoke("hi").text
        with lock:
            texts.append(text)

    threads = [threading.Thread(target=worker, name=f"test-agent-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(texts) == sorted(f"answer {i}" for i in range(count))


def test_random_cancels_across_threads_leave_valid_histories_and_no_sockets(
    server: OpenAIServer, model: OpenAIModel
) -> None:
    rng = random.Random(20261122)
    count = 8
    kinds: list[dict[str, Any]] = [
        {"text": "z" * 300, "chunk_size": 3, "chunk_delay": 0.001},
        {"text": "silent soon", "chunk_size": 2, "stall_after": 3},
        {"stall_headers": True},
        {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
    ]
    server.add_turns(*[kinds[i % len(kinds)] for i in range(count)], *["ok"] * (2 * count))
    barrier = threading.Barrier(count)
    outcomes: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def worker(delay: float) -> None:
        agent = Agent(model, tools=[get_weather])
        barrier.wait(HANG_BOUND)
        # A random timeout is a random cancel moment, started inside invoke (no race with
        # an idle agent, on which cancel() would be a no-op).
        result = agent.invoke("go", timeout=delay)
        with lock:
            outcomes.append((result.stop_reason, validate_history(agent.messages)))

    threads = [
        threading.Thread(target=worker, args=(rng.uniform(0.001, 0.03),), name=f"test-stress-{i}")
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert len(outcomes) == count
    for stop_reason, problems in outcomes:
        assert stop_reason in ("cancelled", "end_turn")
        assert problems == []
    model.close()
    assert server.wait_for_idle()
