"""The :class:`RunTracer`: the spans of one run, a hook of the run's
:class:`~agent_sync.run._hooks.HookRunner` (what it records: see :mod:`agent_sync._tracing`).

Thread-safety: a :class:`RunTracer` is used by its run's loop thread only (no lock).
:func:`run_tracer` and :func:`tracing_hooks` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from .._redact import redact
from ..cancel import CancelledError
from ..hooks import AfterModelCall, AfterToolCall, BeforeModelCall
from ..messages import CANCELLED_TEXT, ContentBlock, Message, ToolUse, Usage
from ._genai_messages import chat_messages, output_message, result_value, to_json
from ._otel import current_tracer
from ._providers import provider_name, usage_attributes

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["RunTracer", "run_tracer", "tracing_hooks"]

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")


def tracing_hooks(
    *, run_id: str, model: object, conversation_id: str | None, trace_content: bool
) -> tuple[RunTracer, ...]:
    """The tracing hooks of one run: its :class:`RunTracer`, or none (zero cost) when
    tracing is off.

    Off: ``opentelemetry`` is not importable, or the global tracer provider is the API's
    default (no SDK provider set; checked on every call), or it hands out no-op tracers.

    Args:
        run_id: The run's id (``agent_sync.run_id`` on every span).
        model: The run's model (provider name, ``model_id``).
        conversation_id: ``gen_ai.conversation.id``, when not ``None``.
        trace_content: Record prompts, completions, tool arguments and results.

    Returns:
        ``(tracer,)`` for the run's loop thread, or ``()``. Never raises.
    """
    try:
        tracer = current_tracer()
        if tracer is None:
            return ()
        return (
            RunTracer(
                tracer,
                run_id=run_id,
                model=model,
                conversation_id=conversation_id,
                trace_content=trace_content,
            ),
        )
    except Exception:
        logger.debug("run_id=<%s> | tracing setup failed; run not traced", run_id, exc_info=True)
        return ()


def run_tracer(
    *, run_id: str, model: object, conversation_id: str | None, trace_content: bool
) -> RunTracer | None:
    """The run's :class:`RunTracer` (arguments as for :func:`tracing_hooks`), or ``None``
    when tracing is off. Never raises."""
    hooks = tracing_hooks(
        run_id=run_id, model=model, conversation_id=conversation_id, trace_content=trace_content
    )
    return hooks[0] if hooks else None


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
            attributes["gen_ai.input.messages"] = to_json(chat_messages([user]))
        kind = self._trace.SpanKind.INTERNAL
        self._run = span = self._tracer.start_span("invoke_agent", kind=kind, attributes=attributes)
        self._parent = self._trace.set_span_in_context(span)

    @_guarded
    def before_model_call(self, event: BeforeModelCall) -> None:
        """Open a ``chat {model_id}`` span."""
        if self._ended:
            return
        attributes = {
            "gen_ai.operation.name": "chat",
            **self._common,
            "agent_sync.cycle": event.cycle,
        }
        if self._content:
            attributes["gen_ai.input.messages"] = to_json(chat_messages(event.messages))
        name = f"chat {self._model_id}" if self._model_id else "chat"
        kind = self._trace.SpanKind.CLIENT
        self._chats[event.cycle] = self._tracer.start_span(
            name, context=self._parent, kind=kind, attributes=attributes
        )

    @_guarded
    def after_model_call(self, event: AfterModelCall) -> None:
        """End the call's span with usage, finish reason, and the error or the output."""
        span = self._chats.pop(event.cycle, None)
        if span is None:
            return
        try:
            if event.usage is not None:
                span.set_attributes(usage_attributes(event.usage, self._provider))
            if event.stop_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [event.stop_reason])
            if event.error is not None:
                self._fail(span, event.error)
            elif event.message is not None:
                self._last_output = (event.message, event.stop_reason)
                if self._content:
                    output = output_message(event.message, event.stop_reason)
                    span.set_attribute("gen_ai.output.messages", to_json([output]))
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
    def after_tool_call(self, event: AfterToolCall) -> None:
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
                span.set_attribute("gen_ai.tool.call.result", to_json(result_value(result)))
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
            run.set_attributes(usage_attributes(usage, self._provider))
            if stop_reason is not None:
                run.set_attribute("agent_sync.stop_reason", stop_reason)
            if cancel_reason is not None:
                run.set_attribute("agent_sync.cancel_reason", cancel_reason)
            if error is not None:
                self._fail(run, error)
            elif self._content and self._last_output is not None:
                output = output_message(*self._last_output)
                run.set_attribute("gen_ai.output.messages", to_json([output]))
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
            attributes["gen_ai.tool.call.arguments"] = to_json(tool_use.get("input"))
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


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__ must not hide the failure
        return f"<{type(exc).__name__} that could not be shown>"
