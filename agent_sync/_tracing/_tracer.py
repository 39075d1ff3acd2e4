"""The :class:`RunTracer`: the spans and metrics of one run, a hook of the run's
:class:`~agent_sync.run._hooks.HookRunner` (what it records: see :mod:`agent_sync._tracing`).

Imported only once OpenTelemetry is found (:mod:`._start`). Thread-safety: a
:class:`RunTracer` is used by its run's loop thread, but for
:meth:`RunTracer.call_context`, which a tool worker may call (the open tool spans are under
the tracer's lock).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from .._redact import redact
from ..cancel import CancelledError
from ..hooks import AfterModelCall, AfterToolCall, BeforeModelCall
from ..messages import CANCELLED_TEXT, ContentBlock, Message, MessageStopEvent, ToolUse, Usage
from . import _calls
from . import _names as n
from ._genai_messages import chat_messages, output_message, result_value, to_json
from ._metrics import Instruments
from ._providers import Answerer, answerer, request_attributes, usage_attributes, usage_counts

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["RunTracer"]

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")


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
    """The spans and metrics of one run. Every method is called from the run's loop thread
    only, but :meth:`call_context` (any thread: the open tool spans are under a lock).

    No method raises (errors are logged at DEBUG). :meth:`run_ended` ends every span still
    open and is idempotent; after it the other methods do nothing.
    """

    def __init__(
        self,
        tracer: Tracer | None,
        *,
        run_id: str,
        model: object,
        conversation_id: str | None,
        trace_content: bool,
        agent_name: str = "agent",
        params: Mapping[str, Any] | None = None,
        structured: bool = False,
        instruments: Instruments | None = None,
    ) -> None:
        """``tracer`` ``None``: metrics only (spans are the API's non-recording ones).
        ``instruments`` ``None``: spans only."""
        from opentelemetry import context, trace  # importable: the caller found it

        self.run_id = run_id
        self._trace = trace
        self._context = context
        self._tracer = tracer if tracer is not None else trace.NoOpTracer()
        self._content = trace_content
        self._metrics = instruments
        self._agent_name = agent_name
        self._model = model
        self._answerer = called = answerer(model)  # a call's, until another model answers it
        self._provider = called.provider
        model_id = getattr(model, "model_id", None)
        self._model_id = model_id if isinstance(model_id, str) and model_id else None
        common: dict[str, Any] = {n.PROVIDER_NAME: self._provider}
        if self._model_id is not None:
            common[n.REQUEST_MODEL] = self._model_id
        self._asked: dict[str, Any] = {n.OPERATION_NAME: n.CHAT, **common}
        self._metric_attributes = {**self._asked, **called.attributes}
        if conversation_id is not None:
            common[n.CONVERSATION_ID] = conversation_id
        common["agent_sync.run_id"] = run_id
        self._common = common
        self._chat_attributes: dict[str, Any] = {
            n.OPERATION_NAME: n.CHAT,
            **common,
            n.REQUEST_STREAM: True,
            n.OUTPUT_TYPE: n.OUTPUT_JSON if structured else n.OUTPUT_TEXT,
            **called.attributes,
            **request_attributes(model, params or {}),
        }
        # the span a child run hangs under: its call's, when a sub-agent's call started
        # it (_calls.call_scope); else whatever is current when the run starts
        self._caller: Context | None = _calls.caller()
        self._run: Span | None = None
        self._parent: Context | None = None
        # open chat spans by cycle: the span, its start, who answers the call
        self._chats: dict[int, tuple[Span, float, Answerer]] = {}
        self._tools: dict[str, Span] = {}  # open tool spans: under the lock (call_context)
        self._tools_lock = threading.Lock()
        self._cycle = 0
        self._last_output: tuple[Message, str | None] | None = None
        self._ended = False

    @_guarded
    def run_started(self, prompt: list[ContentBlock] | None) -> None:
        """Open the ``invoke_agent {name}`` span: a child of the sub-agent call that
        started the run, else of the caller's current span."""
        if self._ended or self._run is not None:
            return
        attributes = {
            n.OPERATION_NAME: n.INVOKE_AGENT,
            n.AGENT_NAME: self._agent_name,
            **self._common,
        }
        if self._content and prompt:
            user: Message = {"role": "user", "content": prompt}
            attributes[n.INPUT_MESSAGES] = to_json(chat_messages([user]))
        kind = self._trace.SpanKind.INTERNAL
        self._run = span = self._tracer.start_span(
            f"{n.INVOKE_AGENT} {self._agent_name}",
            context=self._caller,
            kind=kind,
            attributes=attributes,
        )
        self._parent = self._trace.set_span_in_context(span)
        _calls.opened(self.run_id, self)

    @_guarded
    def before_model_call(self, event: BeforeModelCall) -> None:
        """Open a ``chat {model_id}`` span."""
        if self._ended:
            return
        self._cycle = event.cycle
        attributes = {**self._chat_attributes, "agent_sync.cycle": event.cycle}
        if self._content:
            attributes[n.INPUT_MESSAGES] = to_json(chat_messages(event.messages))
        name = f"{n.CHAT} {self._model_id}" if self._model_id else n.CHAT
        kind = self._trace.SpanKind.CLIENT
        span = self._tracer.start_span(name, context=self._parent, kind=kind, attributes=attributes)
        self._chats[event.cycle] = (span, time.perf_counter(), self._answerer)

    @_guarded
    def model_answered(self, cycle: int, model: object) -> None:
        """The call's answer began, from ``model``: when that is not the model called (a
        chain's member), the call's span and metrics name its provider and server."""
        if model is self._model:
            return
        open_call = self._chats.get(cycle)
        if open_call is None:
            return
        span, started, _ = open_call
        answered = answerer(model)
        span.set_attributes(answered.attributes)
        self._chats[cycle] = (span, started, answered)

    @_guarded
    def after_model_call(
        self, event: AfterModelCall, response: MessageStopEvent | None = None
    ) -> None:
        """End the call's span with usage, the provider's finish reason, response id and
        model, and the error or the output; record the call's metrics.

        ``response``: the stream's ``messageStop`` (what the provider said of its
        response); without it the finish reason is agent_sync's stop reason.
        """
        open_call = self._chats.pop(event.cycle, None)
        if open_call is None:
            return
        span, _, answered = open_call
        error_type: str | None = None
        response_model: str | None = None
        try:
            # one set_attributes for all of them: the SDK takes its lock once per call
            found: dict[str, Any] = {}
            if event.usage is not None:
                found = usage_attributes(event.usage, answered.provider)
            if response is not None:
                finish = response.get("providerStopReason") or event.stop_reason
                response_id = response.get("responseId")
                if response_id:
                    found[n.RESPONSE_ID] = response_id
                response_model = response.get("responseModel")
                if response_model:
                    found[n.RESPONSE_MODEL] = response_model
            else:
                finish = event.stop_reason
            if finish is not None:
                found[n.RESPONSE_FINISH_REASONS] = [finish]
            if event.error is None and event.message is not None:
                self._last_output = (event.message, event.stop_reason)
                if self._content:
                    output = output_message(event.message, event.stop_reason)
                    found[n.OUTPUT_MESSAGES] = to_json([output])
            span.set_attributes(found)
            if event.error is not None:
                error_type = self._fail(span, event.error)
        finally:
            span.end()
            self._record_call(answered, event.duration_s, event.usage, error_type, response_model)

    def model_call_scope(self, cycle: int) -> AbstractContextManager[None]:
        """Make the call's ``chat`` span current for a block, so that spans made in it (the
        anthropic SDK makes one per API call; HTTP client instrumentation) nest under it.

        Only for a block that does not yield to the run's caller: wrap the start of the
        request (``model.stream(...)`` and the read of its first events), never a loop
        that hands events out. Never raises of its own; the block's exceptions pass through.
        """
        try:
            open_call = self._chats.get(cycle)
            if open_call is not None:
                return _Current(self, self._trace.set_span_in_context(open_call[0]))
        except Exception:
            logger.debug(
                "run_id=<%s> | tracing failed in model_call_scope", self.run_id, exc_info=True
            )
        return contextlib.nullcontext()

    @_guarded
    def tool_started(self, tool_use: ToolUse, cycle: int) -> None:
        """Open an ``execute_tool {name}`` span (unless :meth:`call_context` already did)."""
        self._open_tool(tool_use, cycle)

    def call_context(self, tool_use: ToolUse) -> Context | None:
        """The span context of a running call, its span opened now if the run's thread has
        not yet (a sub-agent call on a tool worker asks as it starts its child run); ``None``
        once the run ended. Any thread; never raises."""
        try:
            span = self._open_tool(tool_use, self._cycle)
            return self._trace.set_span_in_context(span) if span is not None else None
        except Exception:
            logger.debug("run_id=<%s> | tracing failed in call_context", self.run_id, exc_info=True)
            return None

    def _open_tool(self, tool_use: ToolUse, cycle: int) -> Span | None:
        tool_use_id = tool_use["toolUseId"]
        with self._tools_lock:
            if self._ended:
                return None
            span = self._tools.get(tool_use_id)
            if span is None:
                span = self._tools[tool_use_id] = self._tool_span(tool_use, cycle, None)
            return span

    @_guarded
    def after_tool_call(self, event: AfterToolCall) -> None:
        """End the call's span; a call that never started gets one created and ended now."""
        with self._tools_lock:
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
                span.set_attribute(n.TOOL_CALL_RESULT, to_json(result_value(result)))
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
        with self._tools_lock:
            if self._ended:
                return
            self._ended = True
            tools = list(self._tools.values())
            self._tools.clear()
        _calls.closed(self.run_id)
        chats = list(self._chats.values())
        self._chats.clear()
        now = time.perf_counter()
        for span, started, answered in chats:
            error_type: str | None = None
            try:  # one failing span must not leave the others open
                if error is not None:
                    error_type = self._fail(span, error)
                else:
                    error_type = "cancelled" if cancel_reason is not None else "abandoned"
                    self._error(span, error_type, error_type)
            finally:
                span.end()
                self._record_call(answered, now - started, None, error_type, None)
        for span in tools:
            try:
                self._error(span, "abandoned", "abandoned")
            finally:
                span.end()
        run = self._run
        if run is None:
            return
        try:
            found: dict[str, Any] = usage_attributes(usage, self._provider)
            if stop_reason is not None:
                found["agent_sync.stop_reason"] = stop_reason
            if cancel_reason is not None:
                found["agent_sync.cancel_reason"] = cancel_reason
            if error is None and self._content and self._last_output is not None:
                output = output_message(*self._last_output)
                found[n.OUTPUT_MESSAGES] = to_json([output])
            run.set_attributes(found)
            if error is not None:
                self._fail(run, error)
        finally:
            run.end()

    def _record_call(
        self,
        answered: Answerer,
        duration_s: float,
        usage: Usage | None,
        error_type: str | None,
        response_model: str | None,
    ) -> None:
        metrics = self._metrics
        if metrics is None:
            return
        attributes = self._metric_attributes
        if answered is not self._answerer:
            attributes = {**self._asked, **answered.attributes}
        if response_model:
            attributes = {**attributes, n.RESPONSE_MODEL: response_model}
        tokens = usage_counts(usage, answered.provider) if usage is not None else (None, None)
        metrics.record_call(attributes, duration_s=duration_s, tokens=tokens, error_type=error_type)

    def _tool_span(self, tool_use: ToolUse, cycle: int, start_time: int | None) -> Span:
        name = tool_use["name"]
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: n.EXECUTE_TOOL,
            n.TOOL_NAME: name,
            n.TOOL_CALL_ID: tool_use["toolUseId"],
            n.TOOL_TYPE: "function",
            "agent_sync.run_id": self.run_id,
            "agent_sync.cycle": cycle,
        }
        if self._content:
            attributes[n.TOOL_CALL_ARGUMENTS] = to_json(tool_use.get("input"))
        return self._tracer.start_span(
            f"{n.EXECUTE_TOOL} {name}",
            context=self._parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_time,
        )

    def _error(self, span: Span, error_type: str, description: str) -> None:
        span.set_attribute(n.ERROR_TYPE, error_type)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))

    def _fail(self, span: Span, exc: BaseException) -> str:
        """Mark ``span`` failed by ``exc``; return its ``error.type``."""
        if isinstance(exc, CancelledError):
            self._error(span, "cancelled", "cancelled")
            return "cancelled"
        name = type(exc).__qualname__
        message = redact(_safe_str(exc))
        self._error(span, name, message or name)
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False)
        span.add_event(
            "exception",
            {
                n.EXCEPTION_TYPE: f"{type(exc).__module__}.{name}",
                n.EXCEPTION_MESSAGE: message,
                n.EXCEPTION_STACKTRACE: redact("".join(lines)),
            },
        )
        return name


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


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__ must not hide the failure
        return f"<{type(exc).__name__} that could not be shown>"
