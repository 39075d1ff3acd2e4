"""Whether a run is traced, and its :class:`~._tracer.RunTracer` when it is.

Nothing of OpenTelemetry is imported here: :func:`tracing_hooks` asks :mod:`._otel` for a
tracer and a meter (each ``None`` unless a real provider is configured) and imports the
tracer's module only when one of them exists.

Thread-safety: both functions may be called from any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._otel import current_meter, current_tracer

if TYPE_CHECKING:
    from ._tracer import RunTracer

__all__ = ["run_tracer", "tracing_hooks"]

logger = logging.getLogger("agent_sync._tracing._tracer")  # one logger for the tracer's logs

_NO_PARAMS: Mapping[str, Any] = {}


def tracing_hooks(
    *,
    run_id: str,
    model: object,
    conversation_id: str | None,
    trace_content: bool,
    agent_name: str = "agent",
    params: Mapping[str, Any] = _NO_PARAMS,
    structured: bool = False,
) -> tuple[RunTracer, ...]:
    """The tracing hooks of one run: its :class:`RunTracer`, or none (zero cost) when
    neither spans nor metrics would be recorded.

    Off: ``opentelemetry`` is not importable, or the global tracer and meter providers are
    the API's defaults (no SDK provider set; checked on every call), or they hand out
    no-op tracers and meters.

    Args:
        run_id: The run's id (``agent_sync.run_id`` on every span).
        model: The run's model (provider name, ``model_id``, ``endpoint``, ``params``).
        conversation_id: ``gen_ai.conversation.id``, when not ``None``.
        trace_content: Record prompts, completions, tool arguments and results.
        agent_name: ``gen_ai.agent.name`` (the run's span is ``invoke_agent {name}``).
        params: The run's request parameters (over the model's own).
        structured: The run asks for a typed output (``gen_ai.output.type`` ``json``).

    Returns:
        ``(tracer,)`` for the run's loop thread, or ``()``. Never raises.
    """
    try:
        tracer = current_tracer()
        meter = current_meter()
        if tracer is None and meter is None:
            return ()
        from ._metrics import instruments
        from ._tracer import RunTracer

        return (
            RunTracer(
                tracer,
                run_id=run_id,
                model=model,
                conversation_id=conversation_id,
                trace_content=trace_content,
                agent_name=agent_name,
                params=params,
                structured=structured,
                instruments=instruments(meter) if meter is not None else None,
            ),
        )
    except Exception:
        logger.debug("run_id=<%s> | tracing setup failed; run not traced", run_id, exc_info=True)
        return ()


def run_tracer(
    *,
    run_id: str,
    model: object,
    conversation_id: str | None,
    trace_content: bool,
    **options: Any,
) -> RunTracer | None:
    """The run's :class:`RunTracer` (arguments as for :func:`tracing_hooks`), or ``None``
    when tracing is off. Never raises."""
    hooks = tracing_hooks(
        run_id=run_id,
        model=model,
        conversation_id=conversation_id,
        trace_content=trace_content,
        **options,
    )
    return hooks[0] if hooks else None
