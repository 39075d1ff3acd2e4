"""The :class:`Agent`: invoke, stream, cancel, and the one-invocation-at-a-time guard.

Concurrency design: an agent runs at most one invocation at a time. ``invoke``/``stream``
take ``_invocation_lock`` without blocking (a busy agent raises
:class:`~agent_sync.errors.ConcurrentInvocationError` at once and touches nothing) and
release it in ``finally``, only if they took it. Each invocation gets a fresh
:class:`~agent_sync.cancel.CancelScope`; ``cancel()`` reads the current scope under
``_state_lock`` and cancels it outside that lock (abort callbacks may shut sockets down).
The scope is closed before the lock is released, so a late ``cancel()`` returns ``False``
and cannot touch the next invocation.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Union

from .cancel import CancelScope
from .errors import ConcurrentInvocationError, UsageError
from .events import AgentEvent
from .loop import Invocation, LoopSettings
from .messages import ContentBlock, Message, validate_history
from .models.base import CacheMode, Model
from .result import AgentResult
from .retry import RetryPolicy
from .tools.decorator import Tool
from .tools.executor import ExecutorKind

__all__ = ["Agent", "AgentStream", "Prompt"]

logger = logging.getLogger(__name__)

Prompt = Union[str, Sequence[ContentBlock], None]
"""A prompt: text, a list of content blocks, or ``None`` to answer the history as it is."""


class _Unset:
    """Type of :data:`UNSET`: "not given", where ``None`` is a meaningful value."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def _check_cache(cache: object) -> None:
    if cache not in (None, "short", "long"):
        raise UsageError(f"cache must be None, 'short' or 'long', got {cache!r}")


class Agent:
    """An LLM agent that runs the model -> tools loop in the calling thread.

    ``invoke``/``stream`` may be called from any thread, one invocation at a time per agent;
    ``cancel`` may be called from any thread at any moment. Use one agent per conversation;
    agents share nothing mutable, so many can run in parallel threads.

    Args:
        model: The model (see :mod:`agent_sync.models`); no network default.
        tools: ``@tool`` functions (plain functions are wrapped with :func:`~agent_sync.tool`).
        system_prompt: System instructions.
        messages: Prior history (Converse shape) to continue from; copied, then owned by
            the agent.
        max_cycles: Model calls per invocation before it stops with ``"max_cycles"``.
        tool_executor: ``"concurrent"`` (tools of one message in parallel) or
            ``"sequential"``.
        max_tool_workers: Threads for concurrent tools.
        tool_grace_period: Seconds a running tool gets to return after a cancel before it
            is abandoned (its late result is discarded).
        retry: The retry policy for model calls.
        params: Extra model parameters sent with every request of this agent.
        cache: Prompt caching for every call (``"short"``, ``"long"`` or ``None``); see
            ``docs/caching.md``. ``invoke(..., cache=...)`` overrides it per call.

    Raises:
        UsageError: Invalid arguments (duplicate tool names, an invalid history, ...).
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Sequence[Tool[Any] | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        messages: Sequence[Message] | None = None,
        max_cycles: int = 20,
        tool_executor: ExecutorKind = "concurrent",
        max_tool_workers: int = 8,
        tool_grace_period: float = 0.5,
        retry: RetryPolicy | None = None,
        params: dict[str, Any] | None = None,
        cache: CacheMode | None = None,
    ) -> None:
        if not callable(getattr(model, "stream", None)):
            raise UsageError(f"model must have a stream(request, *, cancel) method, got {model!r}")
        if max_cycles < 1:
            raise UsageError("max_cycles must be at least 1")
        if tool_executor not in ("concurrent", "sequential"):
            raise UsageError("tool_executor must be 'concurrent' or 'sequential'")
        if max_tool_workers < 1 or tool_grace_period < 0:
            raise UsageError("max_tool_workers must be >= 1 and tool_grace_period >= 0")
        _check_cache(cache)
        registry: dict[str, Tool[Any]] = {}
        for item in tools:
            wrapped = item if isinstance(item, Tool) else Tool(item)
            if wrapped.name in registry:
                raise UsageError(f"two tools are named {wrapped.name!r}")
            registry[wrapped.name] = wrapped
        self._settings = LoopSettings(
            model=model,
            tools=registry,
            tool_specs=tuple(t.spec for t in registry.values()),
            system_prompt=system_prompt,
            max_cycles=max_cycles,
            tool_executor=tool_executor,
            max_tool_workers=max_tool_workers,
            tool_grace_period=tool_grace_period,
            retry=retry or RetryPolicy(),
            params=dict(params or {}),
            cache=cache,
        )
        self._messages: list[Message] = self._checked_history(messages or [])
        self._invocation_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._scope: CancelScope | None = None

    # -- public API --

    @property
    def model(self) -> Model:
        """The model this agent calls."""
        return self._settings.model

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The agent's tools by name (a copy)."""
        return dict(self._settings.tools)

    @property
    def messages(self) -> list[Message]:
        """The whole history, Converse-shaped and JSON-serialisable.

        This is the agent's own list: read it freely, but do not mutate it while the agent
        is running. Assign a new history (only while idle) to replace it.
        """
        return self._messages

    @messages.setter
    def messages(self, value: Sequence[Message]) -> None:
        checked = self._checked_history(value)
        if not self._invocation_lock.acquire(blocking=False):
            raise ConcurrentInvocationError("cannot replace the history while the agent is running")
        try:
            self._messages = checked
        finally:
            self._invocation_lock.release()

    @property
    def is_running(self) -> bool:
        """Whether an invocation (or an unfinished stream) holds the agent."""
        return self._invocation_lock.locked()

    def invoke(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
    ) -> AgentResult:
        """Run the loop to the end and return its result.

        Args:
            prompt: The user's message: text or content blocks. ``None`` answers the
                history as it stands (it must end with a user message, e.g. after a
                :class:`~agent_sync.errors.ModelError`, to try again).
            timeout: Seconds after which the run is cancelled with reason ``"timeout"``.
            cache: Prompt caching for this call (``"short"``, ``"long"``, ``None``); by
                default the agent's ``cache``.

        Returns:
            The result; ``stop_reason == "cancelled"`` if ``cancel()`` or the timeout
            stopped it (the history is then closed with "Cancelled by user").

        Raises:
            ConcurrentInvocationError: The agent is already running (nothing is touched).
            UsageError: An invalid prompt.
            ModelError: The model failed after retries; the history is left valid and ends
                with the user's message.
        """
        invocation, timer = self._begin(prompt, timeout, cache, emit_deltas=False)
        try:
            for _ in invocation.run():
                pass
        finally:
            self._end(invocation, timer)
        assert invocation.result is not None
        return invocation.result

    __call__ = invoke

    def stream(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
    ) -> AgentStream:
        """Run the loop as a blocking iterator of :mod:`~agent_sync.events`.

        The agent is taken at once (a busy agent raises ``ConcurrentInvocationError`` here,
        not on first iteration). Leaving the iteration early (``break`` followed by
        ``close()``, a ``with`` block, or garbage collection) cancels the run with reason
        ``"stream closed"`` and leaves the history valid. Same arguments and errors as
        :meth:`invoke`; the last event is ``Done`` carrying the result.
        """
        invocation, timer = self._begin(prompt, timeout, cache, emit_deltas=True)
        return AgentStream(self, invocation, timer)

    def cancel(self, reason: str | None = None) -> bool:
        """Stop the running invocation, from any thread, at any moment.

        Returns at once; the invocation returns within milliseconds (a tool that ignores
        cancel is abandoned after ``tool_grace_period``) with ``stop_reason ==
        "cancelled"``, unless it was already finishing. Idempotent: the first reason wins.

        Returns:
            ``True`` if a running invocation was signalled; ``False`` if the agent was idle
            (then nothing happens, and the next invocation is not affected).
        """
        with self._state_lock:
            scope = self._scope
        return scope.cancel(reason) if scope is not None else False

    # -- internals --

    def _begin(
        self,
        prompt: Prompt,
        timeout: float | None,
        cache: CacheMode | None | _Unset,
        *,
        emit_deltas: bool,
    ) -> tuple[Invocation, threading.Timer | None]:
        if not self._invocation_lock.acquire(blocking=False):
            raise ConcurrentInvocationError(
                "this agent is already running; use one agent per conversation or wait for it"
            )
        try:
            blocks = self._prompt_blocks(prompt)
            if timeout is not None and timeout <= 0:
                raise UsageError("timeout must be positive (seconds)")
            if isinstance(cache, _Unset):
                cache = self._settings.cache
            _check_cache(cache)
            scope = CancelScope()
            if blocks:
                if self._messages and self._messages[-1]["role"] == "user":
                    self._messages[-1]["content"].extend(blocks)  # e.g. after a model error
                else:
                    self._messages.append({"role": "user", "content": blocks})
            with self._state_lock:
                self._scope = scope
            timer = None
            if timeout is not None:
                timer = threading.Timer(timeout, scope.cancel, args=("timeout",))
                timer.name = "agent_sync-timeout"
                timer.daemon = True
                timer.start()
            invocation = Invocation(
                self._settings, self._messages, scope, self, emit_deltas=emit_deltas, cache=cache
            )
            return invocation, timer
        except BaseException:
            self._invocation_lock.release()
            raise

    def _end(self, invocation: Invocation, timer: threading.Timer | None) -> None:
        if timer is not None:
            timer.cancel()
            timer.join(5)
        invocation.scope.close()
        with self._state_lock:
            self._scope = None
        self._invocation_lock.release()

    def _prompt_blocks(self, prompt: Prompt) -> list[ContentBlock]:
        if prompt is None:
            if not self._messages or self._messages[-1]["role"] != "user":
                raise UsageError("prompt is None but the history does not end with a user message")
            return []
        if isinstance(prompt, str):
            if not prompt.strip():
                raise UsageError("the prompt is empty")
            return [{"text": prompt}]
        blocks = [dict(block) for block in prompt]
        if not blocks or not all(len(block) == 1 for block in blocks):
            raise UsageError("a prompt is a str or a non-empty list of content blocks")
        return blocks  # type: ignore[return-value]

    @staticmethod
    def _checked_history(messages: Sequence[Message]) -> list[Message]:
        history = copy.deepcopy(list(messages))
        problems = validate_history(history)
        if problems:
            raise UsageError("invalid history: " + "; ".join(problems[:5]))
        return history

    def __repr__(self) -> str:
        state = "running" if self.is_running else "idle"
        return f"<Agent {state} model={type(self.model).__name__} messages={len(self._messages)}>"


class AgentStream:
    """The iterator ``Agent.stream()`` returns. Close it (or use ``with``) to stop early."""

    def __init__(self, agent: Agent, invocation: Invocation, timer: threading.Timer | None) -> None:
        self._agent = agent
        self._invocation = invocation
        self._timer = timer
        self._events = invocation.run()
        self._started = False
        self._ended = False
        self._guard = threading.Lock()

    @property
    def result(self) -> AgentResult | None:
        """The result once the stream has ended (also after ``close()``)."""
        return self._invocation.result

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> AgentEvent:
        if self._ended:
            raise StopIteration
        self._started = True
        try:
            return next(self._events)
        except BaseException:
            self._finish()
            raise

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel this stream's run, from any thread; never a later run of the agent.

        ``agent.cancel()`` stops whatever the agent is running *now*; a web view that
        streams one run and cancels on disconnect should use this instead, so a late
        cancel cannot reach the conversation's next message.

        Returns:
            ``True`` if the run was still going and is now signalled.
        """
        return self._invocation.scope.cancel(reason)

    def close(self) -> None:
        """Cancel the run if it is still going and release the agent. Idempotent."""
        with self._guard:
            if self._ended:
                return
            if not self._started:
                self._invocation.close_unstarted()
            else:
                self._invocation.scope.cancel("stream closed")
                if getattr(self._events, "gi_running", False):
                    # another thread is inside next(): the cancel ends its iteration,
                    # and that thread releases the agent.
                    return
                self._events.close()
        self._finish()

    def _finish(self) -> None:
        with self._guard:
            if self._ended:
                return
            self._ended = True
        self._agent._end(self._invocation, self._timer)

    def __enter__(self) -> AgentStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_ended", True):
            try:
                self.close()
            except Exception:  # never raise from a finaliser
                logger.warning("closing an abandoned agent stream failed", exc_info=True)
