"""FallbackModel over the real wire servers: the next model answers when one fails before
its answer began, at once; an error after content is raised as it is; every model failing
raises the last error with the others in ``fallback_errors``, and the agent's retry retries
the chain; a cancel reaches whichever model is active; ``metrics.model_ids`` names who
answered.

The primary is an ``AnthropicModel`` on an :class:`AnthropicServer`, the fallback an
``OpenAIModel`` on an :class:`OpenAIServer` (a ``GeminiModel`` as a third where a chain of
three matters): real SDKs, real sockets, no processes. Tests wait on the servers' own
signals (``wait_for_stall``, ``wait_for_idle``) and on events, never on time; the one time
bound (``HANG_BOUND``) only catches hangs (cancel latency figures belong in bench/).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator

import boto3
import pytest

from agent_sync import Agent, AgentResult, RetryPolicy, tool, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.errors import (
    ContextWindowOverflowError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
    UsageError,
)
from agent_sync.events import AgentEvent, ModelRetry, TextDelta
from agent_sync.messages import CANCELLED_TEXT, Message, StreamEvent
from agent_sync.models import (
    AnthropicModel,
    BedrockModel,
    FallbackModel,
    GeminiModel,
    ModelRequest,
    OpenAIModel,
)
from agent_sync.models._answer import answering_model, read_until_content
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.gemini_server import GeminiServer
from agent_sync.testing.openai_server import OpenAIServer
from tests.fixtures.bounds import HANG_BOUND

ANTHROPIC_KEY = "sk-ant-fallback-test-secret"
OPENAI_KEY = "sk-openai-fallback-test-secret"
GEMINI_KEY = "gemini-fallback-test-secret"
# A retry between the two models would wait 30 s: the switch must not.
SLOW_RETRY = RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30, jitter=0)
NO_WAIT_RETRY = RetryPolicy(max_attempts=2, initial_delay=0, max_delay=0, jitter=0)
ONE_ATTEMPT = RetryPolicy(max_attempts=1)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name.
    """
    return f"sunny in {city}"


@pytest.fixture
def primary_server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


@pytest.fixture
def fallback_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def primary(primary_server: AnthropicServer) -> Iterator[AnthropicModel]:
    model = AnthropicModel(
        "claude-test",
        client_args={"base_url": primary_server.base_url, "api_key": ANTHROPIC_KEY},
    )
    yield model
    model.close()


@pytest.fixture
def fallback(fallback_server: OpenAIServer) -> Iterator[OpenAIModel]:
    model = OpenAIModel(
        "gpt-test", base_url=fallback_server.url, api_key=OPENAI_KEY, timeout=(5, 30)
    )
    yield model
    model.close()


@pytest.fixture
def chain(primary: AnthropicModel, fallback: OpenAIModel) -> FallbackModel:
    return FallbackModel(primary, fallback)


def collect(agent: Agent, prompt: str) -> tuple[list[AgentEvent], AgentResult]:
    with agent.stream(prompt) as stream:
        events = list(stream)
    assert stream.result is not None
    return events, stream.result


def text_of(events: list[AgentEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


# -- falling back ------------------------------------------------------------------------


def test_a_529_before_content_moves_to_the_fallback_at_once(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"status": 529, "retry_after": 30})
    fallback_server.add_turns("The fallback answers.")
    agent = Agent(chain, retry=SLOW_RETRY)
    events, result = collect(agent, "hello")
    assert result.text == text_of(events) == "The fallback answers."
    assert not any(isinstance(event, ModelRetry) for event in events)  # no back-off between
    assert result.metrics.retries == 0
    assert result.metrics.model_ids == ("gpt-test",)
    assert (len(primary_server.requests), len(fallback_server.requests)) == (1, 1)
    assert validate_history(agent.messages) == []


@pytest.mark.parametrize(
    "failure",
    [
        {"status": 429},
        {"status": 500},
        {"status": 503},
        {"status": 401, "error_message": "invalid x-api-key"},
        {"status": 400, "error_message": "this provider refuses this request"},
        {"drop_after": 0},  # the connection reset before any byte
        {"error_event_after": 1},  # an overloaded error event before the first block
        {"truncate_after": 1},  # message_start, then a clean end: no answer at all
    ],
    ids=["429", "500", "503", "401", "400", "reset", "error-event", "truncated"],
)
def test_each_failure_before_content_falls_back(
    failure: dict[str, object],
    chain: FallbackModel,
    primary_server: AnthropicServer,
    fallback_server: OpenAIServer,
) -> None:
    primary_server.add_turns({"text": "never shown", **failure})
    fallback_server.add_turns("fallback")
    result = Agent(chain, retry=SLOW_RETRY).invoke("hello")
    assert result.text == "fallback"
    assert result.metrics.model_ids == ("gpt-test",)
    assert result.metrics.retries == 0


def test_a_context_overflow_falls_back_to_a_larger_window(
    fallback: OpenAIModel, fallback_server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_sync.models.fallback")
    # refuses any prompt as too long (the scripted turn is never sent)
    with AnthropicServer(["never sent"], max_messages=0) as small:
        narrow = AnthropicModel(
            "claude-small", client_args={"base_url": small.base_url, "api_key": ANTHROPIC_KEY}
        )
        fallback_server.add_turns("it fits here")
        result = Agent(FallbackModel(narrow, fallback), retry=ONE_ATTEMPT).invoke("long prompt")
        narrow.close()
        assert small.refused_too_long == 1
    assert result.text == "it fits here"
    assert result.metrics.model_ids == ("gpt-test",)
    [switch] = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert ContextWindowOverflowError.__name__ in switch and "model=<gpt-test>" in switch


def test_a_usage_error_is_raised_at_once_not_hidden_behind_the_fallback(
    fallback: OpenAIModel, fallback_server: OpenAIServer
) -> None:
    # A parameter Bedrock's Converse does not have: the caller's mistake, the same on every
    # call; falling back would route every call to the fallback without a word.
    session = boto3.Session(
        aws_access_key_id="AKIAFALLBACKTEST", aws_secret_access_key="fallback-secret",
        region_name="us-east-1",
    )  # fmt: skip
    with BedrockServer() as bedrock_server:
        bedrock = BedrockModel(
            "test-model", endpoint_url=bedrock_server.base_url, boto_session=session
        )
        agent = Agent(FallbackModel(bedrock, fallback), params={"no_such_param": 1})
        with pytest.raises(UsageError, match="no_such_param"):
            agent.invoke("hello")
        bedrock.close()
        assert bedrock_server.requests == []
    assert fallback_server.requests == []
    assert validate_history(agent.messages) == []


def test_fallback_on_narrows_what_falls_back(
    primary: AnthropicModel,
    fallback: OpenAIModel,
    primary_server: AnthropicServer,
    fallback_server: OpenAIServer,
) -> None:
    only_throttling = FallbackModel(
        primary, fallback, fallback_on=lambda error: isinstance(error, ModelThrottledError)
    )
    primary_server.add_turns({"status": 400, "error_message": "bad request"})
    with pytest.raises(ModelHTTPError, match="bad request") as raised:
        Agent(only_throttling, retry=ONE_ATTEMPT).invoke("hello")
    assert raised.value.fallback_errors == ()
    assert fallback_server.requests == []


# -- an error after content --------------------------------------------------------------


def test_an_error_after_content_is_raised_as_it_is_nothing_twice(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    # message_start, content_block_start, two text deltas, then an overloaded error event
    primary_server.add_turns(
        {"text": "Partial answer", "chunk_size": 4, "ping": False, "error_event_after": 4}
    )
    agent = Agent(chain, retry=SLOW_RETRY)
    events: list[AgentEvent] = []
    with pytest.raises(ModelError) as raised, agent.stream("hello") as stream:
        for event in stream:
            events.append(event)
    assert raised.value.fallback_errors == ()
    assert text_of(events) == "Partial "  # what the primary streamed, once
    assert not any(isinstance(event, ModelRetry) for event in events)
    assert fallback_server.requests == []  # nothing asked again of anyone
    assert validate_history(agent.messages) == []
    assert sum(message["role"] == "assistant" for message in agent.messages) <= 1
    primary_server.add_turns("again")
    assert agent.invoke("retry").text == "again"  # the agent is reusable


def test_after_content_from_the_fallback_the_earlier_failures_are_attached(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"status": 529})
    fallback_server.add_turns({"text": "Partial answer", "drop_after": 3})
    with pytest.raises(ModelError) as raised:
        Agent(chain, retry=SLOW_RETRY).invoke("hello")
    assert [type(e) for e in raised.value.fallback_errors] == [ModelThrottledError]
    assert len(primary_server.requests) == 1


# -- every model failing -------------------------------------------------------------------


def test_all_fail_raises_the_last_error_with_the_others_attached(
    primary: AnthropicModel,
    fallback: OpenAIModel,
    primary_server: AnthropicServer,
    fallback_server: OpenAIServer,
) -> None:
    with GeminiServer(api_key=GEMINI_KEY) as gemini_server:
        gemini = GeminiModel("gemini-test", base_url=gemini_server.url, api_key=GEMINI_KEY)
        primary_server.add_turns({"status": 529, "error_message": "anthropic overloaded"})
        fallback_server.add_turns({"status": 500, "error_message": "openai broke"})
        gemini_server.add_turns({"status": 401, "error_message": "gemini refuses the key"})
        agent = Agent(FallbackModel(primary, fallback, gemini), retry=SLOW_RETRY)
        with pytest.raises(ModelHTTPError) as raised:
            agent.invoke("hello")
        gemini.close()
    error = raised.value
    assert error.status == 401 and "gemini refuses the key" in str(error)
    assert [e.status for e in error.fallback_errors] == [529, 500]  # type: ignore[attr-defined]
    assert "overloaded" in str(error.fallback_errors[0])
    # not retried: the last error is not retryable, and nothing waited 30 s
    assert (len(primary_server.requests), len(fallback_server.requests)) == (1, 1)
    assert validate_history(agent.messages) == []
    assert agent.messages[-1]["role"] == "user"  # the prompt is kept


def test_the_agents_retry_retries_the_chain_as_a_whole(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"status": 529}, "the primary is back")
    fallback_server.add_turns({"status": 429})
    agent = Agent(chain, retry=NO_WAIT_RETRY)
    events, result = collect(agent, "hello")
    retries = [event for event in events if isinstance(event, ModelRetry)]
    assert len(retries) == 1 and "429" in retries[0].error  # the chain's last error
    assert result.text == "the primary is back"
    assert result.metrics.retries == 1
    assert result.metrics.model_ids == ("claude-test",)
    # the chain from its start: primary, fallback, then primary again
    assert (len(primary_server.requests), len(fallback_server.requests)) == (2, 1)


# -- cancel ---------------------------------------------------------------------------------


def run_in_thread(agent: Agent, prompt: str) -> tuple[threading.Thread, list[AgentResult]]:
    results: list[AgentResult] = []
    worker = threading.Thread(
        target=lambda: results.append(agent.invoke(prompt)), name="fallback-agent"
    )
    worker.start()
    return worker, results


def test_cancel_while_the_primary_stalls(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"stall_headers": True}, "the next call")
    agent = Agent(chain, retry=SLOW_RETRY)
    worker, results = run_in_thread(agent, "hello")
    assert primary_server.wait_for_stall()
    cancelled_at = time.monotonic()
    assert agent.cancel("user left") is True
    worker.join(HANG_BOUND)
    assert not worker.is_alive() and time.monotonic() - cancelled_at < HANG_BOUND
    result = results[0]
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "user left")
    assert result.metrics.model_ids == ()
    assert fallback_server.requests == []  # a cancel is not a failure to fall back from
    assert validate_history(agent.messages) == []
    assert primary_server.wait_for_idle()
    assert agent.invoke("again").text == "the next call"


def test_cancel_while_the_fallback_streams(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"status": 529})
    fallback_server.add_turns({"text": "Partial answer that stalls", "stall_after": 4}, "next")
    agent = Agent(chain, retry=SLOW_RETRY)
    streamed = threading.Event()
    results: list[AgentResult] = []

    def consume() -> None:
        with agent.stream("hello") as stream:
            for event in stream:
                if isinstance(event, TextDelta):
                    streamed.set()
        assert stream.result is not None
        results.append(stream.result)

    worker = threading.Thread(target=consume, name="fallback-stream")
    worker.start()
    assert streamed.wait(HANG_BOUND) and fallback_server.wait_for_stall()
    cancelled_at = time.monotonic()
    assert agent.cancel() is True
    worker.join(HANG_BOUND)
    assert not worker.is_alive() and time.monotonic() - cancelled_at < HANG_BOUND
    result = results[0]
    assert result.stop_reason == "cancelled"
    assert result.message["content"][0]["text"].startswith("Partial")
    assert result.message["content"][-1] == {"text": CANCELLED_TEXT}
    assert result.metrics.model_ids == ("gpt-test",)
    assert validate_history(agent.messages) == []
    assert fallback_server.wait_for_idle()
    primary_server.add_turns("the primary again")
    assert agent.invoke("again").metrics.model_ids == ("claude-test",)


@pytest.mark.parametrize("next_model", ["openai", "scripted"])
def test_a_cancel_during_the_switch_never_starts_the_next_model(
    next_model: str,
    primary: AnthropicModel,
    fallback: OpenAIModel,
    primary_server: AnthropicServer,
    fallback_server: OpenAIServer,
) -> None:
    # The providers refuse to send on a cancelled scope themselves; a ScriptedModel records
    # every call it is given, so it shows the chain itself never calls the next model.
    scripted = ScriptedModel(["never called"], model_id="scripted-fallback")
    agents: list[Agent] = []

    def cancel_then_fall_back(error: ModelError) -> bool:
        agents[0].cancel("during the switch")  # the moment between the two models
        return True

    second = fallback if next_model == "openai" else scripted
    agent = Agent(FallbackModel(primary, second, fallback_on=cancel_then_fall_back))
    agents.append(agent)
    primary_server.add_turns({"status": 529}, "after")
    result = agent.invoke("hello")
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "during the switch")
    assert fallback_server.requests == [] and scripted.calls == []
    assert result.metrics.model_ids == ()
    assert validate_history(agent.messages) == []
    assert agent.invoke("again").text == "after"  # reusable; the primary answers


# -- tools, structured output, metrics, repr ---------------------------------------------


def test_tools_across_the_chain_and_model_ids_per_call(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"status": 529}, "It is sunny in Oslo.")
    fallback_server.add_turns(
        {"tool_calls": [{"id": "call_w", "name": "get_weather", "input": {"city": "Oslo"}}]}
    )
    agent = Agent(chain, tools=[get_weather], retry=SLOW_RETRY)
    result = agent.invoke("Weather in Oslo?")
    assert result.text == "It is sunny in Oslo."
    assert result.metrics.model_ids == ("gpt-test", "claude-test")
    assert result.metrics.cycles == 2
    assert validate_history(agent.messages) == []
    # the OpenAI tool call went to Anthropic as its tool_use/tool_result pair
    sent = primary_server.requests[-1].body["messages"]
    assert sent[-1]["content"][0]["type"] == "tool_result"


@dataclasses.dataclass
class Weather:
    city: str
    degrees: int


def test_structured_output_from_the_fallback(
    chain: FallbackModel, primary_server: AnthropicServer, fallback_server: OpenAIServer
) -> None:
    primary_server.add_turns({"status": 529})
    fallback_server.add_turns('{"city": "Oslo", "degrees": 21}')
    result = Agent(chain, output_type=Weather, retry=SLOW_RETRY).invoke("Weather in Oslo?")
    assert result.output == Weather(city="Oslo", degrees=21)
    assert result.metrics.model_ids == ("gpt-test",)
    # each model got the request's output schema in its own wire's form
    assert "response_format" in fallback_server.requests[0].body


def test_repr_shows_the_chain_and_no_secret(chain: FallbackModel) -> None:
    shown = repr(chain)
    assert shown.startswith("FallbackModel(AnthropicModel(") and "OpenAIModel(" in shown
    assert "claude-test" in shown and "gpt-test" in shown
    assert ANTHROPIC_KEY not in shown and OPENAI_KEY not in shown


def test_a_chain_member_that_is_not_a_model_is_refused(primary: AnthropicModel) -> None:
    with pytest.raises(UsageError, match=r"model 1 \(str\) is not a model"):
        FallbackModel(primary, "gpt-5")  # type: ignore[arg-type]


def test_a_chain_inside_a_chain_names_the_innermost_model() -> None:
    busy = {"error": ModelThrottledError("overloaded", status=529)}
    inner = FallbackModel(
        ScriptedModel([busy], model_id="inner-primary"),
        ScriptedModel(["from the inner fallback"], model_id="inner-fallback"),
    )
    outer = FallbackModel(ScriptedModel([busy], model_id="outer-primary"), inner)
    result = Agent(outer, retry=SLOW_RETRY).invoke("hello")
    assert result.text == "from the inner fallback"
    assert result.metrics.model_ids == ("inner-fallback",)


def test_a_chain_s_stream_names_the_model_that_answered_at_any_depth() -> None:
    # what a trace of the call describes (its provider, its server): that model itself
    busy = {"error": ModelThrottledError("overloaded", status=529)}
    answering = ScriptedModel(["from the inner fallback"], model_id="inner-fallback")
    inner = FallbackModel(ScriptedModel([busy]), answering)
    outer = FallbackModel(ScriptedModel([busy]), inner)
    hello: list[Message] = [{"role": "user", "content": [{"text": "hello"}]}]
    stream = outer.stream(ModelRequest(messages=hello), cancel=CancelScope())
    assert answering_model(stream, outer) is outer  # nothing answered yet
    read_until_content(stream)
    assert answering_model(stream, outer) is answering
    stream.close()  # type: ignore[attr-defined]


class EndsBeforeItsAnswer:
    """A model whose stream starts a message and ends: no content, no stop, no error."""

    model_id = "ends-early"

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        yield {"messageStart": {"role": "assistant"}}


def test_a_stream_that_ends_before_its_answer_is_a_failure_to_fall_back_from() -> None:
    backup = ScriptedModel(["answered"], model_id="backup")
    result = Agent(FallbackModel(EndsBeforeItsAnswer(), backup), retry=SLOW_RETRY).invoke("hi")
    assert (result.text, result.metrics.model_ids) == ("answered", ("backup",))
    busy = ScriptedModel([{"error": ModelThrottledError("overloaded", status=529)}])
    last = FallbackModel(busy, EndsBeforeItsAnswer())
    with pytest.raises(ModelStreamError, match="ended before its answer began") as raised:
        Agent(last, retry=ONE_ATTEMPT).invoke("hi")
    assert [type(e) for e in raised.value.fallback_errors] == [ModelThrottledError]
