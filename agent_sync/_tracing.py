"""OpenTelemetry tracing of runs (the ``otel`` extra), per the GenAI semantic conventions.

* **Zero cost when off.** ``opentelemetry`` is never imported at module level: the run
  driver calls :func:`run_tracer` once per run, which imports the API on first use (the
  outcome is cached) and returns ``None`` unless a real tracer provider is configured,
  checked on every call since an application may configure one after importing us.
* **Spans**: ``invoke_agent`` (kind INTERNAL: the agent runs in this process) per run, a
  child of whatever span is current when the run starts; children ``chat {model_id}``
  (CLIENT; one per model call, retries included) and ``execute_tool {name}`` (INTERNAL).
  Children are parented explicitly. A span is made *current* only inside
  :meth:`RunTracer.model_call_scope` (the start of a request, so a provider SDK's own span
  nests under ``chat``): a run is a generator that hands control back to its caller
  between events, and a context attached across a ``yield`` would leak into the caller.
* **Attributes**: ``gen_ai.operation.name``, ``gen_ai.provider.name`` (:func:`provider_name`),
  ``gen_ai.request.model`` (the model's ``model_id``), ``gen_ai.conversation.id``,
  ``gen_ai.usage.input_tokens``/``output_tokens`` and, when reported,
  ``gen_ai.usage.cache_read.input_tokens``/``cache_creation.input_tokens``
  (``input_tokens`` includes cached tokens as the conventions ask: for Anthropic and
  Bedrock, whose ``inputTokens`` omit them, it is the sum), ``gen_ai.response.finish_reasons``
  (the model's stop reason as agent_sync spells it, e.g. ``["end_turn"]``),
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` (``"function"``);
  ``agent_sync.run_id`` on every span, ``agent_sync.cycle`` on model and tool spans,
  ``agent_sync.stop_reason`` and ``agent_sync.cancel_reason`` on the run's span.
* **Errors** (the ``error.type`` values, which the conventions ask us to list): the
  exception's class name (``ModelThrottledError``, ``HookError``, ``KeyboardInterrupt``...)
  with status ERROR, the redacted ``str(exc)`` as description and an ``exception`` event
  (type, message, this exception's own traceback: not its chained causes, which may come
  from code that does not redact); ``cancelled``: a model or tool call cut short by a
  cancel; ``tool_error``: a tool call answered with an error result (it raised, had bad
  input, was denied or unknown; the text is tool output, so never in the description);
  ``abandoned``: a span still open when the run ended (a tool that ignored cancel). A
  cancelled *run* is not an error: status UNSET, with ``agent_sync.cancel_reason``.
* **Content** only with ``trace_content=True``: ``gen_ai.input.messages`` (the history
  sent, on chat spans; the prompt, on the run's span), ``gen_ai.output.messages`` (the
  assistant message; on the run's span the last one), ``gen_ai.tool.call.arguments`` and
  ``gen_ai.tool.call.result``: JSON strings in the conventions' message schema (what they
  prescribe while the Python SDK has no structured span attributes). Tool results become
  ``role: "tool"`` messages; images and documents a part naming kind and format, never
  their bytes. The system prompt is not recorded (the hook events do not carry it).
* A tool call that never started (denied, unknown tool) still gets an ``execute_tool``
  span, created and ended when its result arrives: status ERROR ``not run``.
* **Never breaks a run**: every :class:`RunTracer` method catches ``Exception`` and logs
  it at DEBUG.

Thread-safety: a :class:`RunTracer` is used by its run's loop thread only (no lock).
:func:`run_tracer` and :func:`use_provider` may be called from any thread: the module
caches are single assignments of immutable values, and a race only repeats a lookup.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from . import __version__
from ._redact import redact
from .cancel import CancelledError
from .hooks import AfterModelCall, AfterToolCall, BeforeModelCall
from .messages import CANCELLED_TEXT, ContentBlock, Message, ToolResult, ToolUse, Usage

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from types import ModuleType

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["RunTracer", "provider_name", "run_tracer", "use_provider"]

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")

_NOT_LOADED: Any = object()
_api: ModuleType | None = _NOT_LOADED
"""``opentelemetry.trace``; ``None`` if it is not importable."""
_cache: tuple[object, Tracer | None] | None = None
"""The last provider seen and its tracer (``None``: a no-op provider)."""
_override: TracerProvider | None = None

_PROVIDERS = {
    ("agent_sync.models.anthropic", "AnthropicModel"): "anthropic",
    ("agent_sync.models.bedrock", "BedrockModel"): "aws.bedrock",
    ("agent_sync.models.openai", "OpenAIModel"): "openai",
}
_CACHE_EXCLUDED = frozenset({"anthropic", "aws.bedrock"})  # inputTokens omit cached tokens
_FINISH = {  # stop reason -> the conventions' output-message finish_reason
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "content_filtered": "content_filter",
    "guardrail_intervened": "content_filter",
}


def use_provider(provider: TracerProvider | None) -> None:
    """Trace runs into ``provider`` instead of the global tracer provider.

    For tests (the global provider can be set only once per process) and for an
    application that keeps agent_sync's spans apart; ``None`` goes back to the global
    provider. Thread-safe; runs already started keep their tracer.
    """
    global _override, _cache
    _override = provider
    _cache = None


def _trace_api() -> ModuleType | None:
    global _api
    if _api is _NOT_LOADED:
        try:
            from opentelemetry import trace
        except ImportError:
            _api = None
        else:
            _api = trace
    return _api


def _tracer() -> Tracer | None:
    """The current provider's tracer, or ``None`` when nothing would record spans."""
    global _cache
    api = _trace_api()
    if api is None:
        return None
    provider = _override if _override is not None else api.get_tracer_provider()
    cached = _cache
    if cached is not None and cached[0] is provider:
        return cached[1]
    tracer: Tracer | None = None
    if not isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
        tracer = provider.get_tracer("agent_sync", __version__)
        if isinstance(tracer, (api.NoOpTracer, api.ProxyTracer)):  # e.g. OTEL_SDK_DISABLED
            tracer = None
    _cache = (provider, tracer)
    return tracer


def run_tracer(
    *, run_id: str, model: object, conversation_id: str | None, trace_content: bool
) -> RunTracer | None:
    """A tracer for one run, or ``None`` (zero cost) when tracing is off.

    Off: ``opentelemetry`` is not importable, or the global tracer provider is the API's
    default (no SDK provider set; checked on every call), or it hands out no-op tracers.

    Args:
        run_id: The run's id (``agent_sync.run_id`` on every span).
        model: The run's model (provider name, ``model_id``).
        conversation_id: ``gen_ai.conversation.id``, when not ``None``.
        trace_content: Record prompts, completions, tool arguments and results.

    Returns:
        A :class:`RunTracer` for the run's loop thread, or ``None``. Never raises.
    """
    try:
        tracer = _tracer()
        if tracer is None:
            return None
        return RunTracer(
            tracer,
            run_id=run_id,
            model=model,
            conversation_id=conversation_id,
            trace_content=trace_content,
        )
    except Exception:
        logger.debug("run_id=<%s> | tracing setup failed; run not traced", run_id, exc_info=True)
        return None


def provider_name(model: object) -> str:
    """``gen_ai.provider.name`` of a model.

    A non-empty ``provider_name`` string attribute wins; else agent_sync's models (and
    their subclasses) give ``anthropic``, ``aws.bedrock``, ``openai``; else the class
    name, lowercased.
    """
    name = getattr(model, "provider_name", None)
    if isinstance(name, str) and name:
        return name
    for cls in type(model).__mro__:
        known = _PROVIDERS.get((cls.__module__, cls.__qualname__))
        if known is not None:
            return known
    return type(model).__name__.lower()


def _guarded(
    method: Callable[Concatenate[RunTracer, _P], None],
) -> Callable[Concatenate[RunTracer, _P], None]:
    """A tracing bug must never break a run: log it at DEBUG and carry on."""

    @functools.wraps(method)
    def wrapper(self: RunTracer, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            logger.debug(
                "run_id=<%s>, method=<%s> | tracing failed",
                self.run_id,
                method.__name__,
                exc_info=True,
            )

    return wrapper


class RunTracer:
    """The spans of one run. Every method is called from the run's loop thread only.

    No method raises (errors are logged at DEBUG). :meth:`run_ended` ends every span still
    open and is idempotent; after it the other methods do nothing.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        run_id: str,
        model: object,
        conversation_id: str | None,
        trace_content: bool,
    ) -> None:
        from opentelemetry import context, trace  # importable: the tracer came from it

        self.run_id = run_id
        self._trace = trace
        self._context = context
        self._tracer = tracer
        self._content = trace_content
        self._provider = provider_name(model)
        model_id = getattr(model, "model_id", None)
        self._model_id = model_id if isinstance(model_id, str) and model_id else None
        common: dict[str, Any] = {"gen_ai.provider.name": self._provider}
        if self._model_id is not None:
            common["gen_ai.request.model"] = self._model_id
        if conversation_id is not None:
            common["gen_ai.conversation.id"] = conversation_id
        common["agent_sync.run_id"] = run_id
        self._common = common
        self._run: Span | None = None
        self._parent: Context | None = None
        self._chats: dict[int, Span] = {}
        self._tools: dict[str, Span] = {}
        self._last_output: tuple[Message, str | None] | None = None
        self._ended = False

    @_guarded
    def run_started(self, prompt: list[ContentBlock] | None) -> None:
        """Open the ``invoke_agent`` span (a child of the caller's current span)."""
        if self._ended or self._run is not None:
            return
        attributes = {"gen_ai.operation.name": "invoke_agent", **self._common}
        if self._content and prompt:
            user: Message = {"role": "user", "content": prompt}
            attributes["gen_ai.input.messages"] = _json(_chat_messages([user]))
        kind = self._trace.SpanKind.INTERNAL
        self._run = span = self._tracer.start_span("invoke_agent", kind=kind, attributes=attributes)
        self._parent = self._trace.set_span_in_context(span)

    @_guarded
    def model_call_started(self, event: BeforeModelCall) -> None:
        """Open a ``chat {model_id}`` span."""
        if self._ended:
            return
        attributes = {
            "gen_ai.operation.name": "chat",
            **self._common,
            "agent_sync.cycle": event.cycle,
        }
        if self._content:
            attributes["gen_ai.input.messages"] = _json(_chat_messages(event.messages))
        name = f"chat {self._model_id}" if self._model_id else "chat"
        kind = self._trace.SpanKind.CLIENT
        self._chats[event.cycle] = self._tracer.start_span(
            name, context=self._parent, kind=kind, attributes=attributes
        )

    @_guarded
    def model_call_ended(self, event: AfterModelCall) -> None:
        """End the call's span with usage, finish reason, and the error or the output."""
        span = self._chats.pop(event.cycle, None)
        if span is None:
            return
        try:
            if event.usage is not None:
                span.set_attributes(_usage_attributes(event.usage, self._provider))
            if event.stop_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [event.stop_reason])
            if event.error is not None:
                self._fail(span, event.error)
            elif event.message is not None:
                self._last_output = (event.message, event.stop_reason)
                if self._content:
                    output = _output_message(event.message, event.stop_reason)
                    span.set_attribute("gen_ai.output.messages", _json([output]))
        finally:
            span.end()

    def model_call_scope(self, cycle: int) -> AbstractContextManager[None]:
        """Make the call's ``chat`` span current for a block, so that spans made in it (the
        anthropic SDK makes one per API call; HTTP client instrumentation) nest under it.

        Only for a block that does not yield to the run's caller: wrap the start of the
        request (``model.stream(...)`` and the read of its first events), never a loop
        that hands events out. Never raises of its own; the block's exceptions pass through.
        """
        try:
            span = self._chats.get(cycle)
            if span is not None:
                return _Current(self, self._trace.set_span_in_context(span))
        except Exception:
            logger.debug(
                "run_id=<%s> | tracing failed in model_call_scope", self.run_id, exc_info=True
            )
        return contextlib.nullcontext()

    @_guarded
    def tool_started(self, tool_use: ToolUse, cycle: int) -> None:
        """Open an ``execute_tool {name}`` span."""
        if not self._ended:
            self._tools[tool_use["toolUseId"]] = self._tool_span(tool_use, cycle, None)

    @_guarded
    def tool_ended(self, event: AfterToolCall) -> None:
        """End the call's span; a call that never started gets one created and ended now."""
        if self._ended:
            return
        span = self._tools.pop(event.tool_use["toolUseId"], None)
        ran = span is not None
        if span is None:
            start = time.time_ns() - int(max(event.duration_s, 0.0) * 1e9)
            span = self._tool_span(event.tool_use, event.cycle, start)
        try:
            result = event.result
            if self._content:
                span.set_attribute("gen_ai.tool.call.result", _json(_result_value(result)))
            if result.get("status") == "error":
                if result.get("content") == [{"text": CANCELLED_TEXT}]:
                    self._error(span, "cancelled", "cancelled")
                else:
                    self._error(span, "tool_error", "tool error" if ran else "not run")
        finally:
            span.end()

    @_guarded
    def run_ended(
        self,
        *,
        stop_reason: str | None,
        cancel_reason: str | None,
        usage: Usage,
        error: BaseException | None,
    ) -> None:
        """End every span still open, then the run's span. Idempotent."""
        if self._ended:
            return
        self._ended = True
        left = [(s, "chat") for s in self._chats.values()]
        left += [(s, "tool") for s in self._tools.values()]
        self._chats.clear()
        self._tools.clear()
        for span, kind in left:
            try:  # one failing span must not leave the others open
                if kind == "tool":
                    self._error(span, "abandoned", "abandoned")
                elif error is not None:
                    self._fail(span, error)
                else:
                    cut = "cancelled" if cancel_reason is not None else "abandoned"
                    self._error(span, cut, cut)
            finally:
                span.end()
        run = self._run
        if run is None:
            return
        try:
            run.set_attributes(_usage_attributes(usage, self._provider))
            if stop_reason is not None:
                run.set_attribute("agent_sync.stop_reason", stop_reason)
            if cancel_reason is not None:
                run.set_attribute("agent_sync.cancel_reason", cancel_reason)
            if error is not None:
                self._fail(run, error)
            elif self._content and self._last_output is not None:
                output = _output_message(*self._last_output)
                run.set_attribute("gen_ai.output.messages", _json([output]))
        finally:
            run.end()

    def _tool_span(self, tool_use: ToolUse, cycle: int, start_time: int | None) -> Span:
        name = tool_use["name"]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": tool_use["toolUseId"],
            "gen_ai.tool.type": "function",
            "agent_sync.run_id": self.run_id,
            "agent_sync.cycle": cycle,
        }
        if self._content:
            attributes["gen_ai.tool.call.arguments"] = _json(tool_use.get("input"))
        return self._tracer.start_span(
            f"execute_tool {name}",
            context=self._parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_time,
        )

    def _error(self, span: Span, error_type: str, description: str) -> None:
        span.set_attribute("error.type", error_type)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))

    def _fail(self, span: Span, exc: BaseException) -> None:
        if isinstance(exc, CancelledError):
            self._error(span, "cancelled", "cancelled")
            return
        name = type(exc).__qualname__
        message = redact(_safe_str(exc))
        self._error(span, name, message or name)
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False)
        span.add_event(
            "exception",
            {
                "exception.type": f"{type(exc).__module__}.{name}",
                "exception.message": message,
                "exception.stacktrace": redact("".join(lines)),
            },
        )


class _Current:
    """Attach a context on entry, detach it on exit, in the same thread and frame."""

    def __init__(self, tracer: RunTracer, context: Context) -> None:
        self._tracer = tracer
        self._ctx = context
        self._token: object = None

    def __enter__(self) -> None:
        try:
            self._token = self._tracer._context.attach(self._ctx)
        except Exception:
            logger.debug(
                "run_id=<%s> | tracing failed to attach", self._tracer.run_id, exc_info=True
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            try:
                self._tracer._context.detach(token)
            except Exception:
                logger.debug(
                    "run_id=<%s> | tracing failed to detach", self._tracer.run_id, exc_info=True
                )


def _usage_attributes(usage: Mapping[str, Any], provider: str) -> dict[str, int]:
    read, write = usage.get("cacheReadInputTokens"), usage.get("cacheWriteInputTokens")
    inputs, outputs = usage.get("inputTokens"), usage.get("outputTokens")
    attributes: dict[str, int] = {}
    if isinstance(inputs, int):
        if provider in _CACHE_EXCLUDED:
            inputs += sum(n for n in (read, write) if isinstance(n, int))
        attributes["gen_ai.usage.input_tokens"] = inputs
    if isinstance(outputs, int):
        attributes["gen_ai.usage.output_tokens"] = outputs
    if isinstance(read, int):
        attributes["gen_ai.usage.cache_read.input_tokens"] = read
    if isinstance(write, int):
        attributes["gen_ai.usage.cache_creation.input_tokens"] = write
    return attributes


# --- content, in the conventions' message schema (trace_content=True only) -------------


def _chat_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """``[{"role", "parts"}]``; a user message's tool results become a ``tool`` message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks = message["content"]
        results = [_part(b) for b in blocks if "toolResult" in b]
        others = [_part(b) for b in blocks if "toolResult" not in b]
        if results:
            out.append({"role": "tool", "parts": results})
        if others or not results:
            out.append({"role": message["role"], "parts": others})
    return out


def _output_message(message: Message, stop_reason: str | None) -> dict[str, Any]:
    parts = [_part(b) for b in message["content"]]
    finish = _FINISH.get(stop_reason, stop_reason) if stop_reason else "error"
    return {"role": "assistant", "parts": parts, "finish_reason": finish}


def _part(block: ContentBlock) -> dict[str, Any]:
    if "text" in block:
        return {"type": "text", "content": block["text"]}
    if "toolUse" in block:
        use = block["toolUse"]
        return {
            "type": "tool_call",
            "id": use["toolUseId"],
            "name": use["name"],
            "arguments": use.get("input"),
        }
    if "toolResult" in block:
        result = block["toolResult"]
        part = {"type": "tool_call_response", "id": result["toolUseId"]}
        part["response"] = _result_value(result)
        if result.get("status") == "error":
            part["status"] = "error"
        return part
    if "reasoningContent" in block:
        text = block["reasoningContent"].get("reasoningText", {}).get("text", "")
        return {"type": "reasoning", "content": text}
    if "image" in block:
        return {"type": "image", "format": block["image"].get("format")}
    if "document" in block:
        return {"type": "document", "format": block["document"].get("format")}
    return {"type": next(iter(block), "unknown")}


def _result_value(result: ToolResult) -> Any:
    """A result's content as one value: a lone piece's text or JSON, else the list."""
    values = [piece.get("text", piece.get("json")) for piece in result.get("content", [])]
    return values[0] if len(values) == 1 else values


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=lambda o: f"<{type(o).__name__}>")


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__ must not hide the failure
        return f"<{type(exc).__name__} that could not be shown>"
