"""What an :class:`~agent_sync.Agent` does behind its public methods: checking one call's
options into a :class:`Call`, starting the call's :class:`~agent_sync.run._driver.RunDriver`
(as a top-level run, or a sub-agent's child of a calling run), and its dealings with its
store (refreshing the history and a paused run, cancelling the conversation's run
wherever it is). ``Agent`` adds the public API and its documentation on top.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar, Union

from ._decisions import Approve, Decision, Deny
from ._prompt import history_copy
from .cancel import CancelScope, CancelToken
from .errors import RunConflictError, UsageError
from .messages import ContentBlock, Message
from .models.base import CacheMode
from .result import AgentResult
from .run import CancelMode, RunState
from .run._approvals import check_decisions
from .run._binding import ConversationBinding
from .run._driver import RunDriver, release_surely
from .run._handle import AgentStream
from .run._lost import resumed_state
from .run._settings import UNSET, RunSettings, Unset, call_settings
from .run._slot import RunSlot
from .run._subruns import cancel_subruns
from .stores._protocol import StoredRun
from .tools._registry import ToolSource, with_sources
from .tools.decorator import Tool

__all__ = ["AgentRuns", "Call", "Prompt", "run_to_end"]

logger = logging.getLogger("agent_sync.agent")

Prompt = Union[str, Sequence[ContentBlock], None]
"""A prompt: text, a list of content blocks, or ``None`` to answer the history as it is."""

_Self = TypeVar("_Self", bound="AgentRuns")

_Face = TypeVar("_Face")


class Call(NamedTuple):
    """One call's options, checked: what ``invoke``/``stream``/... pass to the run."""

    settings: RunSettings  # the agent's, with the call's cache, deps, params, output type
    timeout: float | None
    token: CancelToken | None


def _the_driver(driver: RunDriver) -> RunDriver:
    return driver


def run_to_end(driver: RunDriver) -> AgentResult:
    """Drive a blocking run (``invoke``, ``resume``) to its result; free the agent whatever
    happens, a Ctrl-C included."""
    try:
        driver.start()
        driver.drain()
    finally:
        release_surely(driver)
    result = driver.result
    assert result is not None
    return result


class AgentRuns:
    """The agent's state and the machinery of its runs (see the module docstring)."""

    _settings: RunSettings
    _own_tools: dict[str, Tool[Any]]
    _tool_sources: tuple[ToolSource, ...]
    _binding: ConversationBinding | None  # the conversation in the store, if any
    _slot: RunSlot

    def _checked_resume(
        self, decisions: Mapping[str, Decision]
    ) -> tuple[RunState, dict[str, Approve | Deny]]:
        """The paused run (refreshed from the store) and the decisions checked against it."""
        local = self._slot.paused
        if self._binding is not None and self._slot.driver is None:
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

    def _recover(self, lost: StoredRun, timeout: float | None = None) -> AgentStream:
        """Go on with ``lost``, a run of this agent's conversation whose worker died, from
        its last committed state (see :mod:`agent_sync.run._lost`): claimed in the store,
        then streamed here as a resumed paused run is.

        Raises:
            RunConflictError: Another recoverer took it, or it is no longer lost.
            ConcurrentInvocationError: This agent is running.
            UsageError: The agent has no store, or the run is another conversation's.
        """
        if self._binding is None or lost.conversation_id != self._binding.conversation_id:
            raise UsageError("a lost run is recovered by an agent of its conversation's store")
        self._refresh()
        state = resumed_state(lost.state, self._with_source_tools().tools)
        self._slot.adopt(state, lost.version)
        call = self._call(timeout, UNSET, None, UNSET, None, UNSET)
        try:
            return self._open(None, call, emit_deltas=True, face=AgentStream, resume=(state, {}))
        except BaseException:
            if self._slot.driver is None:
                self._refresh()  # not taken over: the agent shows the store's state again
            raise

    def _spawn(
        self: _Self, store: ConversationBinding | None, conversation_id: str | None
    ) -> _Self:
        """A fresh copy of this agent (a sub-agent call's): same settings, its own empty
        history (or the stored conversation's); with ``store`` (a caller's binding), in
        the conversation ``conversation_id`` of that store, with its lease."""
        child = copy.copy(self)
        binding = child._binding = (
            store.for_conversation(conversation_id)
            if store is not None and conversation_id is not None
            else None
        )
        keeper = self._settings.context  # a policy learns per conversation: a fresh keeper
        child._settings = replace(
            self._settings,
            conversation_id=conversation_id,
            context=(
                keeper.fresh(binding.store if binding else None, conversation_id)
                if keeper is not None
                else None
            ),
        )
        child._slot = RunSlot([])
        if binding is not None:
            child._refresh()
        return child

    def _open_child(
        self,
        prompt: Prompt,
        parent: CancelScope,
        *,
        decisions: Mapping[str, Decision] | None = None,
    ) -> RunDriver:
        """Start a sub-agent's run (or its resume with ``decisions``) as a child of
        ``parent``, for the caller to drive with :meth:`RunDriver.events` (the caller's
        ``finally`` releases it: :func:`~agent_sync.run._driver.release_surely`)."""
        resume = self._checked_resume(decisions) if decisions is not None else None
        call = self._call(None, UNSET, None, UNSET, None, UNSET)
        return self._open(
            prompt, call, emit_deltas=True, face=_the_driver, resume=resume, parent=parent
        )

    def _cancel_paused(self) -> bool:
        """Drop a paused run: pending calls answered "Cancelled by user", turn closed."""
        paused = self._slot.drop_paused()
        if paused is None:
            return False
        cancel_subruns(self, paused.subruns, None, "cancelled")  # the paused children it waited on
        logger.debug("run_id=<%s> | paused run cancelled", paused.run_id)
        return True

    def _refresh(self) -> None:
        """Load the history and any paused run from the store (only while idle here)."""
        assert self._binding is not None
        known, synced, generation = self._slot.sync_point()
        record, logged, mirrored = self._binding.read_log(known, synced, generation)
        # Not applied if a run took the agent meanwhile (it loads for itself) or the
        # history was replaced.
        self._slot.apply_record(record, logged, mirrored, unless_changed_since=(known, synced))

    def _cancel_stored(self, reason: str | None, mode: CancelMode) -> bool:
        """Cancel the conversation's current run, wherever it runs (its owner's watcher
        hears it) or is paused (cancelled at once), through the store."""
        assert self._binding is not None
        current = self._binding.current_run()
        if current is None:
            return False
        cancelled = self._binding.cancel_run(current.state.run_id, reason, mode)
        if self._slot.driver is None:
            self._refresh()
        return cancelled

    def _call(
        self,
        timeout: float | None,
        cache: CacheMode | None | Unset,
        token: CancelToken | None,
        deps: Any,
        params: Mapping[str, Any] | None,
        output_type: object,
        usage_limits: object = UNSET,
    ) -> Call:
        """One call's options, checked (``UsageError`` naming the first bad one)."""
        if token is not None and not isinstance(token, CancelToken):
            raise UsageError(f"cancel= takes a CancelToken, got {type(token).__name__}")
        settings = call_settings(
            self._settings,  # the tool sources' tools are read by the run: _run_tools
            cache=cache,
            deps=deps,
            params=params,
            output_type=output_type,
            usage_limits=usage_limits,
        )
        return Call(settings, timeout, token)

    def _with_source_tools(self, cancel: CancelScope | None = None) -> RunSettings:
        """The agent's settings with its tool sources' (MCP servers') tools as they list
        them now: a source connects at the first run, and a changed list is picked up at
        the next (``agent.tools`` shows the last run's); a cancel of ``cancel`` ends a
        connect (``CancelledError``)."""
        if not self._tool_sources:
            return self._settings
        tools = with_sources(self._own_tools, self._tool_sources, cancel)
        if tools != self._settings.tools:
            specs = tuple(t.spec for t in tools.values())
            self._settings = replace(self._settings, tools=tools, tool_specs=specs)
        return self._settings

    def _run_tools(self, scope: CancelScope) -> dict[str, Tool[Any]]:
        """A run's tools, read by the run itself before its first step, under its scope: a
        tool source that connects (or never answers) is stopped by ``cancel()``,
        ``timeout=``, a token or a calling run's cancel, as any step is."""
        return self._with_source_tools(scope).tools

    def _open(
        self,
        prompt: Prompt,
        call: Call,
        *,
        emit_deltas: bool,
        face: Callable[[RunDriver], _Face],
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
        parent: CancelScope | None = None,
        run_id: str | None = None,
    ) -> _Face:
        """Start a run that the caller drives, and return ``face(driver)``, its owning handle
        (``run_id``: a new run's id, chosen by the caller; by default a fresh one).

        The handle is made inside the ``try``: a Ctrl-C before it exists releases the agent.
        """
        driver = self._new_run(
            prompt, call, emit_deltas=emit_deltas, resume=resume, parent=parent, run_id=run_id
        )
        try:
            driver.start()
            return face(driver)
        except BaseException:
            release_surely(driver)
            raise

    def _new_run(
        self,
        prompt: Prompt,
        call: Call,
        *,
        emit_deltas: bool,
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
        parent: CancelScope | None = None,
        run_id: str | None = None,
    ) -> RunDriver:
        return RunDriver(
            agent=self,
            slot=self._slot,
            settings=call.settings,
            prompt=prompt,
            timeout=call.timeout,
            cache=call.settings.cache,
            token=call.token,
            emit_deltas=emit_deltas,
            resume=resume,
            binding=self._binding,
            parent=parent,
            run_id=run_id,
            source_tools=self._run_tools if self._tool_sources else None,
        )

    @staticmethod
    def _checked_history(messages: Sequence[Message]) -> list[Message]:
        """A private, encodable copy of ``messages``; ``UsageError`` naming the first problem."""
        return history_copy(messages)
