"""Loading OpenTelemetry (the optional ``otel`` extra) and choosing the tracer runs use.

``opentelemetry`` is never imported at module level: :func:`current_tracer` imports the API
on first use (the outcome is cached) and answers ``None`` unless a real tracer provider is
configured, which it checks on every call since an application may configure one after
importing agent_sync.

Thread-safety: both functions may be called from any thread. The module caches are single
assignments of immutable values, and a race only repeats a lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._version import __version__

if TYPE_CHECKING:
    from types import ModuleType

    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["current_tracer", "use_provider"]

_NOT_LOADED: Any = object()
_api: ModuleType | None = _NOT_LOADED
"""``opentelemetry.trace``; ``None`` if it is not importable."""
_cache: tuple[object, Tracer | None] | None = None
"""The last provider seen and its tracer (``None``: a no-op provider)."""
_override: TracerProvider | None = None


def use_provider(provider: TracerProvider | None) -> None:
    """Trace runs into ``provider`` instead of the global tracer provider.

    For tests (the global provider can be set only once per process) and for an
    application that keeps agent_sync's spans apart; ``None`` goes back to the global
    provider. Thread-safe; runs already started keep their tracer.
    """
    global _override, _cache
    _override = provider
    _cache = None


def current_tracer() -> Tracer | None:
    """The current provider's tracer, or ``None`` when nothing would record spans.

    ``None``: ``opentelemetry`` is not importable, or the provider is the API's default
    (no SDK provider set), or it hands out no-op tracers (e.g. ``OTEL_SDK_DISABLED``).
    """
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
