"""The ``execute_tool`` span of a tool call, handed to the sub-agent run the call starts,
so that the child's ``invoke_agent`` span is the call's child.

A traced run's :class:`~._tracer.RunTracer` is :func:`registered <opened>` by run id while
its run is open. ``_subagent`` starts a child's run inside :func:`call_scope`, which asks
the calling run's tracer for the call's span context (:meth:`RunTracer.call_context`) and
names it the *caller* of any run started in the block; the child's tracer, made there,
parents its run span on it (:func:`caller`). This is the explicit hand-over the tree
needs: OpenTelemetry's current context lives in a thread's context variables, which a
tool worker does not inherit, and on the run's own thread it is the application's (a
request span), not the call's. Nothing is attached to OpenTelemetry's context, so nothing
leaks into the caller's code.

A tool worker starts the call before the run's loop thread hears of it (the loop thread
opens the span when it handles the call's start), so the span is made by whichever of the
two threads asks first (:meth:`RunTracer.call_context` holds the tracer's lock).

Thread-safety: the registry is a dict written by each run's loop thread (its own key) and
read by tool threads: single ``dict`` operations under the GIL. Nothing here imports
OpenTelemetry: with tracing off the registry stays empty and :func:`call_scope` sets
nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from ..messages import ToolUse

__all__ = ["CallSpans", "call_scope", "caller", "closed", "opened"]


class CallSpans(Protocol):
    """What :func:`call_scope` asks of a run's tracer."""

    def call_context(self, tool_use: ToolUse) -> Any:
        """The call's span context (the span made now if it is not yet), or ``None``."""
        ...


_RUNS: dict[str, CallSpans] = {}
"""The tracers of the runs open in this process, by run id."""

_CALLER: ContextVar[Any] = ContextVar("agent_sync_tracing_caller", default=None)


def opened(run_id: str, tracer: CallSpans) -> None:
    """Register a run's tracer while its run is open."""
    _RUNS[run_id] = tracer


def closed(run_id: str) -> None:
    """Forget a run that ended."""
    _RUNS.pop(run_id, None)


def caller() -> Any:
    """The span context of the tool call whose :func:`call_scope` this is in, or ``None``."""
    return _CALLER.get()


@contextlib.contextmanager
def call_scope(run_id: str | None, tool_use: ToolUse) -> Iterator[None]:
    """A block in which runs started are children of the call ``tool_use`` of the run
    ``run_id`` (when that run is traced). For a block that does not yield."""
    tracer = _RUNS.get(run_id or "")
    found = tracer.call_context(tool_use) if tracer is not None else None
    if found is None:
        yield
        return
    token = _CALLER.set(found)
    try:
        yield
    finally:
        _CALLER.reset(token)
