"""A lone sub-agent call run by the invoking thread itself: no worker, no hand-off.

A batch whose only call is a sub-agent's (``agent.as_tool()``: a tool with
``stream_call``) drives the child run in the run's own thread and yields its events, so the
child's end is the call's end (a cancel of the tree wakes one thread, as for a single run).
It needs no worker to notice a cancel: the child's scope is linked to the run's, and the
child ends within its own tools' grace period, which must not exceed the batch's (else the
call goes to a worker, whose wait the batch's grace bounds). :class:`InlineCalls` is that
part of :class:`~agent_sync.tools._batch.ToolBatch`; the batch holds the state.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from ..cancel import CancelledError, CancelScope
from ..events import AgentEvent, ToolEnd, ToolStart
from ..messages import CANCELLED_TEXT, ToolResult
from ._results import error_result, result_from_value
from .context import ToolContext

if TYPE_CHECKING:
    from ._batch import SubRunPaused, ToolCall
    from .decorator import Tool

__all__ = ["InlineCalls"]

logger = logging.getLogger("agent_sync.tools.executor")

StreamCall = Callable[[dict[str, Any], ToolContext[Any]], Generator[AgentEvent, None, Any]]


class InlineCalls:
    """Running a lone sub-agent call in the invoking thread (mixed into ``ToolBatch``)."""

    _calls: list[ToolCall]
    _scope: CancelScope
    _grace: float
    _run_id: str
    paused: dict[int, SubRunPaused]
    _inline: Generator[AgentEvent, None, None] | None

    if TYPE_CHECKING:

        def _prepare(
            self, call: ToolCall, index: int
        ) -> ToolResult | tuple[Tool[Any], dict[str, Any], ToolContext[Any]]: ...

        def _failed(self, call: ToolCall, exc: BaseException) -> ToolResult: ...

        def _record(
            self, index: int, outcome: tuple[ToolResult, float]
        ) -> tuple[ToolResult, float]: ...

    def _inline_call(self) -> Generator[AgentEvent, None, None] | None:
        """The run of a lone sub-agent call by the invoking thread, or ``None``: several
        calls, another tool, a call that will not run (denied, bad input, finished before
        a pause), or a child allowed a longer grace than the batch's."""
        if len(self._calls) != 1:
            return None
        call = self._calls[0]
        stream_call: StreamCall | None = getattr(call.tool, "stream_call", None)
        if stream_call is None or call.result is not None:
            return None
        if not getattr(call.tool, "inline_grace", math.inf) <= self._grace:
            return None
        prepared = self._prepare(call, 0)
        if not isinstance(prepared, tuple):  # a worker answers it (denied, bad input...)
            return None
        _, arguments, context = prepared
        return self._run_inline(call, stream_call, arguments, context)

    def _run_inline(
        self,
        call: ToolCall,
        stream_call: StreamCall,
        arguments: dict[str, Any],
        context: ToolContext[Any],
    ) -> Generator[AgentEvent, None, None]:
        """Run the lone sub-agent call here: its start, the child's events, its end. A
        ``BaseException`` that is not an ``Exception`` (Ctrl-C, a closed stream) ends the
        child's run and goes on up: ``finish`` answers the call "Cancelled by user"."""
        from ._batch import SubRunPaused  # the batch's module imports this one

        tool_use = call.tool_use
        tool_use_id = tool_use["toolUseId"]
        if self._scope.cancelled:  # as a worker's checkpoint before its tool
            result, duration = error_result(tool_use_id, CANCELLED_TEXT), 0.0
        else:
            yield ToolStart(tool_use=tool_use, run_id=self._run_id)
            started = time.perf_counter()
            try:
                value = yield from stream_call(arguments, context)
                result = result_from_value(tool_use_id, value)
            except CancelledError:
                result = error_result(tool_use_id, CANCELLED_TEXT)
            except SubRunPaused as paused:  # no result yet: the round pauses with the child
                self.paused[0] = paused
                result = error_result(tool_use_id, "Waiting for approval.")
            except Exception as exc:  # a child error answers the call with an error result
                result = self._failed(call, exc)
            duration = time.perf_counter() - started
        self._record(0, (result, duration))
        yield ToolEnd(tool_use=tool_use, result=result, duration_s=duration, run_id=self._run_id)

    def _close_inline(self) -> None:
        """End the inline call if it was cut short (its child run is closed: cancelled)."""
        assert self._inline is not None
        try:
            self._inline.close()
        except Exception:  # a cancel path: the call is answered "Cancelled by user" anyway
            logger.warning("closing a sub-agent's call failed", exc_info=True)
