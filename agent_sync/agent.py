"""The :class:`Agent`: invoke, stream, cancel, and the one-invocation-at-a-time guard.

Concurrency design: an agent runs at most one invocation at a time. The agent is held by a
:class:`_Run` (the invocation's cancel scope, timeout timer and event generator) stored in
``_run``: ``invoke``/``stream`` take it under ``_state_lock`` without waiting (a busy agent
raises :class:`~agent_sync.errors.ConcurrentInvocationError` at once and touches nothing);
``is_running`` is ``_run is not None``; ``cancel()`` reads ``_run`` once and cancels its
scope (abort callbacks may shut sockets down), so a late ``cancel()`` reaches a finished
run's closed scope and returns ``False``, never the next invocation.

Ctrl-C: ``KeyboardInterrupt`` can land between any two bytecodes of the invoking thread
(in practice wherever CPython checks for signals: after calls, at function entry, on loop
back-edges). So the run is taken *inside* the ``try`` whose ``finally`` gives it back, and
that ``finally`` (1) closes the event generator before the scope (the loop's own cleanup
cancels the scope, wakes running tools and closes the turn; a closed scope would hide the
cancel from them), and does so twice (:meth:`_Run.end` is idempotent, so an interruption
of the first attempt cannot skip it), then (2) releases the agent with one attribute store
that no call precedes, so no interruption can leave the agent held.
"""

from __future__ import annotations

import copy
import inspect
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from types import TracebackType
from typing import Any, Union

from ._history import close_turn
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


class _Run:
    """One invocation's hold on the agent: its scope, timer, invocation and events.

    :meth:`end` is idempotent, so callers attempt it twice (the second attempt finishes
    whatever a Ctrl-C cut short) before they release the agent.
    """

    __slots__ = ("events", "invocation", "scope", "timer")

    def __init__(self) -> None:
        self.scope = CancelScope()
        self.timer: threading.Timer | None = None
        self.invocation: Invocation | None = None
        self.events: Generator[AgentEvent, None, None] | None = None

    def end(self) -> None:
        """Leave the history valid, close the scope, stop the timer; each step runs even
        if an earlier one is interrupted."""
        try:
            events, invocation = self.events, self.invocation
            if events is not None and invocation is not None:
                if inspect.getgeneratorstate(events) == inspect.GEN_CREATED:
                    invocation.close_unstarted()  # keeps the prompt, closes the turn
                # The loop's own cleanup runs here, while the scope is still open: it
                # cancels the scope (waking running tools), waits out their grace period
                # and closes the turn. No-op if the generator has finished.
                events.close()
                close_turn(invocation.messages, None)  # never leave a toolUse unanswered
        finally:
            try:
                self.scope.close()
            finally:
                timer = self.timer
                if timer is not None:
                    timer.cancel()
                    if timer.is_alive() and timer is not threading.current_thread():
                        timer.join(5)


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
        self._state_lock = threading.Lock()  # makes "check _run, then take it" atomic
        self._run: _Run | None = None

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
        with self._state_lock:
            if self._run is not None:
                raise ConcurrentInvocationError(
                    "cannot replace the history while the agent is running"
                )
            self._messages = checked

    @property
    def is_running(self) -> bool:
        """Whether an invocation (or an unfinished stream) holds the agent."""
        return self._run is not None

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
        run = _Run()
        try:
            events = self._begin(run, prompt, timeout, cache, emit_deltas=False)
            for _ in events:
                pass
        finally:
            try:
                run.end()
            finally:
                try:
                    run.end()  # again: completes whatever a Ctrl-C cut short
                finally:
                    if self._run is run:  # no call before the store: Ctrl-C cannot skip it
                        self._run = None
        assert run.invocation is not None and run.invocation.result is not None
        return run.invocation.result

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
        run = _Run()
        try:
            self._begin(run, prompt, timeout, cache, emit_deltas=True)
            return AgentStream(self, run)
        except BaseException:
            try:
                run.end()
            finally:
                try:
                    run.end()
                finally:
                    if self._run is run:
                        self._run = None
            raise

    def cancel(self, reason: str | None = None) -> bool:
        """Stop the running invocation, from any thread, at any moment.

        Returns at once; the invocation returns within milliseconds (a tool that ignores
        cancel is abandoned after ``tool_grace_period``) with ``stop_reason ==
        "cancelled"``, unless it was already finishing. Idempotent: the first reason wins.

        Returns:
            ``True`` if a running invocation was signalled; ``False`` if the agent was idle
            (then nothing happens, and the next invocation is not affected).
        """
        run = self._run  # one read: the run of this moment, or None
        return run.scope.cancel(reason) if run is not None else False

    # -- internals --

    def _begin(
        self,
        run: _Run,
        prompt: Prompt,
        timeout: float | None,
        cache: CacheMode | None | _Unset,
        *,
        emit_deltas: bool,
    ) -> Generator[AgentEvent, None, None]:
        """Take the agent for ``run`` and set the invocation up; return its events.

        The caller's ``finally`` ends the run and releases the agent, whether or not this
        got as far as taking it (it only releases a run it finds in ``_run``).
        """
        with self._state_lock:
            if self._run is not None:
                raise ConcurrentInvocationError(
                    "this agent is already running; use one agent per conversation or wait for it"
                )
            self._run = run
        blocks = self._prompt_blocks(prompt)
        if timeout is not None and timeout <= 0:
            raise UsageError("timeout must be positive (seconds)")
        if isinstance(cache, _Unset):
            cache = self._settings.cache
        _check_cache(cache)
        invocation = Invocation(
            self._settings, self._messages, run.scope, self, emit_deltas=emit_deltas, cache=cache
        )
        if blocks:
            if self._messages and self._messages[-1]["role"] == "user":
                self._messages[-1]["content"].extend(blocks)  # e.g. after a model error
            else:
                self._messages.append({"role": "user", "content": blocks})
        run.invocation = invocation
        events = run.events = invocation.run()
        if timeout is not None:
            timer = threading.Timer(timeout, run.scope.cancel, args=("timeout",))
            timer.name = "agent_sync-timeout"
            timer.daemon = True
            run.timer = timer
            timer.start()
        return events

    def _prompt_blocks(self, prompt: Prompt) -> list[ContentBlock]:
        """The prompt as blocks to append; ``UsageError`` naming the first problem.

        Runs before anything is touched: a bad prompt leaves the history as it was.
        """
        from .messages import validate_prompt  # the block rules live in messages.py

        if prompt is None:
            if not self._messages or self._messages[-1]["role"] != "user":
                raise UsageError("prompt is None but the history does not end with a user message")
            return []
        if isinstance(prompt, str):
            if not prompt.strip():
                raise UsageError("the prompt is empty")
            return [{"text": prompt}]
        problems = validate_prompt(prompt)
        if problems:
            raise UsageError(f"invalid prompt: {problems[0]}")
        try:  # a copy: the caller's later changes to its blocks never reach the history
            return copy.deepcopy(list(prompt))
        except Exception as exc:
            raise UsageError(f"the prompt cannot be copied ({type(exc).__name__})") from exc

    @staticmethod
    def _checked_history(messages: Sequence[Message]) -> list[Message]:
        """A private copy of ``messages``; ``UsageError`` naming the first problem."""
        problems = validate_history(messages)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise UsageError(f"invalid history: {problems[0]}{more}")
        try:
            return copy.deepcopy(list(messages))
        except Exception as exc:
            raise UsageError(f"the history cannot be copied ({type(exc).__name__})") from exc

    def __repr__(self) -> str:
        state = "running" if self.is_running else "idle"
        return f"<Agent {state} model={type(self.model).__name__} messages={len(self._messages)}>"


class AgentStream:
    """The iterator ``Agent.stream()`` returns. Close it (or use ``with``) to stop early.

    Iterate it from one thread at a time; ``close()`` and ``cancel()`` may be called from
    any thread at any moment. If another thread is inside ``next()`` when ``close()`` is
    called, ``close()`` cancels the run and returns at once, and that thread ends the run
    and releases the agent as soon as its ``next()`` returns (its iteration then stops).
    Otherwise ``close()`` ends the run itself. Either way the run is ended exactly once,
    with one closing message.
    """

    def __init__(self, agent: Agent, run: _Run) -> None:
        assert run.events is not None
        self._agent = agent
        self._run = run
        self._events = run.events
        self._guard = threading.Lock()  # orders next() against close() from other threads
        self._iterating = False  # a thread is inside next(self._events)
        self._closing = False  # close() was called: no new next(); an iterator finishes
        self._ended = False  # the run has been ended (exactly once)

    @property
    def result(self) -> AgentResult | None:
        """The result once the stream has ended (also after ``close()``)."""
        invocation = self._run.invocation
        return invocation.result if invocation is not None else None

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> AgentEvent:
        mine = False  # whether this call entered the generator (then it must finish)
        try:
            with self._guard:
                if self._ended or self._closing:
                    raise StopIteration
                if self._iterating:
                    raise UsageError("this stream is being iterated by another thread")
                self._iterating = mine = True
            event = next(self._events)
            with self._guard:
                self._iterating = False
                closing = self._closing
            if closing:  # close() came from another thread during next(): end it here
                raise StopIteration
            return event
        except BaseException:
            if mine:
                self._iterating = False
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
        return self._run.scope.cancel(reason)

    def close(self) -> None:
        """Cancel the run if it is still going and release the agent.

        Idempotent and safe from any thread; never raises (a failure while ending the run
        is logged). The closing message ("Cancelled by user") is written exactly once.
        """
        with self._guard:
            if self._ended:
                return
            self._closing = True
            busy = self._iterating
        if busy:
            # Another thread is inside next(): the cancel ends its iteration promptly and
            # that thread ends the run (two threads never run the generator at once).
            self._run.scope.cancel("stream closed")
            return
        try:
            self._finish()
        except Exception:  # called from finalisers and other threads: never raise
            logger.warning("closing the agent stream failed", exc_info=True)

    def _finish(self) -> None:
        agent, run = self._agent, self._run
        mine = False
        try:
            with self._guard:
                if not self._ended:
                    self._ended = mine = True
            if mine:
                run.end()
        finally:
            if mine:
                try:
                    run.end()  # again: completes whatever a Ctrl-C cut short
                finally:
                    if agent._run is run:  # no call before the store: Ctrl-C cannot skip it
                        agent._run = None

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
            self.close()
