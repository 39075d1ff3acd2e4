"""OpenTelemetry tracing of runs (``agent_sync._tracing``), with the SDK's in-memory exporter.

The spans go to one module-level SDK provider handed to ``_tracing.use_provider`` for the
duration of each test (the global provider can be set only once per process, and setting
it here would trace every later test of the session). The global-provider path, the "off"
paths and the import-time cost are checked in clean interpreters (subprocesses).

``TestEndToEnd`` drives a real ``Agent`` with ``ScriptedModel``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agent_sync import Agent, ModelError, ToolContext, _tracing, tool
from agent_sync._tracing import _genai_messages
from agent_sync.cancel import CancelledError
from agent_sync.errors import ModelThrottledError
from agent_sync.hooks import AfterModelCall, AfterToolCall, BeforeModelCall
from agent_sync.messages import CANCELLED_TEXT, Message, ToolResult, ToolUse
from agent_sync.testing import ScriptedModel

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))

SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX"
PROMPT = "What's the weather in Oslo? (prompt text)"
ANSWER = "It is 21 degrees in Oslo. (answer text)"


class FakeModel:
    """Only what the tracer reads: ``model_id`` and ``provider_name``."""

    def __init__(self, model_id: str | None = "m-1", provider_name: str | None = None) -> None:
        self.model_id = model_id
        if provider_name is not None:
            self.provider_name = provider_name


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    _tracing.use_provider(_PROVIDER)
    try:
        yield _EXPORTER
    finally:
        _tracing.use_provider(None)
        _EXPORTER.clear()


def make_tracer(*, trace_content: bool = False, model: object = None, **kw: Any) -> Any:
    tracer = _tracing.run_tracer(
        run_id=kw.get("run_id", "run-1"),
        model=model if model is not None else FakeModel(),
        conversation_id=kw.get("conversation_id", "conv-1"),
        trace_content=trace_content,
    )
    assert tracer is not None
    return tracer


def by_name(spans: Any, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Any, name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


TOOL_USE: ToolUse = {"toolUseId": "call-1", "name": "get_weather", "input": {"city": "Oslo"}}


def drive_tool_run(tracer: Any, *, tool_result_text: str = "21 degrees") -> None:
    """One run: prompt, a model call asking for a tool, the tool, a final model call."""
    user: Message = {"role": "user", "content": [{"text": PROMPT}]}
    asking: Message = {
        "role": "assistant",
        "content": [{"text": "let me look"}, {"toolUse": TOOL_USE}],
    }
    tracer.run_started([{"text": PROMPT}])
    tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(user,), model=None))
    tracer.after_model_call(
        AfterModelCall(
            run_id="run-1",
            cycle=1,
            message=asking,
            stop_reason="tool_use",
            usage={"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
            error=None,
            duration_s=0.1,
        )
    )
    tracer.tool_started(TOOL_USE, 1)
    result: ToolResult = {
        "toolUseId": "call-1",
        "status": "success",
        "content": [{"text": tool_result_text}],
    }
    tracer.after_tool_call(
        AfterToolCall(run_id="run-1", cycle=1, tool_use=TOOL_USE, result=result, duration_s=0.01)
    )
    answered: Message = {"role": "user", "content": [{"toolResult": result}]}
    final: Message = {"role": "assistant", "content": [{"text": ANSWER}]}
    tracer.before_model_call(
        BeforeModelCall(run_id="run-1", cycle=2, messages=(user, asking, answered), model=None)
    )
    tracer.after_model_call(
        AfterModelCall(
            run_id="run-1",
            cycle=2,
            message=final,
            stop_reason="end_turn",
            usage={"inputTokens": 20, "outputTokens": 7, "totalTokens": 27},
            error=None,
            duration_s=0.1,
        )
    )
    tracer.run_ended(
        stop_reason="end_turn",
        cancel_reason=None,
        usage={"inputTokens": 30, "outputTokens": 12, "totalTokens": 42},
        error=None,
    )


class TestSpans:
    def test_names_kinds_parents(self, exporter: InMemorySpanExporter) -> None:
        drive_tool_run(make_tracer())
        spans = exporter.get_finished_spans()
        assert sorted(s.name for s in spans) == [
            "chat m-1",
            "chat m-1",
            "execute_tool get_weather",
            "invoke_agent agent",
        ]
        run = one(spans, "invoke_agent agent")
        assert run.kind is SpanKind.INTERNAL
        assert run.parent is None  # nothing was current when the run started
        for span in spans:
            assert span.end_time is not None
            assert span.context.trace_id == run.context.trace_id
            if span is not run:
                assert parent_id(span) == run.context.span_id
        assert {s.kind for s in by_name(spans, "chat m-1")} == {SpanKind.CLIENT}
        assert one(spans, "execute_tool get_weather").kind is SpanKind.INTERNAL

    def test_run_span_is_a_child_of_the_callers_current_span(
        self, exporter: InMemorySpanExporter
    ) -> None:
        with _PROVIDER.get_tracer("app").start_as_current_span("request") as outer:
            drive_tool_run(make_tracer())
        run = one(exporter.get_finished_spans(), "invoke_agent agent")
        assert parent_id(run) == outer.get_span_context().span_id

    def test_attributes(self, exporter: InMemorySpanExporter) -> None:
        drive_tool_run(make_tracer(model=FakeModel("m-1", provider_name="acme")))
        spans = exporter.get_finished_spans()
        run = attrs(one(spans, "invoke_agent agent"))
        assert run == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "agent",
            "gen_ai.provider.name": "acme",
            "gen_ai.request.model": "m-1",
            "gen_ai.conversation.id": "conv-1",
            "agent_sync.run_id": "run-1",
            "gen_ai.usage.input_tokens": 30,
            "gen_ai.usage.output_tokens": 12,
            "agent_sync.stop_reason": "end_turn",
        }
        first, second = sorted(by_name(spans, "chat m-1"), key=lambda s: s.start_time or 0)
        assert attrs(first) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "acme",
            "gen_ai.request.model": "m-1",
            "gen_ai.conversation.id": "conv-1",
            "agent_sync.run_id": "run-1",
            "gen_ai.request.stream": True,
            "gen_ai.output.type": "text",
            "agent_sync.cycle": 1,
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 5,
            "gen_ai.response.finish_reasons": ("tool_use",),
        }
        assert attrs(second)["gen_ai.response.finish_reasons"] == ("end_turn",)
        assert attrs(second)["agent_sync.cycle"] == 2
        assert attrs(one(spans, "execute_tool get_weather")) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call-1",
            "gen_ai.tool.type": "function",
            "agent_sync.run_id": "run-1",
            "agent_sync.cycle": 1,
        }
        for span in spans:
            assert span.status.status_code is StatusCode.UNSET

    def test_no_conversation_id_no_model_id(self, exporter: InMemorySpanExporter) -> None:
        tracer = make_tracer(model=FakeModel(model_id=None), conversation_id=None)
        tracer.run_started(None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        tracer.run_ended(stop_reason=None, cancel_reason=None, usage={}, error=None)
        spans = exporter.get_finished_spans()
        chat = one(spans, "chat")
        assert "gen_ai.conversation.id" not in attrs(chat)
        assert "gen_ai.request.model" not in attrs(chat)
        assert attrs(chat)["gen_ai.provider.name"] == "fakemodel"  # the class name, lowercased

    def test_provider_names_of_the_shipped_models(self) -> None:
        from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel

        anthropic = AnthropicModel("claude-x", client_args={"api_key": "test-key-123456"})
        bedrock = BedrockModel("anthropic.claude-x", region_name="us-east-1")
        openai = OpenAIModel("gpt-x", base_url="http://127.0.0.1:9/v1", api_key="test-key-123456")

        class MyOpenAI(OpenAIModel):
            pass

        assert _tracing.provider_name(anthropic) == "anthropic"
        assert _tracing.provider_name(bedrock) == "aws.bedrock"
        assert _tracing.provider_name(openai) == "openai"
        assert _tracing.provider_name(MyOpenAI("m")) == "openai"
        assert _tracing.provider_name(ScriptedModel([])) == "scriptedmodel"
        assert _tracing.provider_name(FakeModel(provider_name="vllm")) == "vllm"

    @pytest.mark.parametrize(
        ("provider", "expected"),
        [("anthropic", 10 + 100 + 5), ("aws.bedrock", 10 + 100 + 5), ("openai", 10)],
    )
    def test_input_tokens_include_the_cache(
        self, exporter: InMemorySpanExporter, provider: str, expected: int
    ) -> None:
        tracer = make_tracer(model=FakeModel(provider_name=provider))
        tracer.run_started(None)
        usage = {
            "inputTokens": 10,
            "outputTokens": 3,
            "totalTokens": 13,
            "cacheReadInputTokens": 100,
            "cacheWriteInputTokens": 5,
        }
        tracer.run_ended(stop_reason="end_turn", cancel_reason=None, usage=usage, error=None)
        run = attrs(one(exporter.get_finished_spans(), "invoke_agent agent"))
        assert run["gen_ai.usage.input_tokens"] == expected
        assert run["gen_ai.usage.cache_read.input_tokens"] == 100
        assert run["gen_ai.usage.cache_creation.input_tokens"] == 5


class TestErrorsAndCancel:
    def test_model_error(self, exporter: InMemorySpanExporter) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        error = ModelThrottledError("slow down", status=429, provider="acme")
        tracer.after_model_call(
            AfterModelCall(
                run_id="run-1",
                cycle=1,
                message=None,
                stop_reason=None,
                usage=None,
                error=error,
                duration_s=1.0,
            )
        )
        tracer.run_ended(stop_reason=None, cancel_reason=None, usage={}, error=error)
        spans = exporter.get_finished_spans()
        for span in (one(spans, "chat m-1"), one(spans, "invoke_agent agent")):
            assert span.status.status_code is StatusCode.ERROR
            assert span.status.description == "slow down"
            assert attrs(span)["error.type"] == "ModelThrottledError"
            (event,) = span.events
            assert event.name == "exception"
            event_attrs = dict(event.attributes or {})
            assert event_attrs["exception.type"] == "agent_sync.errors.ModelThrottledError"
            assert event_attrs["exception.message"] == "slow down"

    def test_secrets_never_reach_a_span(self, exporter: InMemorySpanExporter) -> None:
        try:  # a real traceback, with the secret in the message and in a chained cause
            try:
                raise ValueError(f"upstream said: Authorization: Bearer {SECRET}")
            except ValueError as cause:
                raise RuntimeError(f"failed with key {SECRET}") from cause
        except RuntimeError as exc:
            error = exc
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.run_ended(stop_reason=None, cancel_reason=None, usage={}, error=error)
        run = one(exporter.get_finished_spans(), "invoke_agent agent")
        assert run.status.status_code is StatusCode.ERROR
        dumped = run.to_json()
        assert SECRET not in dumped
        assert "failed with key" in dumped
        assert "upstream said" not in dumped  # the chained cause is not recorded

    def test_cancelled_run_is_not_an_error(self, exporter: InMemorySpanExporter) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        tracer.after_model_call(
            AfterModelCall(
                run_id="run-1",
                cycle=1,
                message=None,
                stop_reason=None,
                usage={"inputTokens": 4, "outputTokens": 1, "totalTokens": 5},
                error=CancelledError("user stop"),
                duration_s=0.5,
            )
        )
        usage = {"inputTokens": 4, "outputTokens": 1, "totalTokens": 5}
        tracer.run_ended(
            stop_reason="cancelled", cancel_reason="user stop", usage=usage, error=None
        )
        spans = exporter.get_finished_spans()
        run = one(spans, "invoke_agent agent")
        assert attrs(run)["agent_sync.cancel_reason"] == "user stop"
        assert attrs(run)["agent_sync.stop_reason"] == "cancelled"
        assert run.status.status_code is StatusCode.UNSET
        chat = one(spans, "chat m-1")
        assert chat.status.status_code is StatusCode.ERROR
        assert attrs(chat)["error.type"] == "cancelled"
        assert attrs(chat)["gen_ai.usage.output_tokens"] == 1
        assert chat.events == ()  # a cancel is not an exception to record

    def test_open_spans_are_ended_by_run_ended(self, exporter: InMemorySpanExporter) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.tool_started(TOOL_USE, 1)  # abandoned: never answered
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=2, messages=(), model=None))
        tracer.run_ended(stop_reason="cancelled", cancel_reason="timeout", usage={}, error=None)
        spans = exporter.get_finished_spans()
        assert len(spans) == 3  # every span ended (unended spans are not exported)
        tool_span = one(spans, "execute_tool get_weather")
        assert tool_span.status.status_code is StatusCode.ERROR
        assert tool_span.status.description == "abandoned"
        assert attrs(tool_span)["error.type"] == "abandoned"
        assert attrs(one(spans, "chat m-1"))["error.type"] == "cancelled"

    def test_interrupted_run_ends_the_open_model_call_with_the_error(
        self, exporter: InMemorySpanExporter
    ) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        error = KeyboardInterrupt()
        tracer.run_ended(
            stop_reason="cancelled", cancel_reason="interrupted", usage={}, error=error
        )
        for span in exporter.get_finished_spans():
            assert span.status.status_code is StatusCode.ERROR
            assert attrs(span)["error.type"] == "KeyboardInterrupt"

    def test_run_ended_is_idempotent_and_ends_the_tracer(
        self, exporter: InMemorySpanExporter
    ) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.run_ended(stop_reason="end_turn", cancel_reason=None, usage={}, error=None)
        tracer.run_ended(stop_reason="end_turn", cancel_reason=None, usage={}, error=None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        tracer.tool_started(TOOL_USE, 1)
        assert [s.name for s in exporter.get_finished_spans()] == ["invoke_agent agent"]

    def test_tool_results(self, exporter: InMemorySpanExporter) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        cases = {
            "ok": ({"status": "success", "content": [{"text": "fine"}]}, True),
            "failed": ({"status": "error", "content": [{"text": f"boom {SECRET}"}]}, True),
            "cut": ({"status": "error", "content": [{"text": CANCELLED_TEXT}]}, True),
            "denied": ({"status": "error", "content": [{"text": "Denied: no"}]}, False),
        }
        for call_id, (result, started) in cases.items():
            use: ToolUse = {"toolUseId": call_id, "name": call_id, "input": {}}
            if started:
                tracer.tool_started(use, 1)
            tracer.after_tool_call(
                AfterToolCall(
                    run_id="run-1",
                    cycle=1,
                    tool_use=use,
                    result={"toolUseId": call_id, **result},  # type: ignore[typeddict-item]
                    duration_s=0.0,
                )
            )
        tracer.run_ended(stop_reason="end_turn", cancel_reason=None, usage={}, error=None)
        spans = exporter.get_finished_spans()
        ok = one(spans, "execute_tool ok")
        assert ok.status.status_code is StatusCode.UNSET
        failed = one(spans, "execute_tool failed")
        assert (failed.status.status_code, failed.status.description) == (
            StatusCode.ERROR,
            "tool error",
        )
        assert attrs(failed)["error.type"] == "tool_error"
        assert attrs(one(spans, "execute_tool cut"))["error.type"] == "cancelled"
        denied = one(spans, "execute_tool denied")  # never started: created and ended at once
        assert denied.status.description == "not run"
        assert parent_id(denied) == one(spans, "invoke_agent agent").context.span_id
        assert all("boom" not in s.to_json() for s in spans)  # tool output is content

    def test_a_broken_event_never_raises(
        self, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
    ) -> None:
        tracer = make_tracer(trace_content=True)
        tracer.run_started([{"text": "hi"}])
        caplog.set_level("DEBUG", logger="agent_sync._tracing")
        tracer.after_tool_call("not an event")  # a bug in the caller
        tracer.before_model_call(object())
        tracer.run_ended(stop_reason=None, cancel_reason=None, usage=None, error=None)
        assert sum("tracing failed" in r.getMessage() for r in caplog.records) == 3
        assert one(exporter.get_finished_spans(), "invoke_agent agent").end_time is not None

    def test_a_model_whose_attributes_raise_is_traced_without_them(
        self, exporter: InMemorySpanExporter
    ) -> None:
        class Hostile:
            @property
            def model_id(self) -> str:
                raise RuntimeError("no")

        tracer = _tracing.run_tracer(
            run_id="r", model=Hostile(), conversation_id=None, trace_content=False
        )
        assert tracer is None  # setup failed: the run goes on untraced


class TestModelCallScope:
    def test_the_chat_span_is_current_inside_only(self, exporter: InMemorySpanExporter) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        before = trace.get_current_span()
        with tracer.model_call_scope(1):
            inner = _PROVIDER.get_tracer("sdk").start_span("sdk call")  # e.g. anthropic's span
            inner.end()
        assert trace.get_current_span() is before
        with tracer.model_call_scope(7):  # no such call: nothing made current
            assert trace.get_current_span() is before
        tracer.run_ended(stop_reason=None, cancel_reason=None, usage={}, error=None)
        spans = exporter.get_finished_spans()
        assert parent_id(one(spans, "sdk call")) == one(spans, "chat m-1").context.span_id

    def test_exceptions_pass_through_and_the_context_is_restored(
        self, exporter: InMemorySpanExporter
    ) -> None:
        tracer = make_tracer()
        tracer.run_started(None)
        tracer.before_model_call(BeforeModelCall(run_id="run-1", cycle=1, messages=(), model=None))
        before = trace.get_current_span()
        with pytest.raises(ModelThrottledError), tracer.model_call_scope(1):
            raise ModelThrottledError()
        assert trace.get_current_span() is before


class TestContent:
    def test_no_content_by_default(self, exporter: InMemorySpanExporter) -> None:
        drive_tool_run(make_tracer())
        for span in exporter.get_finished_spans():
            dumped = span.to_json()
            for text in (PROMPT, ANSWER, "Oslo", "21 degrees", "let me look"):
                assert text not in dumped, (span.name, text)
            for key in attrs(span):
                assert key not in {
                    "gen_ai.input.messages",
                    "gen_ai.output.messages",
                    "gen_ai.tool.call.arguments",
                    "gen_ai.tool.call.result",
                }

    def test_content_when_asked(self, exporter: InMemorySpanExporter) -> None:
        drive_tool_run(make_tracer(trace_content=True))
        spans = exporter.get_finished_spans()
        run = attrs(one(spans, "invoke_agent agent"))
        assert json.loads(run["gen_ai.input.messages"]) == [
            {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}
        ]
        assert json.loads(run["gen_ai.output.messages"]) == [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": ANSWER}],
                "finish_reason": "stop",
            }
        ]
        first, second = sorted(by_name(spans, "chat m-1"), key=lambda s: s.start_time or 0)
        assert json.loads(attrs(first)["gen_ai.output.messages"]) == [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "let me look"},
                    {
                        "type": "tool_call",
                        "id": "call-1",
                        "name": "get_weather",
                        "arguments": {"city": "Oslo"},
                    },
                ],
                "finish_reason": "tool_call",
            }
        ]
        sent = json.loads(attrs(second)["gen_ai.input.messages"])
        assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
        assert sent[2]["parts"] == [
            {"type": "tool_call_response", "id": "call-1", "response": "21 degrees"}
        ]
        tool_span = attrs(one(spans, "execute_tool get_weather"))
        assert json.loads(tool_span["gen_ai.tool.call.arguments"]) == {"city": "Oslo"}
        assert json.loads(tool_span["gen_ai.tool.call.result"]) == "21 degrees"

    def test_other_blocks(self) -> None:
        message: Message = {
            "role": "user",
            "content": [
                {"text": "look"},
                {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}},
                {"toolResult": {"toolUseId": "t", "status": "error", "content": [{"text": "x"}]}},
                {"toolResult": {"toolUseId": "u", "content": [{"json": {"a": 1}}, {"text": "y"}]}},
            ],
        }
        thinking: Message = {
            "role": "assistant",
            "content": [{"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}],
        }
        assert _genai_messages.chat_messages([message, thinking]) == [
            {
                "role": "tool",
                "parts": [
                    {"type": "tool_call_response", "id": "t", "response": "x", "status": "error"},
                    {"type": "tool_call_response", "id": "u", "response": [{"a": 1}, "y"]},
                ],
            },
            {
                "role": "user",
                "parts": [{"type": "text", "content": "look"}, {"type": "image", "format": "png"}],
            },
            {"role": "assistant", "parts": [{"type": "reasoning", "content": "hmm"}]},
        ]


def run_clean(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter without any OTEL_* configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=110,  # a fresh interpreter importing an SDK: 5-20 s on two busy cores
        env=env,
        check=False,
    )


@pytest.mark.timeout(120)
class TestCleanInterpreter:
    def test_import_does_not_import_opentelemetry(self) -> None:
        done = run_clean(
            """
            import sys
            import agent_sync, agent_sync.run, agent_sync.hooks
            from agent_sync import Agent
            from agent_sync.testing import ScriptedModel
            assert not [m for m in sys.modules if m.startswith("opentelemetry")], "imported"
            print("ok")
            """
        )
        assert done.stdout.strip() == "ok", done.stderr

    def test_none_without_a_provider_then_spans_once_one_is_set(self) -> None:
        done = run_clean(
            """
            from agent_sync import Agent
            from agent_sync import _tracing
            from agent_sync.testing import ScriptedModel
            kw = dict(run_id="r", model=object(), conversation_id=None, trace_content=False)
            assert _tracing.run_tracer(**kw) is None  # the API's default proxy provider

            # configured after agent_sync was imported (and used): picked up from then on
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            assert _tracing.run_tracer(**kw) is not None
            Agent(ScriptedModel(["hello"])).invoke("hi")
            print(sorted(s.name for s in exporter.get_finished_spans()))
            """
        )
        assert done.stdout.strip() == "['chat', 'invoke_agent agent']", done.stderr

    def test_none_when_opentelemetry_is_not_installed(self) -> None:
        done = run_clean(
            """
            import sys
            sys.modules["opentelemetry"] = None  # what a missing package looks like to import
            from agent_sync import Agent
            from agent_sync import _tracing
            from agent_sync.testing import ScriptedModel
            kw = dict(run_id="r", model=object(), conversation_id=None, trace_content=True)
            assert _tracing.run_tracer(**kw) is None
            assert Agent(ScriptedModel(["hello"]), trace_content=True).invoke("hi").text == "hello"
            print("ok")
            """
        )
        assert done.stdout.strip() == "ok", done.stderr

    def test_none_when_the_sdk_is_disabled(self) -> None:
        done = run_clean(
            """
            import os
            os.environ["OTEL_SDK_DISABLED"] = "true"
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            trace.set_tracer_provider(TracerProvider())
            from agent_sync import _tracing
            kw = dict(run_id="r", model=object(), conversation_id=None, trace_content=False)
            assert _tracing.run_tracer(**kw) is None
            print("ok")
            """
        )
        assert done.stdout.strip() == "ok", done.stderr


# --- end to end: a real Agent, its run driver and ScriptedModel --------------------------


@tool
def get_weather(city: str) -> str:
    """Weather in a city.

    Args:
        city: The city.
    """
    return f"21 degrees in {city}"


@tool
def stop_the_run(context: ToolContext) -> str:
    """Cancel the run this tool belongs to, then answer."""
    context.cancel("user stop")
    return "stopping"


def weather_model() -> ScriptedModel:
    return ScriptedModel(
        [
            {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
            "It is 21 degrees in Oslo.",
        ]
    )


class CancelOnModelCall:
    """A hook cancelling its agent's run as the model call starts."""

    def __init__(self) -> None:
        self.agent: Agent | None = None

    def before_model_call(self, event: BeforeModelCall) -> None:
        assert self.agent is not None
        self.agent.cancel("user stop")


@pytest.mark.timeout(30)
class TestEndToEnd:
    def test_tool_run_spans_and_parents(self, exporter: InMemorySpanExporter) -> None:
        agent = Agent(weather_model(), tools=[get_weather])
        result = agent.invoke("Weather in Oslo?")
        spans = exporter.get_finished_spans()
        assert sorted(s.name for s in spans) == [
            "chat",
            "chat",
            "execute_tool get_weather",
            "invoke_agent agent",
        ]
        run = one(spans, "invoke_agent agent")
        for span in spans:
            assert attrs(span)["agent_sync.run_id"] == result.run_id
            if span is not run:
                assert parent_id(span) == run.context.span_id
        assert attrs(run)["agent_sync.stop_reason"] == "end_turn"
        assert attrs(run)["gen_ai.provider.name"] == "scriptedmodel"
        assert attrs(run)["gen_ai.usage.output_tokens"] == result.usage["outputTokens"]
        tool_span = one(spans, "execute_tool get_weather")
        tool_use = agent.messages[1]["content"][0]["toolUse"]
        assert attrs(tool_span)["gen_ai.tool.call.id"] == tool_use["toolUseId"]
        assert all(s.status.status_code is StatusCode.UNSET for s in spans)
        assert all("Oslo" not in s.to_json() for s in spans)

    def test_trace_content(self, exporter: InMemorySpanExporter) -> None:
        agent = Agent(weather_model(), tools=[get_weather], trace_content=True)
        agent.invoke("Weather in Oslo?")
        spans = exporter.get_finished_spans()
        run = attrs(one(spans, "invoke_agent agent"))
        assert "Weather in Oslo?" in run["gen_ai.input.messages"]
        assert "It is 21 degrees in Oslo." in run["gen_ai.output.messages"]
        tool_span = attrs(one(spans, "execute_tool get_weather"))
        assert json.loads(tool_span["gen_ai.tool.call.result"]) == "21 degrees in Oslo"

    def test_cancelled_during_a_model_call(self, exporter: InMemorySpanExporter) -> None:
        hook = CancelOnModelCall()
        agent = Agent(ScriptedModel([{"stall_after": 0}]), hooks=[hook])
        hook.agent = agent
        result = agent.invoke("hi")
        assert result.stop_reason == "cancelled"
        spans = exporter.get_finished_spans()
        run = one(spans, "invoke_agent agent")
        assert attrs(run)["agent_sync.cancel_reason"] == "user stop"
        assert attrs(run)["agent_sync.stop_reason"] == "cancelled"
        assert run.status.status_code is StatusCode.UNSET
        assert attrs(one(spans, "chat"))["error.type"] == "cancelled"

    def test_the_tracer_is_a_hook_called_before_the_users(
        self, exporter: InMemorySpanExporter
    ) -> None:
        seen: list[tuple[str, list[str]]] = []

        class Watcher:  # which spans had ended when each hook method ran
            def after_model_call(self, event: AfterModelCall) -> None:
                seen.append(("model", [s.name for s in exporter.get_finished_spans()]))

            def after_tool_call(self, event: AfterToolCall) -> None:
                seen.append(("tool", [s.name for s in exporter.get_finished_spans()]))

        Agent(weather_model(), tools=[get_weather], hooks=[Watcher()]).invoke("Weather?")
        assert seen == [
            ("model", ["chat"]),
            ("tool", ["chat", "execute_tool get_weather"]),
            ("model", ["chat", "execute_tool get_weather", "chat"]),
        ]

    def test_cancelled_by_a_tool(self, exporter: InMemorySpanExporter) -> None:
        model = ScriptedModel([{"tool_calls": [{"name": "stop_the_run", "input": {}}]}, "never"])
        result = Agent(model, tools=[stop_the_run]).invoke("hi")
        assert result.stop_reason == "cancelled"
        spans = exporter.get_finished_spans()
        assert attrs(one(spans, "invoke_agent agent"))["agent_sync.cancel_reason"] == "user stop"
        assert [s.name for s in by_name(spans, "chat")] == ["chat"]  # no second model call
        assert one(spans, "execute_tool stop_the_run").end_time is not None

    def test_model_error(self, exporter: InMemorySpanExporter) -> None:
        agent = Agent(ScriptedModel([{"error": ModelError("bad request")}]))
        with pytest.raises(ModelError):
            agent.invoke("hi")
        spans = exporter.get_finished_spans()
        for span in (one(spans, "invoke_agent agent"), one(spans, "chat")):
            assert span.status.status_code is StatusCode.ERROR
            assert attrs(span)["error.type"] == "ModelError"

    @pytest.mark.timeout(120)  # run_clean's bound
    def test_the_anthropic_sdks_own_span_nests_under_chat(self) -> None:
        # the anthropic SDK traces each API call itself, into the *global* provider
        done = run_clean(
            """
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            from agent_sync import Agent
            from agent_sync.models import AnthropicModel
            from agent_sync.testing.anthropic_server import AnthropicServer
            with AnthropicServer(["Hello!"]) as server:
                args = {"base_url": server.base_url, "api_key": "test-key-0123456789"}
                Agent(AnthropicModel("claude-x", client_args=args)).invoke("hi")
            spans = exporter.get_finished_spans()
            names = {s.context.span_id: s.name for s in spans}
            print(sorted((s.name, names.get(s.parent.span_id) if s.parent else None)
                         for s in spans))
            """
        )
        assert done.stdout.strip() == str(
            [
                ("anthropic.messages.create", "chat claude-x"),
                ("chat claude-x", "invoke_agent agent"),
                ("invoke_agent agent", None),
            ]
        ), done.stderr

    def test_no_tracer_provider_no_spans(self) -> None:
        _EXPORTER.clear()  # use_provider(None): the global provider, the API's default here
        Agent(weather_model(), tools=[get_weather]).invoke("Weather in Oslo?")
        assert _EXPORTER.get_finished_spans() == ()
