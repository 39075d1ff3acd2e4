"""One invocation of the agent loop: model -> tools -> model ... -> done.

The loop is a generator of :mod:`agent_sync.events` run in the caller's thread: ``invoke``
drains it, ``stream`` hands it to the caller. Each step is a generator that returns the
next step (``model`` -> ``tools`` -> ``model`` ... -> ``None``).

Cancel checkpoints (the scope is checked at each): before every model call (so after
tools), on every stream event, during retry back-off (an ``Event.wait``), before tools,
between sequential tools, and while waiting for tool threads. Blocked I/O is woken by the
provider's abort callback, so no checkpoint waits on a socket.

History invariant on every exit (see ``docs/cancellation.md``): a step that is cut short
leaves the history valid up to the last complete message (a cancelled stream appends its
partial message ending "Cancelled by user"; the tool step always appends one result per
call); :func:`~agent_sync._history.close_turn` then answers any pending ``toolUse`` and
closes the turn. Exceptions other than a cancel leave the history ending with the user's
message, so ``agent.invoke()`` with no prompt can try again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ._history import close_turn, tool_result_message
from .cancel import CancelledError, CancelScope
from .errors import ModelStreamError
from .events import AgentEvent, Done, MessageComplete, ModelRetry
from .messages import CANCELLED_TEXT, Message, StreamEvent, ToolSpec, Usage
from .models.base import CacheMode, Model, ModelRequest
from .result import AgentMetrics, AgentResult
from .retry import RetryPolicy
from .stream import AssembledMessage, MessageAssembler
from .tools.decorator import Tool
from .tools.executor import ExecutorKind, ToolBatch, ToolCall

__all__ = ["Invocation", "LoopSettings"]

logger = logging.getLogger(__name__)

Step = Callable[[], Generator[AgentEvent, None, Optional["Step"]]]


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """The agent's configuration, as the loop needs it (immutable per invocation)."""

    model: Model
    tools: dict[str, Tool[Any]]
    tool_specs: tuple[ToolSpec, ...]
    system_prompt: str | None
    max_cycles: int
    tool_executor: ExecutorKind
    max_tool_workers: int
    tool_grace_period: float
    retry: RetryPolicy
    params: dict[str, Any]
    cache: CacheMode | None = None


class Invocation:
    """State of one run. Created by the agent, driven through :meth:`run`."""

    def __init__(
        self,
        settings: LoopSettings,
        messages: list[Message],
        scope: CancelScope,
        agent: Any,
        *,
        emit_deltas: bool = True,
        cache: CacheMode | None = None,
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.emit_deltas = emit_deltas
        self.messages = messages
        self.scope = scope
        self.agent = agent
        self.result: AgentResult | None = None
        self._usage: Usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        self._cycles = 0
        self._tool_calls = 0
        self._retries = 0
        self._started = time.perf_counter()
        self._model_time = 0.0
        self._tool_time = 0.0
        self._first_token: float | None = None

    def run(self) -> Generator[AgentEvent, None, None]:
        """Run to the end, yielding events; the last one is :class:`~agent_sync.events.Done`."""
        step: Step | None = self._model_step
        try:
            while step is not None:
                step = yield from step()
        except CancelledError:
            self._finish_cancelled()
        except GeneratorExit:  # the caller abandoned the stream: that is a cancel
            self.scope.cancel("stream closed")
            self._finish_cancelled()
            raise
        except BaseException as exc:  # a model error, or Ctrl-C: leave the history valid, raise
            if not isinstance(exc, Exception):
                # Ctrl-C (KeyboardInterrupt) and the like end the run as cancel() does:
                # running tools are told, and the turn is closed.
                self.scope.cancel("interrupted")
            close_turn(self.messages, CANCELLED_TEXT if self.scope.cancelled else None)
            raise
        assert self.result is not None
        yield Done(result=self.result)

    def close_unstarted(self) -> None:
        """Finish an invocation whose events were never requested (an unused stream)."""
        self.scope.cancel("stream closed")
        self._finish_cancelled()

    # -- steps --

    def _model_step(self) -> Generator[AgentEvent, None, Step | None]:
        self.scope.raise_if_cancelled()  # after tools, before the next model call
        if self._cycles >= self.settings.max_cycles:
            return self._max_cycles_step
        self._cycles += 1
        started = time.perf_counter()
        assembler = MessageAssembler(emit_deltas=self.emit_deltas)
        add, cancelled = assembler.add, self.scope.event.is_set  # the per-chunk hot path
        try:
            stream = yield from self._open_stream()
            try:
                for event in stream:
                    delta = add(event)
                    if delta is not None:
                        yield delta
                    if cancelled():  # checkpoint: every stream event
                        raise CancelledError(self.scope.reason or "cancelled")
            finally:
                _close(stream)
            if assembler.stop_reason is None:
                # A truncated stream is never a finished answer. After an abort a provider
                # may simply stop yielding (models.base): then it is the cancel (below).
                raise ModelStreamError(
                    "the model stream ended before its stop event (messageStop): "
                    "the response is incomplete",
                    provider=type(self.settings.model).__name__,
                )
            if self._first_token is None and assembler.first_text_at is not None:
                self._first_token = assembler.first_text_at - self._started
        except BaseException as exc:
            self._model_time += time.perf_counter() - started
            interrupted = not isinstance(exc, Exception)  # closed generator, Ctrl-C, exit
            if self.scope.cancelled or interrupted:
                # whatever the provider raised after an abort is the cancel, not an error
                self.messages.append(assembler.partial(CANCELLED_TEXT))
                if interrupted:
                    raise
                raise CancelledError(self.scope.reason or "cancelled") from exc
            raise
        self._model_time += time.perf_counter() - started
        assembled = assembler.finish()
        self._add_usage(assembled.usage)
        self.messages.append(assembled.message)
        yield MessageComplete(message=assembled.message)
        calls = _tool_calls(assembled, self.settings.tools)
        if calls:
            return lambda: self._tools_step(calls)
        self._set_result(assembled.stop_reason)
        return None

    def _open_stream(self) -> Generator[AgentEvent, None, Iterator[StreamEvent]]:
        """Start a model call with retries; return its events from the first content on.

        Errors raised before the first content event are retried by the policy; the
        events before that point (``messageStart``) are buffered and replayed.
        """
        request = ModelRequest(
            messages=tuple(self.messages),
            system_prompt=self.settings.system_prompt,
            tool_specs=self.settings.tool_specs,
            params=self.settings.params,
            cache=self.cache,
        )
        delays: list[float] = []
        last_error = ""
        for attempt in self.settings.retry.attempts(self.scope, delays):
            if delays:
                delay = delays.pop()
                self._retries += 1
                number = attempt.retry_state.attempt_number - 1
                logger.debug("attempt=<%d>, delay_s=<%.2f> | retrying model call", number, delay)
                yield ModelRetry(attempt=number, delay=delay, error=last_error)
                self.scope.wait(delay)  # checkpoint: back-off ends at once on cancel
            with attempt:
                self.scope.raise_if_cancelled()  # never send a request after a cancel
                stream: Iterator[StreamEvent] = iter(())
                try:
                    stream = iter(self.settings.model.stream(request, cancel=self.scope))
                    head = _read_until_content(stream)
                except BaseException as exc:
                    _close(stream)
                    last_error = f"{type(exc).__name__}: {exc}"
                    raise
                return _chain(head, stream)
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _tools_step(self, calls: list[ToolCall]) -> Generator[AgentEvent, None, Step | None]:
        self.scope.raise_if_cancelled()  # checkpoint: before tools
        started = time.perf_counter()
        self._tool_calls += len(calls)
        batch = ToolBatch(
            calls,
            scope=self.scope,
            agent=self.agent,
            available=sorted(self.settings.tools),
            max_workers=self.settings.max_tool_workers
            if self.settings.tool_executor == "concurrent"
            else 1,
            grace_period=self.settings.tool_grace_period,
        )
        try:
            yield from batch.run()
        finally:
            # One result per call, whatever happened (cancel, closed stream, Ctrl-C).
            message = tool_result_message(batch.finish())
            self.messages.append(message)
            self._tool_time += time.perf_counter() - started
        yield MessageComplete(message=message)
        return self._model_step

    def _max_cycles_step(self) -> Generator[AgentEvent, None, Step | None]:
        limit = self.settings.max_cycles
        logger.debug("max_cycles=<%d> | stopping the loop", limit)
        close_turn(
            self.messages, f"Stopped: reached the limit of {limit} model calls (max_cycles)."
        )
        yield MessageComplete(message=self.messages[-1])
        self._set_result("max_cycles")
        return None

    # -- results --

    def _finish_cancelled(self) -> None:
        close_turn(self.messages, CANCELLED_TEXT)
        self._set_result("cancelled", cancel_reason=self.scope.reason)

    def _set_result(self, stop_reason: str, cancel_reason: str | None = None) -> None:
        message = self.messages[-1] if self.messages else {"role": "assistant", "content": []}
        self.result = AgentResult(
            stop_reason=stop_reason,
            cancel_reason=cancel_reason,
            message=message,
            usage=self._usage.copy(),
            metrics=AgentMetrics(
                cycles=self._cycles,
                tool_calls=self._tool_calls,
                retries=self._retries,
                duration_s=time.perf_counter() - self._started,
                model_duration_s=self._model_time,
                tool_duration_s=self._tool_time,
                time_to_first_token_s=self._first_token,
            ),
        )

    def _add_usage(self, usage: Usage | None) -> None:
        if usage is not None:
            total: dict[str, int] = self._usage  # type: ignore[assignment]
            for key, value in usage.items():
                total[key] = total.get(key, 0) + int(value)  # type: ignore[call-overload]


def _tool_calls(assembled: AssembledMessage, tools: dict[str, Tool[Any]]) -> list[ToolCall]:
    return [
        ToolCall(
            tool_use=block["toolUse"],
            tool=tools.get(block["toolUse"]["name"]),
            invalid_input=assembled.invalid_tool_inputs.get(block["toolUse"]["toolUseId"]),
        )
        for block in assembled.message["content"]
        if "toolUse" in block
    ]


def _read_until_content(stream: Iterator[StreamEvent]) -> list[StreamEvent]:
    """Events up to and including the first content event (or all, if there is none)."""
    head: list[StreamEvent] = []
    for event in stream:
        head.append(event)
        if "contentBlockDelta" in event or "contentBlockStart" in event:
            break
    return head


def _chain(head: Sequence[StreamEvent], rest: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    try:
        yield from head
        yield from rest
    finally:
        _close(rest)


def _close(stream: Iterator[Any]) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()
