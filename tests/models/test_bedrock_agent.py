"""Agent + BedrockModel end to end: real boto3 over HTTP to the local event-stream fake."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, AgentResult, RetryPolicy, tool, validate_history
from agent_sync.errors import ModelHTTPError
from agent_sync.events import Done, ModelRetry
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.models import BedrockModel
from agent_sync.testing.bedrock_server import BedrockServer
from tests.fixtures.bounds import HANG_BOUND

from ._bedrock_fixtures import aws_session, server

__all__ = ["server"]  # fixture, imported for pytest

FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.05, jitter=0)


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    return {"city": city, "temperature_c": 21}


@pytest.fixture
def model(server: BedrockServer) -> Iterator[BedrockModel]:
    session = aws_session("AKIDAGENTTEST", "agent-secret")
    bedrock = BedrockModel(
        "test-model", endpoint_url=server.base_url, boto_session=session, read_timeout=60
    )
    yield bedrock
    bedrock.close()


def invoke_in_thread(
    agent: Agent, prompt: str, **kwargs: Any
) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            box["result"] = agent.invoke(prompt, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (asserted by the test)
            box["error"] = exc
        box["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=target, name="test-invoke")
    thread.start()
    return thread, box


def test_tool_round_trip(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns(
        {"tool_calls": [{"id": "tu-1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        "It is 21 degrees in Oslo.",
    )
    agent = Agent(model, tools=[get_weather], system_prompt="Be brief.")

    result = agent.invoke("Weather in Oslo?")

    assert result.stop_reason == "end_turn"
    assert result.text == "It is 21 degrees in Oslo."
    assert validate_history(agent.messages) == []
    second = server.requests[1].body
    assert second["system"] == [{"text": "Be brief."}]
    assert second["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"
    tool_use = second["messages"][1]["content"][-1]["toolUse"]
    assert tool_use == {"toolUseId": "tu-1", "name": "get_weather", "input": {"city": "Oslo"}}
    tool_result = second["messages"][2]["content"][0]["toolResult"]
    assert tool_result["toolUseId"] == "tu-1" and tool_result["status"] == "success"
    assert "21" in str(tool_result["content"])
    assert result.usage["totalTokens"] > 0


def test_two_throttles_then_success_are_retried_by_the_agent(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns(
        {"status": 429, "error_message": "Too many requests, please wait."},
        {"text": "never shown", "exception_type": "throttlingException", "exception_after": 1},
        "Finally.",
    )
    agent = Agent(model, retry=FAST_RETRY)

    events = list(agent.stream("hello"))

    retries = [e for e in events if isinstance(e, ModelRetry)]
    assert [r.attempt for r in retries] == [1, 2]
    assert all("ModelThrottledError" in r.error for r in retries)
    assert isinstance(events[-1], Done) and events[-1].result.text == "Finally."
    assert len(server.requests) == 3
    assert validate_history(agent.messages) == []


def test_cancel_during_back_off(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns(*[{"status": 429, "error_message": "slow down"}] * 3)
    agent = Agent(
        model, retry=RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)
    )
    retrying = threading.Event()
    canceller = threading.Thread(
        target=lambda: retrying.wait(HANG_BOUND) and agent.cancel("user"), name="test-canceller"
    )
    canceller.start()

    started = time.monotonic()
    result: AgentResult | None = None
    for event in agent.stream("hello"):
        if isinstance(event, ModelRetry):
            retrying.set()
        if isinstance(event, Done):
            result = event.result
    elapsed = time.monotonic() - started
    canceller.join(HANG_BOUND)

    assert result is not None and result.stop_reason == "cancelled"
    assert result.cancel_reason == "user"
    assert elapsed < HANG_BOUND  # the back-off was 30 s
    assert len(server.requests) == 1  # no request after the cancel
    assert validate_history(agent.messages) == []


def test_cancel_mid_stream_keeps_streamed_text_and_the_agent_reusable(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"text": "Partial answer", "stall_after": 3}, "Second answer.")
    agent = Agent(model)
    thread, box = invoke_in_thread(agent, "hello")
    assert server.wait_for_stall()

    assert agent.cancel("stop") is True
    thread.join(HANG_BOUND)

    result = box["result"]
    assert result.stop_reason == "cancelled" and result.cancel_reason == "stop"
    assert box["elapsed"] < HANG_BOUND
    last = agent.messages[-1]
    assert last["role"] == "assistant" and last["content"][-1] == {"text": CANCELLED_TEXT}
    assert validate_history(agent.messages) == []
    assert server.wait_for_idle()
    assert agent.invoke("again").text == "Second answer."


def test_timeout_while_headers_never_come(server: BedrockServer, model: BedrockModel) -> None:
    server.add_turns({"stall_headers": True})
    agent = Agent(model)

    started = time.monotonic()
    result = agent.invoke("hello", timeout=0.2)

    assert result.stop_reason == "cancelled" and result.cancel_reason == "timeout"
    assert time.monotonic() - started < HANG_BOUND
    assert validate_history(agent.messages) == []


def test_tool_input_that_is_not_json_becomes_an_error_result(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns(
        {
            "tool_calls": [{"id": "tu-1", "name": "get_weather"}],
            "raw_tool_input": {0: '{"city": Os'},
        },
        "Sorry, let me fix that.",
    )
    agent = Agent(model, tools=[get_weather])

    result = agent.invoke("Weather?")

    assert result.text == "Sorry, let me fix that."
    tool_result = agent.messages[2]["content"][0]["toolResult"]
    assert tool_result["status"] == "error"
    assert validate_history(agent.messages) == []


def test_non_retryable_error_raises_with_a_valid_history(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns({"status": 400, "error_message": "messages: bad shape"})
    agent = Agent(model, retry=FAST_RETRY)

    with pytest.raises(ModelHTTPError, match="bad shape"):
        agent.invoke("hello")

    assert len(server.requests) == 1
    assert validate_history(agent.messages) == []


@pytest.mark.stress
def test_threads_sharing_a_model_with_random_cancels(
    server: BedrockServer, model: BedrockModel
) -> None:
    threads, rounds = 6, 4
    server.add_turns(
        *[{"text": "y" * 48, "chunk_size": 4, "chunk_delay": 0.001}] * (threads * rounds)
    )
    barrier = threading.Barrier(threads)
    outcomes: list[str] = []
    problems: list[str] = []
    lock = threading.Lock()

    def cancel_when_set(seen: threading.Event, agent: Agent) -> None:
        if seen.wait(HANG_BOUND):
            agent.cancel("random")

    def worker(seed: int) -> None:
        chooser = random.Random(seed)
        agent = Agent(model)
        barrier.wait(HANG_BOUND)
        for _ in range(rounds):
            cancel_at = chooser.randint(0, 14)  # events seen before the cancel; 14 = never
            seen = threading.Event()
            canceller = threading.Thread(
                target=cancel_when_set, args=(seen, agent), name="test-random-cancel"
            )
            canceller.start()
            count = 0
            result = None
            for event in agent.stream("go"):
                count += 1
                if count == cancel_at:
                    seen.set()
                if isinstance(event, Done):
                    result = event.result
            seen.set()  # release the canceller; a cancel after the end is a no-op
            canceller.join(HANG_BOUND)
            with lock:
                outcomes.append(result.stop_reason if result else "none")
                problems.extend(validate_history(agent.messages))

    pool = [threading.Thread(target=worker, args=(n,), name=f"test-w{n}") for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(30)

    assert len(outcomes) == threads * rounds
    assert set(outcomes) <= {"end_turn", "cancelled"}
    assert "cancelled" in outcomes
    assert problems == []
    model.close()
    assert server.wait_for_idle()


def test_signed_reasoning_round_trips_through_the_history(
    server: BedrockServer, model: BedrockModel
) -> None:
    server.add_turns(
        {
            "reasoning": "The user wants weather.",
            "signature": "sig-xyz",
            "tool_calls": [{"id": "tu-1", "name": "get_weather", "input": {"city": "Oslo"}}],
        },
        "21 degrees.",
    )
    agent = Agent(model, tools=[get_weather])

    assert agent.invoke("Weather in Oslo?").text == "21 degrees."

    sent_back = server.requests[1].body["messages"][1]["content"][0]
    assert sent_back == {
        "reasoningContent": {
            "reasoningText": {"text": "The user wants weather.", "signature": "sig-xyz"}
        }
    }
    assert validate_history(agent.messages) == []
