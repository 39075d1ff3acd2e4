"""What a running tool can know about its invocation, and how it cooperates with cancel.

Everything a tool reaches through its context is bound to the tool's *own* run: the
scope (``cancelled``, ``wait``, ``cancel``) is the run's, and ``context.agent`` is a view of
the agent whose ``cancel()`` cancels that run only and which refuses every other use once
the run is over. So a tool abandoned by run 1 (it ignored the cancel and outlived the grace
period) can never cancel, invoke or read into run 2 of the same agent.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._decisions import Approve
from ..cancel import CancelScope
from ..errors import UsageError
from ..messages import ToolUse

if TYPE_CHECKING:
    import threading

__all__ = ["ToolContext"]

DepsT = TypeVar("DepsT")


class _RunBoundAgent:
    """``context.agent``: the agent as seen from one run's tool.

    ``cancel(reason)`` cancels the tool's own run (``False`` once it is over, never a later
    run); ``is_running`` is whether that run is still going; ``messages`` is a copy of the
    history (a tool must not edit the history its run is writing). Other attributes and
    methods are the agent's while the run is live; once it is over they raise
    :class:`~agent_sync.errors.UsageError`. Attributes cannot be set through the view.
    """

    __slots__ = ("_agent", "_scope")
    _agent: Any
    _scope: CancelScope

    def __init__(self, agent: Any, scope: CancelScope) -> None:
        object.__setattr__(self, "_agent", agent)
        object.__setattr__(self, "_scope", scope)

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel this tool's run; ``False`` if it is over (a later run is never reached)."""
        return self._scope.cancel(reason)

    @property
    def is_running(self) -> bool:
        """Whether this tool's run is still going (not whether the agent is busy)."""
        return not self._scope.closed

    @property
    def messages(self) -> list[Any]:
        """A copy of the agent's history, while the run is live."""
        self._check("messages")
        return copy.deepcopy(self._agent.messages)

    def __getattr__(self, name: str) -> Any:
        self._check(name)
        value = getattr(self._agent, name)
        if inspect.ismethod(value) and value.__self__ is self._agent:
            return self._bound(name, value)
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check("__call__")
        return self._agent(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise UsageError(f"a tool cannot set context.agent.{name}")

    def _bound(self, name: str, method: Any) -> Any:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._check(name)  # a method fetched during the run, called after it
            return method(*args, **kwargs)

        return call

    def _check(self, name: str) -> None:
        if self._scope.closed:
            raise UsageError(
                f"context.agent.{name}: this tool's run is over (the tool was abandoned "
                "after a cancel); a late tool cannot reach a later run of the agent"
            )

    def __repr__(self) -> str:
        state = "live" if not self._scope.closed else "over"
        return f"<run-bound view of {self._agent!r} ({state})>"


@dataclass(frozen=True, kw_only=True)
class ToolContext(Generic[DepsT]):
    """Passed to a tool that declares a parameter annotated ``ToolContext`` (or
    ``ToolContext[Deps]``, typing :attr:`deps`); that parameter is hidden from the model.

    A long tool should check :attr:`cancelled` (or sleep with :meth:`wait`) so that
    ``agent.cancel()`` stops it promptly; a tool that does not is given a grace period,
    then abandoned (its late result is discarded, never written into the history).

    Example::

        @tool
        def crawl(url: str, context: ToolContext) -> str:
            for page in pages(url):
                if context.cancelled:
                    return "stopped early"
                ...

    Attributes:
        tool_use: The model's call (``toolUseId``, ``name``, ``input``).
        agent: The :class:`~agent_sync.Agent` running the tool, as a view bound to this
            run: ``context.agent.cancel()`` cancels this run only, ``messages`` is a copy,
            and once the run is over (an abandoned tool) everything but ``cancel()`` (then
            ``False``) and ``is_running`` raises ``UsageError``. Do not call its
            ``invoke`` from the tool: the agent is busy until the tool returns.
    """

    tool_use: ToolUse
    agent: Any
    _scope: CancelScope
    decision: Approve | None = None
    """For a call that waited for approval: the ``Approve`` it got (``data`` holds the
    decision's extra fields); ``None`` otherwise."""
    deps: DepsT = None  # type: ignore[assignment]
    """The run's dependencies: ``deps=`` of the call (``invoke``, ``stream``, ``steps``,
    ``resume``...), else of the ``Agent``; ``None`` if neither gave any. Whatever the
    application's tools need (a database session, an HTTP client, the current user): one
    object, passed as it is and shared by the run's tools (concurrent tools use it from
    several threads at once). Never stored: a run resumed in another process gets that
    process's ``deps``."""
    _emit: Callable[[Any], None] | None = None
    """Puts an event into the run's stream (a sub-agent's events: ``agent.as_tool()``)."""
    _resume: Any = None
    """For a sub-agent's call whose child paused for approval: what resumes the child
    (its ``subruns`` entry and the decisions for its requests)."""
    _progress: Callable[[float, float | None, str | None], None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agent, _RunBoundAgent):
            object.__setattr__(self, "agent", _RunBoundAgent(self.agent, self._scope))

    @property
    def run_id(self) -> str | None:
        """The id of the run this call belongs to (as on its events and result)."""
        return self._scope.run_id

    @property
    def cancelled(self) -> bool:
        """Whether the invocation has been cancelled (or timed out)."""
        return self._scope.cancelled

    @property
    def cancel_event(self) -> threading.Event:
        """The invocation's cancel event, to pass to anything that waits on an Event."""
        return self._scope.event

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel this tool's own run (for a tool that decides the run should stop).

        Thread-safe. A tool abandoned by its run can call it safely: the run is over, so
        this returns ``False`` and never reaches a later run of the agent.

        Returns:
            ``True`` if the run was still going and is now cancelled.
        """
        return self._scope.cancel(reason)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking at once on cancel.

        Returns:
            ``True`` if the invocation was cancelled (stop working), ``False`` on timeout.
        """
        return self._scope.wait(seconds)

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the run's stream how far this call is: a ``ToolProgress`` event (and a
        ``tool_progress`` SSE frame in the web routes). Any thread; never blocks; a report
        after the call ended is dropped.

        Args:
            progress: How far it is (e.g. items done).
            total: What ``progress`` counts to, if known.
            message: What it is doing, in a few words.

        Raises:
            UsageError: ``progress`` or ``total`` is not a finite number, or ``message`` is
                not a str.
        """
        for name, value in (("progress", progress), ("total", total)):
            if value is None and name == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"report_progress: {name} must be a number")
            if not math.isfinite(value):
                raise UsageError(f"report_progress: {name} must be finite")
        if message is not None and not isinstance(message, str):
            raise UsageError("report_progress: message must be a str or None")
        if self._progress is not None:
            self._progress(float(progress), None if total is None else float(total), message)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~agent_sync.cancel.CancelledError` if cancelled.

        The loop records the call as cancelled; nothing else needs to catch it.
        """
        self._scope.raise_if_cancelled()
