"""Running one assistant message's tool calls: threads, order, cancel, grace, abandonment.

Every call runs in a named daemon worker thread, even in ``"sequential"`` mode, so that the
invoking thread is always free to notice a cancel: it waits on a queue that the workers
feed and that an abort callback wakes. ``"concurrent"`` uses up to ``max_workers`` workers;
``"sequential"`` uses one, which checks for cancel between tools. Results are reported in
call order whatever order the tools finish in.

On cancel, calls not started yet are answered "Cancelled by user" at once; running calls
get ``grace_period`` seconds to return (a cooperative tool returns sooner), then are
abandoned: they are answered "Cancelled by user", and when one finally returns its late
result is logged and discarded, never written into the history. Workers are daemon threads
so an abandoned tool that never returns cannot keep the interpreter alive.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._history import error_result, result_from_value
from ..cancel import CancelledError, CancelScope
from ..events import ToolEnd, ToolStart
from ..messages import CANCELLED_TEXT, ToolResult, ToolUse
from .context import ToolContext
from .decorator import Tool

__all__ = ["ToolBatch", "ToolCall", "ExecutorKind"]

logger = logging.getLogger(__name__)

ExecutorKind = Literal["concurrent", "sequential"]
_WAKE = object()


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One call to run: the model's request, the tool it names, and input problems.

    Attributes:
        tool_use: The model's ``toolUse`` block.
        tool: The tool, or ``None`` if the model named an unknown tool.
        invalid_input: Why the streamed input could not be parsed, if it could not.
    """

    tool_use: ToolUse
    tool: Tool[Any] | None
    invalid_input: str | None = None


class ToolBatch:
    """Runs a batch of tool calls. Use :meth:`run` (yields events), then always :meth:`finish`."""

    def __init__(
        self,
        calls: Sequence[ToolCall],
        *,
        scope: CancelScope,
        agent: Any,
        available: Sequence[str],
        max_workers: int,
        grace_period: float,
    ) -> None:
        self._calls = list(calls)
        self._scope = scope
        self._agent = agent
        self._available = ", ".join(available) or "none"
        self._grace = grace_period
        self._results: list[ToolResult | None] = [None] * len(self._calls)
        self._outstanding = len(self._calls)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._not_started = deque(range(len(self._calls)))
        self._abandoned = False
        self._grace_deadline: float | None = None
        self._workers = [
            threading.Thread(target=self._work, name=f"agent_sync-tool-{n}", daemon=True)
            for n in range(min(max_workers, len(self._calls)))
        ]
        self._unregister = scope.register_abort(lambda: self._queue.put(_WAKE))
        for worker in self._workers:
            worker.start()

    def run(self) -> Iterator[ToolStart | ToolEnd]:
        """Yield start/end events as tools run, until every call has a result or cancel's
        grace period is over."""
        yield from self._drain()

    def finish(self) -> list[ToolResult]:
        """Results in call order; unfinished calls are cancelled (after the grace period).

        Safe to call at any point, from ``finally``: if the batch was interrupted without a
        cancel (Ctrl-C, a closed generator), it cancels the invocation's scope first.
        """
        if self._outstanding and not self._scope.cancelled:
            self._scope.cancel("interrupted")
        for _ in self._drain():
            pass
        self._unregister()
        with self._lock:
            self._abandoned = True
            self._not_started.clear()
        results: list[ToolResult] = []
        for call, result in zip(self._calls, self._results, strict=True):
            if result is None:
                logger.debug("tool=<%s> | abandoned after the grace period", call.tool_use["name"])
                result = error_result(call.tool_use["toolUseId"], CANCELLED_TEXT)
            results.append(result)
        return results

    def _drain(self) -> Iterator[ToolStart | ToolEnd]:
        while self._outstanding:
            if self._grace_deadline is None and self._scope.cancelled:
                self._grace_deadline = time.monotonic() + self._grace
            timeout = None
            if self._grace_deadline is not None:
                timeout = max(0.0, self._grace_deadline - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                return  # grace period over: the rest is abandoned
            if item is _WAKE:
                continue
            kind, index, payload = item
            tool_use = self._calls[index].tool_use
            if kind == "start":
                yield ToolStart(tool_use=tool_use)
            else:
                result, duration = payload
                self._results[index] = result
                self._outstanding -= 1
                yield ToolEnd(tool_use=tool_use, result=result, duration_s=duration)

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._not_started:
                    return
                index = self._not_started.popleft()
            call = self._calls[index]
            tool_use_id = call.tool_use["toolUseId"]
            if self._scope.cancelled:  # checkpoint between sequential tools
                self._queue.put(("end", index, (error_result(tool_use_id, CANCELLED_TEXT), 0.0)))
                continue
            self._queue.put(("start", index, None))
            started = time.perf_counter()
            result = self._execute(call)
            duration = time.perf_counter() - started
            with self._lock:
                late = self._abandoned
            if late:
                logger.warning(
                    "tool=<%s>, duration_s=<%.2f> | discarding late result of an abandoned tool",
                    call.tool_use["name"],
                    duration,
                )
                continue
            self._queue.put(("end", index, (result, duration)))

    def _execute(self, call: ToolCall) -> ToolResult:
        tool_use = call.tool_use
        tool_use_id, name = tool_use["toolUseId"], tool_use["name"]
        if call.invalid_input is not None:
            return error_result(
                tool_use_id,
                f"Invalid input for tool {name!r}: {call.invalid_input}. "
                "Send the arguments as one JSON object.",
            )
        if call.tool is None:
            return error_result(
                tool_use_id, f"Unknown tool {name!r}. Available tools: {self._available}."
            )
        problems = call.tool.validate_input(tool_use["input"])
        if problems:
            return error_result(
                tool_use_id, f"Invalid input for tool {name!r}: " + "; ".join(problems)
            )
        context = ToolContext(tool_use=tool_use, agent=self._agent, _scope=self._scope)
        try:
            value = call.tool.run(tool_use["input"], context)
        except CancelledError:
            return error_result(tool_use_id, CANCELLED_TEXT)
        except BaseException as exc:  # the worker must always report, whatever the tool raised
            if self._scope.cancelled:
                return error_result(tool_use_id, CANCELLED_TEXT)
            logger.debug("tool=<%s> | tool raised %s", name, type(exc).__name__, exc_info=True)
            return error_result(tool_use_id, f"Tool {name!r} failed: {type(exc).__name__}: {exc}")
        return result_from_value(tool_use_id, value)
