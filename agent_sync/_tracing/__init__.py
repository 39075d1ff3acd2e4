"""OpenTelemetry tracing of runs (the ``otel`` extra), per the GenAI semantic conventions.

* **Zero cost when off.** ``opentelemetry`` is never imported at module level: each run
  asks :func:`tracing_hooks` once for its hooks, which imports the API on first use (the
  outcome is cached) and gives none unless a real tracer provider is configured, checked
  on every call since an application may configure one after importing us. A run's
  :class:`RunTracer` is one more hook of its hook runner, called before the user's.
* **Spans**: ``invoke_agent {name}`` (kind INTERNAL: the agent runs in this process) per
  run, a child of the ``execute_tool`` span of the sub-agent call that started it
  (:mod:`._calls`), else of whatever span is current when the run starts; children
  ``chat {model_id}`` (CLIENT; one per model call, retries included) and
  ``execute_tool {name}`` (INTERNAL). Children are parented explicitly. A span is made
  *current* only inside :meth:`RunTracer.model_call_scope` (the start of a request, so a
  provider SDK's own span nests under ``chat``): a run is a generator that hands control
  back to its caller between events, and a context attached across a ``yield`` would leak
  into the caller.
* **Metrics** (:mod:`._metrics`, from the global meter provider or
  :func:`use_meter_provider`'s): ``gen_ai.client.token.usage`` and
  ``gen_ai.client.operation.duration`` per model call.
* **Names** come from ``opentelemetry-semantic-conventions`` (:mod:`._names`), never our
  own strings; a release without one of them turns tracing off.
* **Attributes**: ``gen_ai.operation.name``, ``gen_ai.provider.name`` (:func:`provider_name`),
  ``gen_ai.request.model`` (the model's ``model_id``), ``gen_ai.conversation.id``,
  ``gen_ai.agent.name`` (the run's span); on ``chat`` spans ``gen_ai.request.stream``,
  ``gen_ai.output.type`` (``json`` with an output type, else ``text``),
  ``server.address``/``server.port`` (the model's ``endpoint``), the request parameters
  (``max_tokens``, ``temperature``, ``top_p``), ``gen_ai.response.id``/``model``;
  ``gen_ai.usage.input_tokens``/``output_tokens`` and, when reported,
  ``gen_ai.usage.cache_read.input_tokens``/``cache_creation.input_tokens``
  (``input_tokens`` includes cached tokens as the conventions ask: for Anthropic and
  Bedrock, whose ``inputTokens`` omit them, it is the sum), ``gen_ai.response.finish_reasons``
  (in the provider's own spelling, ``messageStop.providerStopReason``: OpenAI ``stop``,
  Gemini ``STOP``...; else agent_sync's stop reason),
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

The parts: :mod:`._otel` loads the API and picks the tracer and meter, :mod:`._start`
decides whether a run is traced, :mod:`._names` the conventions' names,
:mod:`._providers` what differs per model provider, :mod:`._genai_messages` renders
content, :mod:`._tracer` makes the spans, :mod:`._metrics` the histograms,
:mod:`._calls` hands a tool call's span to the sub-agent run it starts.

Thread-safety: a :class:`RunTracer` is used by its run's loop thread, but for the tool
spans a sub-agent call asks for from its worker (under the tracer's lock).
:func:`run_tracer`, :func:`tracing_hooks`, :func:`call_scope`, :func:`use_provider` and
:func:`use_meter_provider` may be called from any thread: the module caches are single
assignments of immutable values, and a race only repeats a lookup.
"""

from __future__ import annotations

from typing import Any

from ._calls import call_scope
from ._otel import use_meter_provider, use_provider
from ._start import run_tracer, tracing_hooks

__all__ = [
    "RunTracer",
    "call_scope",
    "provider_name",
    "run_tracer",
    "tracing_hooks",
    "use_meter_provider",
    "use_provider",
]


def __getattr__(name: str) -> Any:
    # these modules import the semantic conventions: only when asked for (tests, tools)
    if name == "RunTracer":
        from ._tracer import RunTracer

        return RunTracer
    if name == "provider_name":
        from ._providers import provider_name

        return provider_name
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
