"""Running one assistant message's tool calls: threads, order, cancel, grace, abandonment.

The run's machinery behind ``Agent(tool_executor=...)`` (:data:`~agent_sync.tools.ExecutorKind`).

Every call runs in a named daemon worker thread, even in ``"sequential"`` mode, so that the
invoking thread is always free to notice a cancel: it waits on a queue that the workers
feed and that an abort callback wakes. ``"concurrent"`` uses up to ``max_workers`` workers;
``"sequential"`` uses one, which checks for cancel between tools. Results are reported in
call order whatever order the tools finish in.

One exception: a tool with a direct path (an MCP server's) starts its call from the
invoking thread without blocking and answers into the same queue, when every call would
have a worker of its own (:mod:`agent_sync.tools._direct`).

On cancel, calls not started yet are answered "Cancelled by user" at once; running calls
get ``grace_period`` seconds to return (a cooperative tool returns sooner), then are
abandoned: they are answered "Cancelled by user", and when one finally returns its late
result is logged and discarded, never written into the history. Workers are daemon threads
so an abandoned tool that never returns cannot keep the interpreter alive. Abandoned threads
count against one process-wide cap (:mod:`agent_sync.tools._abandoned`): past it, the batch
waits for its running tools instead of abandoning them.

Reporting rule: a worker reports every call it takes exactly once, whatever the tool does
(returns something that cannot be represented, raises anything, ``BaseException``
included): :meth:`ToolBatch._work` runs each call inside ``try``/``finally`` whose
``finally`` is the one report path, and result normalisation never raises. So the invoking
thread, which waits on the report queue, never waits on a worker that died.

A lone call of a sub-agent's tool (``agent.as_tool()``, a tool with ``stream_call``) is the
exception: the invoking thread drives the child run itself, yielding its events, so the
child's end is the call's end with no hand-off between threads (a cancel of the tree wakes
one thread, as for a single run). It needs no worker to notice a cancel: the child's scope
is linked to the run's, and the child ends within its own tools' grace period, which must
not exceed this batch's (else the call goes to a worker, whose wait this grace bounds).

Running calls are tracked in ``_running`` under ``_lock``; the batch decides "abandon"
under the same lock, so each call is either reported to the batch or, exactly once,
released from the abandoned count by its worker.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._decisions import Approve
from .._encodable import clean_text
from .._signal_safe import sliced
from ..cancel import CancelledError, CancelScope
from ..events import AgentEvent, ToolEnd, ToolProgress, ToolStart
from ..messages import CANCELLED_TEXT, ToolResult, ToolUse
from . import _abandoned
from ._direct import DirectCalls
from ._inline import InlineCalls
from ._results import describe_exception, error_result, result_from_value
from .context import ToolContext
from .decorator import Tool

__all__ = ["SubRunPaused", "ToolBatch", "ToolCall"]

# The logger name users filter on (docs/tools.md), from before this module was private.
logger = logging.getLogger("agent_sync.tools.executor")

_WAKE = object()


def _nothing() -> None:
    return None


class SubRunPaused(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a sub-agent's tool (``agent.as_tool()``) whose child run paused for
    approval: the call has no result yet, and the caller's round pauses with it.

    Attributes:
        run_id: The paused child run.
        conversation_id: Its conversation in the store, or ``None`` (in memory).
        approvals: The requests it waits for (its own and its descendants').
        usage: Its usage so far (counted in the caller's already: a resumed child's
            usage goes on from it).
    """

    def __init__(
        self,
        run_id: str,
        conversation_id: str | None,
        approvals: tuple[Any, ...],
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"sub-agent run {run_id} waits for approval")
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.approvals = approvals
        self.usage = dict(usage or {})


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One call to run: the model's request, the tool it names, and input problems.

    Attributes:
        tool_use: The model's ``toolUse`` block.
        tool: The tool, or ``None`` if the model named an unknown tool.
        invalid_input: Why the streamed input could not be parsed, if it could not.
        denied: Set when a hook denied the call: the reason (the call never runs).
        input: The input to run the tool with, when a hook or a decision replaced the
            model's.
        decision: The ``Approve`` a gated call got (the tool sees it as
            ``context.decision``).
    """

    tool_use: ToolUse
    tool: Tool[Any] | None
    invalid_input: str | None = None
    denied: str | None = None
    input: dict[str, Any] | None = None
    decision: Approve | None = None
    result: ToolResult | None = None
    """A call of a paused round that finished before the pause: not run again (no
    events), its result kept."""
    resume: Any = None
    """For a sub-agent's call whose child paused: what resumes it (``context._resume``)."""


class ToolBatch(DirectCalls, InlineCalls):
    """Runs a batch of tool calls. Use :meth:`run` (yields events), then always :meth:`finish`.

    Each call's input is parsed by its tool (``Tool.parse_input``: pydantic for a signature,
    the JSON-schema validator for an explicit schema) and the function gets the parsed
    arguments; every tool's context carries the run's ``deps``.
    """

    def __init__(
        self,
        calls: Sequence[ToolCall],
        *,
        scope: CancelScope,
        agent: Any,
        available: Sequence[str],
        run_id: str = "",
        max_workers: int,
        grace_period: float,
        deps: Any = None,
    ) -> None:
        self._calls = list(calls)
        self._deps = deps
        self._scope = scope
        self._agent = agent
        self._run_id = run_id
        self._available = ", ".join(available) or "none"
        self._grace = grace_period
        self.paused: dict[int, SubRunPaused] = {}  # calls whose sub-agent paused (index ->)
        self._results: list[ToolResult | None] = [None] * len(self._calls)
        self._outstanding = len(self._calls)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._not_started = deque(range(len(self._calls)))
        self._abandoned = False
        self._running: set[int] = set()  # calls a worker is executing (under _lock)
        self._direct: set[int] = set()  # calls started directly, not answered (under _lock)
        self._grace_deadline: float | None = None
        self._inline = self._inline_call()  # a lone sub-agent call: this thread runs it
        self._workers = [
            threading.Thread(target=self._work, name=f"agent_sync-tool-{n}", daemon=True)
            for n in range(0 if self._inline else min(max_workers, len(self._calls)))
        ]
        self._started = False
        self._unregister: Callable[[], None] = (
            scope.register_abort(lambda: self._queue.put(_WAKE))
            if self._inline is None  # an inline call waits on no queue: nothing to wake
            else _nothing
        )

    def run(self) -> Iterator[AgentEvent]:
        """Start the workers, then yield start/end events as tools run, until every call has
        a result or cancel's grace period is over.

        Nothing runs before the first ``next()``: the caller enters its ``try`` (whose
        ``finally`` calls :meth:`finish`) first, so a Ctrl-C landing while the workers
        start still has every started tool told and its result kept.
        """
        if self._inline is not None:
            self._started = True
            # Not ``yield from``: closing this generator (a closed stream, Ctrl-C) must not
            # close the child's run before :meth:`finish` has cancelled it with the run.
            for event in self._inline:  # noqa: UP028 - see above
                yield event
            return
        self._started = True
        direct = self._take_direct()
        for worker in self._workers[: len(self._not_started)]:
            worker.start()
        for index in direct:
            self._start_direct(index)
        yield from self._drain()

    def finish(self) -> list[ToolResult]:
        """Results in call order; unfinished calls are cancelled (after the grace period).

        Safe to call at any point, from ``finally``: if the batch was interrupted without a
        cancel (Ctrl-C, a closed generator), it cancels the invocation's scope first. Past
        the abandoned-thread cap it waits for running tools, however long they take.
        """
        try:
            if not self._started:  # run() never began: no tool ran, nothing to wait for
                with self._lock:
                    self._not_started.clear()
            else:
                if self._outstanding and not self._scope.cancelled:
                    self._scope.cancel("interrupted")
                if self._inline is not None:
                    self._close_inline()
                else:
                    for _ in self._drain():
                        pass
                    self._abandon_or_wait()
        finally:
            self._unregister()
        results: list[ToolResult] = []
        for call, result in zip(self._calls, self._results, strict=True):
            if result is None:
                logger.debug("tool=<%s> | abandoned after the grace period", call.tool_use["name"])
                result = error_result(call.tool_use["toolUseId"], CANCELLED_TEXT)
            results.append(result)
        return results

    def _abandon_or_wait(self) -> None:
        """Abandon the running tools if the process-wide cap allows, else wait for them."""
        while self._outstanding:
            with self._lock:
                if _abandoned.reserve(len(self._running)):
                    self._abandoned = True
                    self._not_started.clear()
                    break
            for _ in self._drain(grace=False):  # past the cap: no grace period
                pass
        # Reports that arrived between the end of the grace period and the decision.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _WAKE and item[0] == "end":
                self._record(item[1], item[2])

    def _drain(self, *, grace: bool = True) -> Iterator[AgentEvent]:
        while self._outstanding:
            if grace and self._grace_deadline is None and self._scope.cancelled:
                self._grace_deadline = time.monotonic() + self._grace
            left = None
            if grace and self._grace_deadline is not None:
                left = self._grace_deadline - time.monotonic()
                if left <= 0:
                    return  # grace period over: the rest is abandoned (or waited for)
            try:
                item = self._queue.get(timeout=sliced(left))
            except queue.Empty:
                continue  # a main-thread slice ended (a pending Ctrl-C ran) or time is up
            if item is _WAKE:
                continue
            kind, index, payload = item
            if kind == "event":  # a tool's own event (a sub-agent's), between start and end
                yield payload
                continue
            if kind == "progress":
                if self._results[index] is None:  # a late report of a call over is dropped
                    progress, total, message = payload
                    yield ToolProgress(
                        tool_use_id=self._calls[index].tool_use["toolUseId"],
                        progress=progress,
                        total=total,
                        message=message,
                        run_id=self._run_id,
                    )
                continue
            tool_use = self._calls[index].tool_use
            if self._calls[index].result is not None:  # finished before a pause: no events
                self._record(index, payload)
                continue
            if kind == "start":
                yield ToolStart(tool_use=tool_use, run_id=self._run_id)
            else:
                result, duration = self._record(index, payload)
                yield ToolEnd(
                    tool_use=tool_use, result=result, duration_s=duration, run_id=self._run_id
                )

    def _report_progress(
        self, index: int, progress: float, total: float | None, message: str | None
    ) -> None:
        """``context.report_progress`` of call ``index`` (any thread): to the event stream."""
        shown = None if message is None else clean_text(message)[:1000]
        self._queue.put(("progress", index, (progress, total, shown)))

    def _record(self, index: int, payload: tuple[ToolResult, float]) -> tuple[ToolResult, float]:
        if self._results[index] is None:
            self._results[index] = payload[0]
            self._outstanding -= 1
        return payload

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._not_started:
                    return
                index = self._not_started.popleft()
                self._running.add(index)
            outcome: tuple[ToolResult, float] | None = None
            try:
                outcome = self._call(index)
            except BaseException as exc:  # noqa: BLE001 - reported below, never re-raised
                name = self._calls[index].tool_use["name"]
                text = f"Tool {name!r} failed: {describe_exception(exc)}"
                outcome = (error_result(self._calls[index].tool_use["toolUseId"], text), 0.0)
            finally:
                self._report(index, outcome)

    def _call(self, index: int) -> tuple[ToolResult, float]:
        call = self._calls[index]
        if call.result is not None:
            return call.result, 0.0
        if self._scope.cancelled:  # checkpoint between sequential tools
            return error_result(call.tool_use["toolUseId"], CANCELLED_TEXT), 0.0
        self._queue.put(("start", index, None))
        started = time.perf_counter()
        try:
            result = self._execute(call, index)
        except SubRunPaused as paused:  # no result yet: the round pauses with the child
            with self._lock:
                self.paused[index] = paused
            result = error_result(call.tool_use["toolUseId"], "Waiting for approval.")
        return result, time.perf_counter() - started

    def _report(self, index: int, outcome: tuple[ToolResult, float] | None) -> None:
        """The one report path of a call: to the batch, or (abandoned) to the log."""
        tool_use = self._calls[index].tool_use
        if outcome is None:  # only if even building the error result failed
            outcome = (error_result(tool_use["toolUseId"], "The tool's worker failed."), 0.0)
        with self._lock:
            self._running.discard(index)
            late = self._abandoned
        if not late:
            self._queue.put(("end", index, outcome))
            return
        _abandoned.release()
        logger.warning(
            "tool=<%s>, duration_s=<%.2f> | discarding late result of an abandoned tool",
            tool_use["name"],
            outcome[1],
        )

    def _emitter(self) -> Callable[[AgentEvent], None]:
        """How a running tool puts an event into the run's stream (from its worker thread;
        the loop's thread yields it): a sub-agent's events (``agent.as_tool()``)."""
        put = self._queue.put

        def emit(event: AgentEvent) -> None:
            put(("event", -1, event))

        return emit

    def _execute(self, call: ToolCall, index: int) -> ToolResult:
        prepared = self._prepare(call, index)
        if not isinstance(prepared, tuple):
            return prepared  # answered without running the tool
        tool, arguments, context = prepared
        try:
            value = tool.call_with(arguments, context)
        except SubRunPaused:
            raise
        except BaseException as exc:  # the worker must always report, whatever the tool raised
            return self._failed(call, exc)
        return result_from_value(call.tool_use["toolUseId"], value)

    def _prepare(
        self, call: ToolCall, index: int
    ) -> ToolResult | tuple[Tool[Any], dict[str, Any], ToolContext[Any]]:
        """The tool, its parsed arguments and context; or the answer of a call that does
        not run (denied, unparsable, unknown tool, invalid input)."""
        tool_use = call.tool_use
        tool_use_id, name = tool_use["toolUseId"], tool_use["name"]
        if call.denied is not None:
            reason = f": {call.denied}" if call.denied else "."
            return error_result(tool_use_id, f"The call to tool {name!r} was denied{reason}")
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
        tool_input = tool_use["input"] if call.input is None else call.input
        arguments, problems = call.tool.parse_input(tool_input)
        if arguments is None:
            return error_result(
                tool_use_id, f"Invalid input for tool {name!r}: " + "; ".join(problems)
            )
        if call.input is not None:  # the tool sees the input it runs with
            tool_use = {"toolUseId": tool_use_id, "name": name, "input": tool_input}
        context: ToolContext[Any] = ToolContext(
            tool_use=tool_use,
            agent=self._agent,
            _scope=self._scope,
            decision=call.decision,
            deps=self._deps,
            _emit=self._emitter(),
            _resume=call.resume,
            _progress=functools.partial(self._report_progress, index),
        )
        return call.tool, arguments, context

    def _failed(self, call: ToolCall, exc: BaseException) -> ToolResult:
        """The answer of a call whose tool raised ``exc``."""
        tool_use_id, name = call.tool_use["toolUseId"], call.tool_use["name"]
        if isinstance(exc, CancelledError) or self._scope.cancelled:
            return error_result(tool_use_id, CANCELLED_TEXT)
        logger.debug("tool=<%s> | tool raised %s", name, type(exc).__name__, exc_info=exc)
        return error_result(tool_use_id, f"Tool {name!r} failed: {describe_exception(exc)}")
