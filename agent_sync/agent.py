"""The :class:`Agent`: configuration plus the facade over runs (invoke, stream, steps, cancel,
inject), and :class:`AgentStream`.

An agent runs at most one invocation at a time. Each invocation is a
:class:`~agent_sync.run.Run` (see :mod:`agent_sync.run._driver` for its lifecycle and the
Ctrl-C rules); the agent holds it in a :class:`~agent_sync.run._driver.RunSlot` with the
history. ``invoke``/``stream``/``steps`` take the slot without waiting (a busy agent raises
:class:`~agent_sync.errors.ConcurrentInvocationError` at once and touches nothing);
``cancel()``/``inject()`` read the slot once and act on that run, so a late call reaches a
finished run (``False``/``UsageError``), never the next invocation.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, Union

from ._decisions import ApprovalRequest, Approve, Decision, Deny
from ._prompt import history_copy
from .cancel import CancelToken
from .errors import ConcurrentInvocationError, PendingApprovalError, RunConflictError, UsageError
from .events import AgentEvent
from .messages import CANCELLED_TEXT, ContentBlock, Message
from .models.base import CacheMode, Model
from .result import AgentResult
from .retry import RetryPolicy
from .run import CancelMode, Run, RunSnapshot, RunState
from .run._approvals import check_decisions
from .run._context import RunSettings
from .run._driver import RunDriver, RunSlot
from .run._durable import StoreLink, load_log
from .run._history import add_user_blocks, close_turn
from .stores._protocol import RunStore
from .stores._rules import check_mode
from .tools._registry import ToolSource, collect_tools, with_sources
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


_Face = TypeVar("_Face")


def _owner_handle(run: RunDriver) -> Run:
    return Run(run, owner=True)


_NO_MESSAGES = 2**62  # load(since=...): only the conversation's current run is needed


def _run_to_end(run: RunDriver) -> AgentResult:
    """Drive a blocking run (``invoke``, ``resume``) to its result; free the agent whatever
    happens, a Ctrl-C included."""
    try:
        run.start()
        run.drain()
    finally:
        try:
            run.release()
        finally:
            run.release()  # again: completes whatever a Ctrl-C cut short
    result = run.result
    assert result is not None
    return result


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
        hooks: Objects with any of ``before_model_call``, ``after_model_call``,
            ``before_tool_call``, ``after_tool_call`` (see :mod:`agent_sync.hooks`); they
            run in the loop's thread.
        trace_content: With the ``otel`` extra and a tracer provider, put prompt and
            completion text on the spans (off by default: spans carry no content).
        approval_timeout: Seconds a tool call may wait for approval; past it, the request
            is answered ``Deny("approval expired")`` when the run is resumed.
        store: A :class:`~agent_sync.stores.RunStore`: the conversation's history and runs
            live there, so any process with the same store and ``conversation_id`` sees
            them, runs them one at a time, and can cancel, inject into or resume them.
        conversation_id: The conversation's name in the store (needed with ``store``); also
            the tracing ``gen_ai.conversation.id``. A name, not a secret: your web layer
            decides who may use it.
        lease_s: Seconds a run stays claimed without a sign of life from its process
            (renewed every third of it); by default the store's ``lease_s``, else 30.

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
        hooks: Sequence[object] = (),
        trace_content: bool = False,
        approval_timeout: float | None = None,
        store: RunStore | None = None,
        conversation_id: str | None = None,
        lease_s: float | None = None,
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
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise UsageError(
                f"system_prompt must be a str or None, got {type(system_prompt).__name__}"
            )
        sources: list[ToolSource] = []  # MCP servers: their tools come at each run
        registry = collect_tools(tools, sources)
        self._tool_sources = tuple(sources)
        self._own_tools = registry
        if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence):
            raise UsageError("hooks must be a list of hook objects")
        if approval_timeout is not None and not approval_timeout > 0:
            raise UsageError("approval_timeout must be positive (seconds) or None")
        if conversation_id is not None and (
            not isinstance(conversation_id, str) or not conversation_id.strip()
        ):
            raise UsageError("conversation_id must be a non-empty str")
        if store is not None:
            if conversation_id is None:
                raise UsageError("a store needs a conversation_id (the conversation's name)")
            if messages is not None:
                raise UsageError("with a store the history comes from it: do not pass messages")
        lease = float(lease_s if lease_s is not None else getattr(store, "lease_s", 30.0))
        if not lease > 0:
            raise UsageError("lease_s must be positive (seconds)")
        self._store = store
        self._lease_s = lease
        self._settings = RunSettings(
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
            hooks=tuple(hooks),
            trace_content=bool(trace_content),
            approval_timeout=approval_timeout,
            conversation_id=conversation_id,
        )
        self._slot = RunSlot(self._checked_history(messages or []))
        if store is not None:
            self._refresh()  # the history, and whether a run there waits for approval

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
        is running. Assign a new history (only while idle) to replace it: with a store, it
        is written to the store as the conversation's history, which every worker then
        reads (refused while a run of the conversation is live or paused, in this process
        or another).

        Raises (on assignment):
            UsageError: An invalid history.
            ConcurrentInvocationError: A run is live (this agent's, or the conversation's
                in another worker); nothing changed.
            PendingApprovalError: A run waits for approval; nothing changed.
            StoreUnavailableError: The store could not be reached; nothing changed.
        """
        return self._slot.messages

    @messages.setter
    def messages(self, value: Sequence[Message]) -> None:
        checked = self._checked_history(value)
        slot = self._slot
        with slot.lock:  # held across the store write: no run of this agent starts meanwhile
            if slot.run is not None:
                raise ConcurrentInvocationError(
                    "cannot replace the history while the agent is running"
                )
            if slot.paused is not None:
                raise PendingApprovalError(
                    "cannot replace the history while a run waits for approval"
                )
            if self._store is None:
                slot.messages = checked
                return
            assert self._settings.conversation_id is not None
            generation = self._store.replace_log(self._settings.conversation_id, checked)
            slot.messages = checked
            slot.synced, slot.generation = len(checked), generation  # the stored log now

    @property
    def is_running(self) -> bool:
        """Whether an invocation (or an unfinished stream or steps run) holds the agent."""
        return self._slot.run is not None

    @property
    def is_paused(self) -> bool:
        """Whether a run waits for approval (see :meth:`resume`)."""
        return self._slot.paused is not None

    @property
    def pending_approvals(self) -> tuple[ApprovalRequest, ...]:
        """The requests a paused run waits for (empty when not paused)."""
        paused = self._slot.paused
        return paused.approvals if paused is not None else ()

    @property
    def active_run(self) -> Run | None:
        """The run in progress (a :class:`~agent_sync.run.Run` handle), or ``None``.

        Read it once and keep the handle: its ``cancel``/``inject``/``snapshot`` act on
        that run only, from any thread, even after the agent has moved on.
        """
        driver = self._slot.run
        return Run(driver) if driver is not None else None

    def invoke(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
        cancel: CancelToken | None = None,
    ) -> AgentResult:
        """Run the loop to the end and return its result.

        Args:
            prompt: The user's message: text or content blocks. ``None`` answers the
                history as it stands (it must end with a user message, e.g. after a
                :class:`~agent_sync.errors.ModelError`, to try again).
            timeout: Seconds after which the run is cancelled with reason ``"timeout"``.
            cache: Prompt caching for this call (``"short"``, ``"long"``, ``None``); by
                default the agent's ``cache``.
            cancel: A :class:`~agent_sync.CancelToken` the caller holds: cancelling it
                cancels this run (and every other run it was passed to).

        Returns:
            The result; ``stop_reason == "cancelled"`` if ``cancel()``, the token or the
            timeout stopped it (the history is then closed with "Cancelled by user").

        Raises:
            ConcurrentInvocationError: The agent is already running (nothing is touched).
            UsageError: An invalid prompt.
            ModelError: The model failed after retries; the history is left valid and ends
                with the user's message.
        """
        return _run_to_end(self._new_run(prompt, timeout, cache, cancel, emit_deltas=False))

    __call__ = invoke

    def stream(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
        cancel: CancelToken | None = None,
    ) -> AgentStream:
        """Run the loop as a blocking iterator of :mod:`~agent_sync.events`.

        The agent is taken at once (a busy agent raises ``ConcurrentInvocationError`` here,
        not on first iteration). Leaving the iteration early (``break`` followed by
        ``close()``, a ``with`` block, or garbage collection) cancels the run with reason
        ``"stream closed"`` and leaves the history valid. Same arguments and errors as
        :meth:`invoke`; the last event is ``Done`` carrying the result.
        """
        return self._open(prompt, timeout, cache, cancel, emit_deltas=True, face=AgentStream)

    def steps(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
        cancel: CancelToken | None = None,
    ) -> Run:
        """Run the loop one step at a time: a :class:`~agent_sync.run.Run` to iterate.

        Each iteration makes one model call and runs the tools it asked for, then yields a
        :class:`~agent_sync.run.Step` (``step.message``, ``step.tool_results``); after
        the last, ``run.result`` holds the result. Use it as a context manager: leaving
        the block early cancels the run with a valid history::

            with agent.steps("Plan the trip") as run:
                for step in run:
                    if len(step.tool_results) > 3:
                        break  # cancelled on leaving the block
            print(run.result.stop_reason if run.result else "cancelled")

        The agent is taken at once, as for :meth:`stream`; same arguments and errors as
        :meth:`invoke` (a model error is raised from the iteration).
        """
        return self._open(prompt, timeout, cache, cancel, emit_deltas=False, face=_owner_handle)

    def resume(
        self,
        decisions: Mapping[str, Decision],
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
        cancel: CancelToken | None = None,
    ) -> AgentResult:
        """Answer every pending approval request and go on with the paused run.

        Denied calls get an error ``toolResult`` with the reason; approved calls run (with
        ``Approve(input=...)`` if given, and ``context.decision`` set); then the run goes
        on as ``invoke`` would, with the same ``run_id``. It may pause again.

        Args:
            decisions: Request id -> ``True`` (``Approve()``), ``False`` (``Deny()``),
                ``Approve(input=None, data=None)`` or ``Deny(reason="", data=None)``,
                for every pending request (expired ones are answered
                ``Deny("approval expired")`` whatever is sent).
            timeout, cache, cancel: As for :meth:`invoke`.

        Returns:
            The result, as :meth:`invoke` returns it.

        Raises:
            DecisionValidationError: A request without a decision, an unknown id, or an
                invalid decision (input or ``decision_schema`` data); nothing ran and the
                run is still paused.
            UsageError: Nothing is paused.
            ConcurrentInvocationError: The agent is running.
        """
        paused, checked = self._checked_resume(decisions)
        return _run_to_end(
            self._new_run(None, timeout, cache, cancel, emit_deltas=False, resume=(paused, checked))
        )

    def resume_stream(
        self,
        decisions: Mapping[str, Decision],
        *,
        timeout: float | None = None,
        cache: CacheMode | None | _Unset = UNSET,
        cancel: CancelToken | None = None,
    ) -> AgentStream:
        """:meth:`resume` as a blocking iterator of :mod:`~agent_sync.events`, as
        :meth:`stream` is to :meth:`invoke`.

        The decisions are checked and the run is taken at once (the errors of
        :meth:`resume` are raised here, before any event); the run's events follow, the
        last one ``Done``. The run keeps its ``run_id``.
        """
        paused, checked = self._checked_resume(decisions)
        return self._open(
            None,
            timeout,
            cache,
            cancel,
            emit_deltas=True,
            face=AgentStream,
            resume=(paused, checked),
        )

    def _checked_resume(
        self, decisions: Mapping[str, Decision]
    ) -> tuple[RunState, dict[str, Approve | Deny]]:
        """The paused run (refreshed from the store) and the decisions checked against it."""
        local = self._slot.paused
        if self._store is not None and self._slot.run is None:
            self._refresh()
            stored = self._slot.paused
            if local is not None and (stored is None or stored.run_id != local.run_id):
                raise RunConflictError(
                    f"run {local.run_id} was resumed or cancelled by another worker"
                )
        paused = self._slot.paused
        if paused is None:
            raise UsageError("nothing to resume: no run of this agent waits for approval")
        return paused, check_decisions(paused, self._settings.tools, decisions)

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        """Stop the running invocation, from any thread, at any moment.

        Returns at once; the invocation returns within milliseconds (a tool that ignores
        cancel is abandoned after ``tool_grace_period``) with ``stop_reason ==
        "cancelled"``, unless it was already finishing. Idempotent: the first reason wins.
        ``mode="after_turn"`` lets the model call in flight and its tools finish first
        (see :meth:`agent_sync.run.Run.cancel`).

        With a store, an agent that runs nothing itself cancels the conversation's run
        wherever it is: running in another worker (its process hears it through the store,
        in either mode) or paused for approval (cancelled at once).

        Returns:
            ``True`` if a running invocation was signalled (or a paused one cancelled);
            ``False`` if there was none (then nothing happens, and the next invocation is
            not affected).

        Raises:
            UsageError: ``mode`` is neither ``"now"`` nor ``"after_turn"`` (even when idle).
        """
        check_mode(mode)  # first, whatever there is to cancel: a bad mode is never ignored
        run = self._slot.run  # one read: the run of this moment, or None
        if run is not None:
            return run.cancel(reason, mode=mode)
        if self._store is not None:
            return self._cancel_stored(reason, mode)
        return self._cancel_paused()

    def _cancel_paused(self) -> bool:
        """Drop a paused run: pending calls answered "Cancelled by user", turn closed."""
        slot = self._slot
        with slot.lock:
            paused = slot.paused
            if paused is None or slot.run is not None:
                return False
            slot.paused = None
            queued = [block for blocks in paused.queued_inputs for block in blocks]
            add_user_blocks(slot.messages, queued)
            close_turn(slot.messages, CANCELLED_TEXT)
        logger.debug("run_id=<%s> | paused run cancelled", paused.run_id)
        return True

    def inject(self, content: str | Sequence[ContentBlock]) -> None:
        """Queue input for the running invocation, from any thread (see
        :meth:`agent_sync.run.Run.inject`).

        Raises:
            UsageError: The agent is idle (or its run just ended), or invalid content.
        """
        run = self._slot.run
        if run is None:
            raise UsageError("the agent is idle: there is no run to inject into")
        run.inject(content)

    # -- internals --

    def _refresh(self) -> None:
        """Load the history and any paused run from the store (only while idle here)."""
        assert self._store is not None and self._settings.conversation_id is not None
        slot = self._slot
        with slot.lock:
            known, synced, generation = slot.messages, slot.synced, slot.generation
        record, messages, mirrored = load_log(
            self._store, self._settings.conversation_id, known, synced, generation
        )
        with slot.lock:
            if slot.run is not None or slot.messages is not known or slot.synced != synced:
                return  # a run took the agent meanwhile (it loads for itself), or a new history
            slot.synced, slot.generation = mirrored, record.generation
            stored = record.run
            if stored is not None and stored.state.status == "paused":
                slot.paused, slot.paused_version = stored.state, stored.version
                del messages[stored.state.history_start :]  # the log, then the paused run's
                messages.extend(stored.state.messages)
            else:
                slot.paused, slot.paused_version = None, 0
            slot.messages[:] = messages

    def _cancel_stored(self, reason: str | None, mode: CancelMode) -> bool:
        """Cancel the conversation's current run, wherever it runs (its owner's watcher
        hears it) or is paused (cancelled at once), through the store."""
        assert self._store is not None and self._settings.conversation_id is not None
        record = self._store.load(self._settings.conversation_id, since=_NO_MESSAGES)
        if record.run is None:
            return False
        cancelled = self._store.cancel(record.run.state.run_id, reason, mode=mode)
        if self._slot.run is None:
            self._refresh()
        return cancelled

    def _open(
        self,
        prompt: Prompt,
        timeout: float | None,
        cache: CacheMode | None | _Unset,
        token: CancelToken | None,
        *,
        emit_deltas: bool,
        face: Callable[[RunDriver], _Face],
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
    ) -> _Face:
        """Start a run that the caller drives, and return ``face(run)``, its public view.

        The view is made inside the ``try``: a Ctrl-C before it exists releases the agent.
        """
        run = self._new_run(prompt, timeout, cache, token, emit_deltas=emit_deltas, resume=resume)
        try:
            run.start()
            return face(run)
        except BaseException:
            try:
                run.release()
            finally:
                run.release()
            raise

    def _new_run(
        self,
        prompt: Prompt,
        timeout: float | None,
        cache: CacheMode | None | _Unset,
        token: CancelToken | None,
        *,
        emit_deltas: bool,
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
    ) -> RunDriver:
        if isinstance(cache, _Unset):
            cache = self._settings.cache
        _check_cache(cache)
        if token is not None and not isinstance(token, CancelToken):
            raise UsageError(f"cancel= takes a CancelToken, got {type(token).__name__}")
        return RunDriver(
            agent=self,
            slot=self._slot,
            settings=self._run_settings(),
            prompt=prompt,
            timeout=timeout,
            cache=cache,
            token=token,
            emit_deltas=emit_deltas,
            resume=resume,
            link=(
                StoreLink(self._store, self._settings.conversation_id or "", self._lease_s)
                if self._store is not None
                else None
            ),
        )

    def _run_settings(self) -> RunSettings:
        """The settings for a new run: with tool sources (MCP servers), their tools as they
        list them now (a source connects at the first run; a changed list is picked up)."""
        if not self._tool_sources:
            return self._settings
        tools = with_sources(self._own_tools, self._tool_sources)
        if tools != self._settings.tools:
            specs = tuple(t.spec for t in tools.values())
            self._settings = dataclasses.replace(self._settings, tools=tools, tool_specs=specs)
        return self._settings

    @staticmethod
    def _checked_history(messages: Sequence[Message]) -> list[Message]:
        """A private, encodable copy of ``messages``; ``UsageError`` naming the first problem."""
        return history_copy(messages)

    def __repr__(self) -> str:
        state = "running" if self.is_running else "idle"
        count = len(self._slot.messages)
        return f"<Agent {state} model={type(self.model).__name__} messages={count}>"


class AgentStream:
    """The iterator ``Agent.stream()`` returns. Close it (or use ``with``) to stop early.

    Iterate it from one thread at a time; ``close()``, ``cancel()``, ``inject()`` and
    ``snapshot()`` may be called from any thread at any moment and act on this stream's
    own run, never on a later run of the agent. If another thread is inside ``next()``
    when ``close()`` is called, ``close()`` cancels the run and returns at once, and that
    thread ends the run and releases the agent as soon as its ``next()`` returns.
    Either way the run is ended exactly once, with one closing message.
    """

    __slots__ = ("_run",)

    def __init__(self, run: RunDriver) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        """This stream's run (a :class:`~agent_sync.run.Run` handle; the stream drives it)."""
        return Run(self._run)

    @property
    def run_id(self) -> str:
        """This stream's run id (also on each of its events)."""
        return self._run.run_id

    @property
    def result(self) -> AgentResult | None:
        """The result once the stream has ended (also after ``close()``)."""
        return self._run.result

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> AgentEvent:
        return self._run.next_event()

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        """Cancel this stream's run, from any thread; never a later run of the agent.

        ``agent.cancel()`` stops whatever the agent is running *now*; a web view that
        streams one run and cancels on disconnect should use this instead, so a late
        cancel cannot reach the conversation's next message.

        Returns:
            ``True`` if the run was still going and is now signalled.
        """
        return self._run.cancel(reason, mode=mode)

    def inject(self, content: str | Sequence[ContentBlock]) -> None:
        """Queue input for this stream's run (see :meth:`agent_sync.run.Run.inject`)."""
        self._run.inject(content)

    def snapshot(self) -> RunSnapshot:
        """Where this stream's run is now (see :meth:`agent_sync.run.Run.snapshot`)."""
        return self._run.snapshot()

    def close(self) -> None:
        """Cancel the run if it is still going and release the agent.

        Idempotent and safe from any thread; never raises (a failure while ending the run
        is logged). The closing message ("Cancelled by user") is written exactly once.
        """
        self._run.close()

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
        run = getattr(self, "_run", None)
        if run is not None and not run.ended:
            run.close()
