"""Loading OpenTelemetry (the optional ``otel`` extra) and choosing the tracer and the meter
runs use.

``opentelemetry`` is never imported at module level: :func:`current_tracer` and
:func:`current_meter` import the API on first use (the outcome is cached) and answer
``None`` unless a real provider is configured, which they check on every call since an
application may configure one after importing agent_sync. The GenAI semantic conventions'
names come from ``opentelemetry-semantic-conventions`` (a dependency of the SDK and of the
extra), imported once a real provider is found: without it, or with a version that lacks a
name the spans use, tracing is off (logged once at WARNING), never half on.

Thread-safety: every function may be called from any thread. The module caches are single
assignments of immutable values, and a race only repeats a lookup.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .._version import __version__

if TYPE_CHECKING:
    from types import ModuleType

    from opentelemetry.metrics import Meter, MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["current_meter", "current_tracer", "use_meter_provider", "use_provider"]

logger = logging.getLogger(__name__)

_NOT_LOADED: Any = object()
_apis: tuple[ModuleType, ModuleType] | None = _NOT_LOADED
"""``(opentelemetry.trace, opentelemetry.metrics)``; ``None`` if not importable."""
_cache: tuple[object, Tracer | None] | None = None
"""The last tracer provider seen and its tracer (``None``: a no-op provider)."""
_meter_cache: tuple[object, Meter | None] | None = None
_override: TracerProvider | None = None
_meter_override: MeterProvider | None = None


def use_provider(provider: TracerProvider | None) -> None:
    """Trace runs into ``provider`` instead of the global tracer provider.

    For tests (the global provider can be set only once per process) and for an
    application that keeps agent_sync's spans apart; ``None`` goes back to the global
    provider. Thread-safe; runs already started keep their tracer.
    """
    global _override, _cache
    _override = provider
    _cache = None


def use_meter_provider(provider: MeterProvider | None) -> None:
    """Record the metrics of runs into ``provider`` instead of the global meter provider
    (as :func:`use_provider` does for spans); ``None`` goes back to the global one."""
    global _meter_override, _meter_cache
    _meter_override = provider
    _meter_cache = None


def current_tracer() -> Tracer | None:
    """The current provider's tracer, or ``None`` when nothing would record spans.

    ``None``: ``opentelemetry`` (or its semantic conventions) is not importable, or the
    provider is the API's default (no SDK provider set), or it hands out no-op tracers
    (e.g. ``OTEL_SDK_DISABLED``).
    """
    global _cache
    apis = _load()
    if apis is None:
        return None
    api = apis[0]
    provider = _override if _override is not None else api.get_tracer_provider()
    cached = _cache
    if cached is not None and cached[0] is provider:
        return cached[1]
    tracer: Tracer | None = None
    if not isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
        tracer = provider.get_tracer("agent_sync", __version__)
        if isinstance(tracer, (api.NoOpTracer, api.ProxyTracer)):  # e.g. OTEL_SDK_DISABLED
            tracer = None
    if tracer is not None and not _conventions_loaded():
        tracer = None
    _cache = (provider, tracer)
    return tracer


def current_meter() -> Meter | None:
    """The current meter provider's meter, or ``None`` when nothing would record metrics
    (as :func:`current_tracer`)."""
    global _meter_cache
    apis = _load()
    if apis is None:
        return None
    api = apis[1]
    provider = _meter_override if _meter_override is not None else api.get_meter_provider()
    cached = _meter_cache
    if cached is not None and cached[0] is provider:
        return cached[1]
    meter: Meter | None = None
    if not isinstance(provider, api.NoOpMeterProvider) and type(provider).__name__ != (
        "_ProxyMeterProvider"  # the API's default before an SDK provider is set
    ):
        meter = provider.get_meter("agent_sync", __version__)
        if isinstance(meter, api.NoOpMeter) or type(meter).__name__ == "_ProxyMeter":
            meter = None
    if meter is not None and not _conventions_loaded():
        meter = None
    _meter_cache = (provider, meter)
    return meter


def _load() -> tuple[ModuleType, ModuleType] | None:
    global _apis
    if _apis is _NOT_LOADED:
        try:
            from opentelemetry import metrics, trace
        except ImportError:
            _apis = None
        else:
            _apis = (trace, metrics)
    return _apis


_names_loaded: bool | None = None


def _conventions_loaded() -> bool:
    """Whether the conventions' names import (asked once a real provider is found)."""
    global _names_loaded
    if _names_loaded is None:
        try:
            from . import _names  # noqa: F401  (every name the spans and metrics use)
        except (ImportError, AttributeError):
            logger.warning(
                "tracing is off: the installed opentelemetry-semantic-conventions lacks the "
                "GenAI names agent_sync uses (pip install -U 'agent_sync[otel]')",
                exc_info=True,
            )
            _names_loaded = False
        else:
            _names_loaded = True
    return _names_loaded
