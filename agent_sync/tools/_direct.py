"""A tool's direct path: a call started from the run's own thread, without a worker, and
answered through a callback from whichever thread has the answer (:class:`DirectTool`;
MCP server tools have one: their call is a task on the connection's event loop).

:class:`DirectCalls` is the part of :class:`~agent_sync.tools._batch.ToolBatch` that runs
such calls; the batch holds the state. A direct call keeps the batch's rules: its start
and end events come through the batch's queue in the same order as a worker's, its answer
is reported once (the first one; the call is tracked in ``_direct`` under the batch's
lock, as a worker's call is in ``_running``), and an answer that comes after the batch
gave up on the call (abandoned after cancel's grace period) is logged and discarded. A
direct call holds no thread, so abandoning it takes no slot of the abandoned-thread cap.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..cancel import CancelledError, CancelScope
from ..messages import CANCELLED_TEXT, ToolResult
from ._results import error_result, result_from_value
from .context import ToolContext

if TYPE_CHECKING:
    from ._batch import ToolCall
    from .decorator import Tool

__all__ = ["DirectCalls", "DirectTool"]

logger = logging.getLogger("agent_sync.tools.executor")


class DirectTool(Protocol):
    """A tool that can run a call without a worker thread (an MCP server's tool: its call
    is a task on the connection's own event loop).

    When every call of a batch gets a thread of its own anyway (no more calls than
    workers), the batch starts such a call in the run's thread instead: it checks and
    parses the input as for any tool, then calls :meth:`start_direct`, which must return
    at once; the answer arrives through ``done``. That saves the two thread hand-offs of a
    worker (run -> worker -> tool's thread -> worker -> run becomes run -> tool's thread
    -> run).
    """

    def direct_ready(self) -> bool:
        """Whether :meth:`start_direct` can start a call now without blocking (else the
        call goes to a worker and ``call_with`` as usual)."""

    def start_direct(
        self,
        arguments: dict[str, Any],
        context: ToolContext[Any],
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        """Start the call and return without blocking. ``done(value, None)`` or
        ``done(None, error)``, from any thread, gives what ``call_with`` would return or
        raise; a cancel of ``context``'s scope must answer promptly (with
        :class:`~agent_sync.cancel.CancelledError`). The batch takes the first answer
        only."""


class DirectCalls:
    """Starting and answering :class:`DirectTool` calls (mixed into ``ToolBatch``)."""

    _calls: list[ToolCall]
    _scope: CancelScope
    _queue: queue.SimpleQueue[Any]
    _lock: threading.Lock
    _not_started: deque[int]
    _workers: list[threading.Thread]
    _abandoned: bool
    _direct: set[int]  # calls started directly, not answered yet (under _lock)

    if TYPE_CHECKING:

        def _prepare(
            self, call: ToolCall, index: int
        ) -> ToolResult | tuple[Tool[Any], dict[str, Any], ToolContext[Any]]: ...

        def _failed(self, call: ToolCall, exc: BaseException) -> ToolResult: ...

    def _take_direct(self) -> list[int]:
        """The calls to start in this thread: those of tools that offer it, when every call
        would get a worker of its own anyway (so concurrency and order are unchanged)."""
        if len(self._calls) > len(self._workers):
            return []
        taken: list[int] = []
        for index, call in enumerate(self._calls):
            ready = getattr(call.tool, "direct_ready", None)
            if (
                ready is not None
                and call.result is None
                and call.resume is None
                and call.denied is None
                and call.invalid_input is None
                and ready()
            ):
                taken.append(index)
        if taken:
            with self._lock:
                for index in taken:
                    self._not_started.remove(index)
        return taken

    def _start_direct(self, index: int) -> None:
        """Start call ``index`` in this (the run's) thread; its answer comes to
        :meth:`_direct_done` from whichever thread gives it, and is reported once."""
        call = self._calls[index]
        if self._scope.cancelled:  # as a worker's checkpoint: no start, answered cancelled
            self._queue.put(
                ("end", index, (error_result(call.tool_use["toolUseId"], CANCELLED_TEXT), 0.0))
            )
            return
        self._queue.put(("start", index, None))
        started = time.perf_counter()
        prepared = self._prepare(call, index)
        if not isinstance(prepared, tuple):
            self._queue.put(("end", index, (prepared, time.perf_counter() - started)))
            return
        tool, arguments, context = prepared
        with self._lock:
            self._direct.add(index)
        done = functools.partial(self._direct_done, index, started)
        try:
            cast(DirectTool, tool).start_direct(arguments, context, done)
        except Exception as exc:  # noqa: BLE001 - the tool's failure, as from a worker
            done(None, exc)
        except BaseException:  # Ctrl-C: answered as cancelled (finish() cancels the run)
            done(None, CancelledError("interrupted"))
            raise

    def _direct_done(
        self, index: int, started: float, value: Any, error: BaseException | None
    ) -> None:
        """The answer of a direct call (any thread): to the batch once, or (the batch gave
        up on it: abandoned) to the log."""
        duration = time.perf_counter() - started
        with self._lock:
            if index not in self._direct:
                return  # answered already
            self._direct.discard(index)
            late = self._abandoned
        call = self._calls[index]
        if late:
            logger.warning(
                "tool=<%s>, duration_s=<%.2f> | discarding late result of an abandoned tool",
                call.tool_use["name"],
                duration,
            )
            return
        result: ToolResult | None = None
        try:
            if error is None:
                result = result_from_value(call.tool_use["toolUseId"], value)
            else:
                result = self._failed(call, error)
        finally:
            if result is None:  # only if even building the result failed
                result = error_result(call.tool_use["toolUseId"], "The tool's call failed.")
            self._queue.put(("end", index, (result, duration)))
