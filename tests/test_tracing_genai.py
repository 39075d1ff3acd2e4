"""The GenAI semantic conventions on runs' spans and metrics (DESIGN.md section 15), with the
real OpenTelemetry SDK: an in-memory span exporter and an ``InMemoryMetricReader``, across
``ScriptedModel`` and the Anthropic and OpenAI wire servers of ``agent_sync.testing``.

Spans go to one module-level SDK provider handed to ``_tracing.use_provider`` per test (the
global provider can be set once per process); each test gets a fresh ``MeterProvider``
through ``_tracing.use_meter_provider``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_sync import Agent, ModelError, _tracing, tool
from agent_sync.errors import UsageError
from agent_sync.hooks import BeforeModelCall
from agent_sync.models import AnthropicModel, FallbackModel, OpenAIModel
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent
KEY = "test-key-0123456789"

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


class Telemetry:
    """The spans and metrics one test recorded."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def spans(self) -> tuple[ReadableSpan, ...]:
        return _EXPORTER.get_finished_spans()

    def one(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, sorted(s.name for s in self.spans())
        return found[0]

    def named(self, name: str) -> list[ReadableSpan]:
        return sorted((s for s in self.spans() if s.name == name), key=lambda s: s.start_time or 0)

    def points(self, metric: str) -> list[HistogramDataPoint]:
        data = self._reader.get_metrics_data()
        found: list[HistogramDataPoint] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        found += [
                            p for p in item.data.data_points if isinstance(p, HistogramDataPoint)
                        ]
        return found

    def unit(self, metric: str) -> str:
        data = self._reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        return item.unit or ""
        raise AssertionError(f"no metric {metric}")


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    _EXPORTER.clear()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    _tracing.use_provider(_PROVIDER)
    _tracing.use_meter_provider(meters)
    try:
        yield Telemetry(reader)
    finally:
        _tracing.use_provider(None)
        _tracing.use_meter_provider(None)
        meters.shutdown()
        _EXPORTER.clear()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@tool
def get_weather(city: str) -> str:
    """Weather in a city.

    Args:
        city: The city.
    """
    return f"21 degrees in {city}"


WEATHER_TURNS: list[Any] = [
    {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
    "It is 21 degrees in Oslo.",
]


# --- the names come from the semantic conventions ----------------------------------------


def test_no_genai_attribute_is_spelled_by_us() -> None:
    """Every GenAI, server and error name comes from opentelemetry-semantic-conventions."""
    spelled: list[str] = []
    for path in sorted((ROOT / "agent_sync" / "_tracing").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith(("gen_ai.", "server.", "error.", "exception.")):
                    spelled.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert spelled == []


def test_the_otel_extra_brings_the_conventions() -> None:
    tomllib = pytest.importorskip("tomllib")  # 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = [requirement.split(">")[0].split("=")[0].strip() for requirement in extras["otel"]]
    assert "opentelemetry-semantic-conventions" in names
    assert "opentelemetry-api" in names


# --- Agent(name=) -------------------------------------------------------------------------


def test_agent_name_default_and_read_only() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    assert agent.name == "agent"
    assert Agent(ScriptedModel(["hi"]), name="researcher").name == "researcher"
    with pytest.raises(AttributeError):
        agent.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["", "   ", 3, None, b"agent"])
def test_agent_name_must_be_a_non_empty_str(bad: Any) -> None:
    with pytest.raises(UsageError, match="name must be a non-empty str"):
        Agent(ScriptedModel(["hi"]), name=bad)


# --- spans ---------------------------------------------------------------------------------


def test_run_span_is_named_after_the_agent(telemetry: Telemetry) -> None:
    agent = Agent(ScriptedModel(WEATHER_TURNS), tools=[get_weather], name="researcher")
    result = agent.invoke("Weather in Oslo?")
    run = telemetry.one("invoke_agent researcher")
    assert attrs(run)["gen_ai.agent.name"] == "researcher"
    assert attrs(run)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(run)["agent_sync.run_id"] == result.run_id  # what it carried before stays
    assert attrs(run)["agent_sync.stop_reason"] == "end_turn"
    for chat in telemetry.named("chat"):
        assert parent_id(chat) == run.context.span_id
        assert attrs(chat)["gen_ai.request.stream"] is True
        assert attrs(chat)["gen_ai.output.type"] == "text"
        assert "server.address" not in attrs(chat)  # a scripted model is served nowhere
    # no wire reason: agent_sync's own stop reasons
    assert [attrs(c)["gen_ai.response.finish_reasons"] for c in telemetry.named("chat")] == [
        ("tool_use",),
        ("end_turn",),
    ]


def test_typed_output_is_json_and_request_parameters(telemetry: Telemetry) -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str

    model = ScriptedModel(['{"name": "Oslo"}'])
    agent = Agent(model, params={"temperature": 0.25, "top_p": 0.5, "max_tokens": 300})
    assert agent.invoke("Capital of Norway?", output_type=City).output == City(name="Oslo")
    chat = attrs(telemetry.one("chat"))
    assert chat["gen_ai.output.type"] == "json"
    assert chat["gen_ai.request.temperature"] == 0.25
    assert chat["gen_ai.request.top_p"] == 0.5
    assert chat["gen_ai.request.max_tokens"] == 300


def test_openai_wire(telemetry: Telemetry) -> None:
    with OpenAIServer(WEATHER_TURNS, model="gpt-test-2025-01-01") as server:
        model = OpenAIModel(
            "gpt-test", base_url=server.url, api_key=KEY, temperature=0.0, max_tokens=50
        )
        try:
            Agent(model, tools=[get_weather]).invoke("Weather in Oslo?")
        finally:
            model.close()
        port = int(server.url.split(":")[2].split("/")[0])
    first, second = telemetry.named("chat gpt-test")
    for chat in (first, second):
        found = attrs(chat)
        assert found["gen_ai.provider.name"] == "openai"
        assert found["gen_ai.request.model"] == "gpt-test"
        assert found["gen_ai.response.model"] == "gpt-test-2025-01-01"
        assert found["gen_ai.response.id"].startswith("chatcmpl-")
        assert (found["server.address"], found["server.port"]) == ("127.0.0.1", port)
        assert found["gen_ai.request.temperature"] == 0.0
        assert found["gen_ai.request.max_tokens"] == 50
    assert attrs(first)["gen_ai.response.id"] != attrs(second)["gen_ai.response.id"]
    # the wire's own finish reasons, not agent_sync's tool_use / end_turn
    assert attrs(first)["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert attrs(second)["gen_ai.response.finish_reasons"] == ("stop",)


def test_anthropic_wire(telemetry: Telemetry) -> None:
    with AnthropicServer(WEATHER_TURNS) as server:
        args = {"base_url": server.base_url, "api_key": KEY}
        model = AnthropicModel("claude-x", max_tokens=256, client_args=args, top_p=0.75)
        try:
            Agent(model, tools=[get_weather]).invoke("Weather in Oslo?")
        finally:
            model.close()
    first, second = telemetry.named("chat claude-x")
    for chat in (first, second):
        found = attrs(chat)
        assert found["gen_ai.provider.name"] == "anthropic"
        assert found["gen_ai.response.id"].startswith("msg_")
        assert found["gen_ai.response.model"] == "claude-x"
        assert found["server.address"] == "127.0.0.1"
        assert found["gen_ai.request.max_tokens"] == 256
        assert found["gen_ai.request.top_p"] == 0.75
    assert attrs(first)["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert attrs(second)["gen_ai.response.finish_reasons"] == ("end_turn",)


def test_the_shipped_models_name_their_endpoint() -> None:
    from agent_sync._tracing._providers import server_attributes
    from agent_sync.models import BedrockModel, GeminiModel, OpenAIResponsesModel

    cases = [
        (OpenAIModel("m", api_key=KEY), ("api.openai.com", 443)),
        (OpenAIResponsesModel("m", base_url="http://localhost:8080/v1"), ("localhost", 8080)),
        (GeminiModel("m", api_key=KEY), ("generativelanguage.googleapis.com", 443)),
        (
            BedrockModel("m", region_name="eu-north-1"),
            ("bedrock-runtime.eu-north-1.amazonaws.com", 443),
        ),
        (AnthropicModel("m", client_args={"api_key": KEY}), ("api.anthropic.com", 443)),
    ]
    for model, (host, port) in cases:
        assert server_attributes(model) == {"server.address": host, "server.port": port}, model
        close = getattr(model, "close", None)
        if close is not None:
            close()
    assert server_attributes(ScriptedModel([])) == {}


# --- a sub-agent tree ------------------------------------------------------------------------


def _research_tool(turns: list[Any]) -> Any:
    child = Agent(ScriptedModel(turns), name="researcher")
    return child.as_tool(name="research", description="Research a question.")


def _call(prompt: str) -> dict[str, Any]:
    return {"name": "research", "input": {"prompt": prompt}}


def test_a_lone_sub_agent_call_hangs_under_its_tool_span(telemetry: Telemetry) -> None:
    lead = Agent(
        ScriptedModel([{"tool_calls": [_call("find it")]}, "done"]),
        tools=[_research_tool(["found it"])],
        name="lead",
    )
    with _PROVIDER.get_tracer("app").start_as_current_span("request") as request:
        lead.invoke("go")  # the lone call runs on the lead's own thread
    lead_run = telemetry.one("invoke_agent lead")
    assert parent_id(lead_run) == request.get_span_context().span_id
    call = telemetry.one("execute_tool research")
    child = telemetry.one("invoke_agent researcher")
    assert parent_id(call) == lead_run.context.span_id
    assert parent_id(child) == call.context.span_id  # not the request span current here
    child_chats = [c for c in telemetry.named("chat") if parent_id(c) == child.context.span_id]
    assert len(child_chats) == 1


def test_parallel_sub_agent_calls_on_workers_hang_under_their_tool_spans(
    telemetry: Telemetry,
) -> None:
    lead = Agent(
        ScriptedModel([{"tool_calls": [_call("one"), _call("two")]}, "done"]),
        tools=[_research_tool(["first", "second"])],
        name="lead",
    )
    lead.invoke("go")  # two calls: each runs on a tool worker
    calls = {attrs(s)["gen_ai.tool.call.id"]: s for s in telemetry.named("execute_tool research")}
    children = telemetry.named("invoke_agent researcher")
    assert len(calls) == len(children) == 2
    assert {parent_id(c) for c in children} == {s.context.span_id for s in calls.values()}
    lead_run = telemetry.one("invoke_agent lead")
    assert all(c.context.trace_id == lead_run.context.trace_id for c in children)


# --- failure and cancel ---------------------------------------------------------------------


def test_a_failed_call_has_an_error_type_on_its_span_and_duration(telemetry: Telemetry) -> None:
    agent = Agent(ScriptedModel([{"error": ModelError("bad request")}]))
    with pytest.raises(ModelError):
        agent.invoke("hi")
    chat = telemetry.one("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)["error.type"] == "ModelError"
    (point,) = telemetry.points("gen_ai.client.operation.duration")
    assert point.count == 1
    assert dict(point.attributes or {})["error.type"] == "ModelError"
    assert telemetry.points("gen_ai.client.token.usage") == []  # nothing reported


class CancelOnModelCall:
    def __init__(self) -> None:
        self.agent: Agent | None = None

    def before_model_call(self, event: BeforeModelCall) -> None:
        assert self.agent is not None
        self.agent.cancel("user stop")


def test_a_cancelled_call_is_recorded_as_cancelled(telemetry: Telemetry) -> None:
    hook = CancelOnModelCall()
    agent = Agent(ScriptedModel([{"stall_after": 0}]), hooks=[hook], name="stoppable")
    hook.agent = agent
    assert agent.invoke("hi").stop_reason == "cancelled"
    run = telemetry.one("invoke_agent stoppable")
    assert run.status.status_code is StatusCode.UNSET
    assert attrs(run)["agent_sync.cancel_reason"] == "user stop"
    assert attrs(telemetry.one("chat"))["error.type"] == "cancelled"
    (point,) = telemetry.points("gen_ai.client.operation.duration")
    assert dict(point.attributes or {})["error.type"] == "cancelled"


def test_a_cancel_from_another_thread_mid_stream(telemetry: Telemetry) -> None:
    streaming = threading.Event()

    class Signal:
        def before_model_call(self, event: BeforeModelCall) -> None:
            streaming.set()

    agent = Agent(ScriptedModel([{"text": "x" * 50, "stall_after": 2}]), hooks=[Signal()])
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(agent.invoke("hi")))
    worker.start()
    assert streaming.wait(timeout=30)
    agent.cancel("stop")
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert outcome[0].stop_reason == "cancelled"
    assert attrs(telemetry.one("chat"))["error.type"] == "cancelled"
    assert telemetry.one("invoke_agent agent").end_time is not None


# --- metrics -------------------------------------------------------------------------------


def test_token_usage_and_duration_metrics(telemetry: Telemetry) -> None:
    with OpenAIServer(WEATHER_TURNS, model="gpt-test-2025-01-01") as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key=KEY)
        try:
            result = Agent(model, tools=[get_weather]).invoke("Weather in Oslo?")
        finally:
            model.close()
    assert telemetry.unit("gen_ai.client.token.usage") == "{token}"
    assert telemetry.unit("gen_ai.client.operation.duration") == "s"
    by_type = {
        dict(p.attributes or {})["gen_ai.token.type"]: p
        for p in telemetry.points("gen_ai.client.token.usage")
    }
    assert set(by_type) == {"input", "output"}
    assert by_type["input"].count == by_type["output"].count == 2  # two model calls
    assert by_type["input"].sum == result.usage["inputTokens"]
    assert by_type["output"].sum == result.usage["outputTokens"]
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test-2025-01-01",
        "server.address": "127.0.0.1",
    }
    for point in [*by_type.values(), *telemetry.points("gen_ai.client.operation.duration")]:
        found = dict(point.attributes or {})
        assert {k: found[k] for k in common} == common
        assert "error.type" not in found
        assert "agent_sync.run_id" not in found  # no per-run cardinality on metrics
    (duration,) = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 2 and duration.sum > 0


def test_metrics_without_a_tracer_provider() -> None:
    _tracing.use_provider(None)  # the global tracer provider: the API's default, no spans
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    _tracing.use_meter_provider(meters)
    try:
        Agent(ScriptedModel(["hello"])).invoke("hi")
        telemetry = Telemetry(reader)
        assert len(telemetry.points("gen_ai.client.operation.duration")) == 1
    finally:
        _tracing.use_meter_provider(None)
        meters.shutdown()


@pytest.mark.timeout(120)
def test_without_the_conventions_tracing_is_off_and_says_so() -> None:
    """A process whose semantic-conventions package lacks the names (or is missing) runs
    untraced, with one WARNING, rather than with spans named by strings of ours."""
    code = textwrap.dedent(
        """
        import logging, sys
        sys.modules["opentelemetry.semconv._incubating.attributes.gen_ai_attributes"] = None
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
        from opentelemetry.sdk.trace import TracerProvider
        from agent_sync import Agent, _tracing
        from agent_sync.testing import ScriptedModel
        _tracing.use_provider(TracerProvider())
        kw = dict(run_id="r", model=object(), conversation_id=None, trace_content=False)
        assert _tracing.run_tracer(**kw) is None
        assert Agent(ScriptedModel(["hello"])).invoke("hi").text == "hello"
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=110, env=env
    )
    lines = done.stdout.splitlines()
    assert lines[-1:] == ["ok"], done.stderr
    assert sum("tracing is off" in line for line in lines) == 1


def test_a_fallback_s_answer_is_traced_as_the_model_that_gave_it(telemetry: Telemetry) -> None:
    # the primary answers 429, the fallback answers: the call's span and metrics name the
    # provider and server that produced the response; the request model is what was asked
    with (
        AnthropicServer([{"status": 429}]) as primary_server,
        OpenAIServer(["It is 21 degrees."], model="gpt-test-2025-01-01") as fallback_server,
    ):
        primary = AnthropicModel(
            "claude-x", client_args={"base_url": primary_server.base_url, "api_key": KEY}
        )
        fallback = OpenAIModel("gpt-test", base_url=fallback_server.url, api_key=KEY)
        try:
            result = Agent(FallbackModel(primary, fallback)).invoke("Weather in Oslo?")
        finally:
            primary.close()
            fallback.close()
        port = int(fallback_server.url.split(":")[2].split("/")[0])
    assert result.metrics.model_ids == ("gpt-test",)
    found = attrs(telemetry.one("chat claude-x"))
    assert found["gen_ai.request.model"] == "claude-x"
    assert found["gen_ai.provider.name"] == "openai"
    assert (found["server.address"], found["server.port"]) == ("127.0.0.1", port)
    assert found["gen_ai.response.model"] == "gpt-test-2025-01-01"
    assert found["gen_ai.response.id"].startswith("chatcmpl-")
    points = telemetry.points("gen_ai.client.operation.duration")
    assert len(points) == 1
    for point in points + telemetry.points("gen_ai.client.token.usage"):
        named = dict(point.attributes or {})
        assert (named["gen_ai.provider.name"], named["server.port"]) == ("openai", port)
        assert named["gen_ai.response.model"] == "gpt-test-2025-01-01"
