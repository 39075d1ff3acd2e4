"""What an :class:`~agent_sync.Agent` does behind its public methods: its
:class:`AgentRunner`, which the agent owns (one per agent), holds the agent's state (its
settings, tool sources, :class:`~agent_sync.run._binding.ConversationBinding` and
:class:`~agent_sync.run._slot.RunSlot`) and does the work: checking one call's options into a
:class:`Call`, starting the call's :class:`~agent_sync.run._driver.RunDriver` (as a top-level
run, a recovered one, or a sub-agent's child of a calling run), and its dealings with its
store (refreshing the history and a paused run, cancelling the conversation's run wherever
it is). ``Agent`` (``agent.py``) is the facade: the public API and its documentation.

The runner does not hold its agent: a method that starts a run is given it (``agent``), as
what the run's tools see as ``context.agent`` and what holds its paused children.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar, Union

from ._decisions import Approve, Decision, Deny
from .cancel import CancelScope, CancelToken
from .errors import RunConflictError, UsageError
from .messages import ContentBlock, Message
from .models.base import CacheMode
from .result import AgentResult
from .run import CancelMode, RunState
from .run._approvals import check_decisions
from .run._binding import ConversationBinding
from .run._context import RunAgent
from .run._driver import RunDriver, release_surely
from .run._handle import AgentStream
from .run._lost import resumed_state
from .run._settings import UNSET, RunSettings, Unset, call_settings
from .run._slot import RunSlot
from .run._subruns import cancel_subruns
from .stores._protocol import StoredRun
from .tools._registry import ToolSource, with_sources
from .tools.decorator import Tool

__all__ = ["AgentRunner", "Call", "Prompt", "run_to_end"]

logger = logging.getLogger("agent_sync.agent")

Prompt = Union[str, Sequence[ContentBlock], None]
"""A prompt: text, a list of content blocks, or ``None`` to answer the history as it is."""

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


class AgentRunner:
    """One agent's state and the machinery of its runs (see the module docstring).

    Its fields are written by its own verbs only, except ``settings``, which a run's tool
    sources refresh (:meth:`with_source_tools`).
    """

    def __init__(
        self,
        settings: RunSettings,
        tool_sources: Sequence[ToolSource],
        binding: ConversationBinding | None,
        history: list[Message],
    ) -> None:
        self.settings = settings
        """The agent's settings, with its tool sources' tools of the last run."""
        self.own_tools: dict[str, Tool[Any]] = settings.tools
        """The agent's own tools (without its tool sources')."""
        self.tool_sources = tuple(tool_sources)
        """Tool sources (MCP servers): their tools are listed at each run."""
        self.binding = binding
        """The agent's conversation in its store, or ``None`` without a store."""
        self.slot = RunSlot(history)
        """The history, the live run and the paused one."""
        if binding is not None:
            self.refresh()  # the history, and whether a run there waits for approval

    def spawned(
        self, store: ConversationBinding | None, conversation_id: str | None
    ) -> AgentRunner:
        """A runner for a fresh copy of this agent (a sub-agent call's): same settings,
        its own empty history (or the stored conversation's); with ``store`` (a caller's
        binding), in the conversation ``conversation_id`` of that store, with its lease."""
        binding = (
            store.for_conversation(conversation_id)
            if store is not None and conversation_id is not None
            else None
        )
        keeper = self.settings.context  # a policy learns per conversation: a fresh keeper
        settings = replace(
            self.settings,
            conversation_id=conversation_id,
            context=(
                keeper.fresh(binding.store if binding else None, conversation_id)
                if keeper is not None
                else None
            ),
        )
        child = AgentRunner(settings, self.tool_sources, binding, [])
        child.own_tools = self.own_tools
        return child

    def checked_resume(
        self, decisions: Mapping[str, Decision]
    ) -> tuple[RunState, dict[str, Approve | Deny]]:
        """The paused run (refreshed from the store) and the decisions checked against it."""
        local = self.slot.paused
        if self.binding is not None and self.slot.driver is None:
            self.refresh()
            stored = self.slot.paused
            if local is not None and (stored is None or stored.run_id != local.run_id):
                raise RunConflictError(
                    f"run {local.run_id} was resumed or cancelled by another worker"
                )
        paused = self.slot.paused
        if paused is None:
            raise UsageError("nothing to resume: no run of this agent waits for approval")
        return paused, check_decisions(paused, self.settings.tools, decisions)

    def recover(self, agent: RunAgent, lost: StoredRun, timeout: float | None) -> AgentStream:
        """Go on with ``lost`` (see ``Agent._recover``)."""
        if self.binding is None or lost.conversation_id != self.binding.conversation_id:
            raise UsageError("a lost run is recovered by an agent of its conversation's store")
        self.refresh()
        state = resumed_state(lost.state, self.with_source_tools().tools)
        self.slot.adopt(state, lost.version)
        call = self.call(timeout, UNSET, None, UNSET, None, UNSET)
        try:
            return self.open(
                agent, None, call, emit_deltas=True, face=AgentStream, resume=(state, {})
            )
        except BaseException:
            if self.slot.driver is None:
                self.refresh()  # not taken over: the agent shows the store's state again
            raise

    def open_child(
        self,
        agent: RunAgent,
        prompt: Prompt,
        parent: CancelScope,
        decisions: Mapping[str, Decision] | None,
    ) -> RunDriver:
        """Start a sub-agent's run (see ``Agent._open_child``)."""
        resume = self.checked_resume(decisions) if decisions is not None else None
        call = self.call(None, UNSET, None, UNSET, None, UNSET)
        return self.open(
            agent, prompt, call, emit_deltas=True, face=_the_driver, resume=resume, parent=parent
        )

    def cancel_paused(self, agent: object) -> bool:
        """Drop a paused run: pending calls answered "Cancelled by user", turn closed
        (``agent`` holds the paused children it waited on). Queued input its input checks
        never passed is not written (:meth:`RunState.queued_on_cancel`); without a store
        nothing records the cancel, so a warning says how much was not delivered."""
        paused = self.slot.drop_paused()
        if paused is None:
            return False
        cancel_subruns(agent, paused.subruns, None, "cancelled")  # the children it waited on
        _written, kept = paused.queued_on_cancel()
        if kept:  # never its content: nothing checked it
            logger.warning(
                "run_id=<%s>, blocks=<%d> | paused run cancelled: its queued input was not "
                "delivered (its input guardrails never passed it)",
                paused.run_id,
                sum(len(blocks) for blocks in kept),
            )
        logger.debug("run_id=<%s> | paused run cancelled", paused.run_id)
        return True

    def refresh(self) -> None:
        """Load the history and any paused run from the store (only while idle here)."""
        assert self.binding is not None
        known, synced, generation = self.slot.sync_point()
        record, logged, mirrored = self.binding.read_log(known, synced, generation)
        # Not applied if a run took the agent meanwhile (it loads for itself) or the
        # history was replaced.
        self.slot.apply_record(record, logged, mirrored, unless_changed_since=(known, synced))

    def replace_history(self, messages: list[Message]) -> None:
        """Replace the history while idle (with a store, written there first)."""
        binding = self.binding
        self.slot.replace_history(messages, binding.replace_log if binding is not None else None)

    def cancel_stored(self, reason: str | None, mode: CancelMode) -> bool:
        """Cancel the conversation's current run, wherever it runs (its owner's watcher
        hears it) or is paused (cancelled at once), through the store."""
        assert self.binding is not None
        current = self.binding.current_run()
        if current is None:
            return False
        cancelled = self.binding.cancel_run(current.state.run_id, reason, mode)
        if self.slot.driver is None:
            self.refresh()
        return cancelled

    def call(
        self,
        timeout: float | None,
        cache: CacheMode | None | Unset,
        token: CancelToken | None,
        deps: Any,
        params: Mapping[str, Any] | None,
        output_type: object,
        usage_limits: object = UNSET,
        guardrails: object = None,
    ) -> Call:
        """One call's options, checked (``UsageError`` naming the first bad one)."""
        if token is not None and not isinstance(token, CancelToken):
            raise UsageError(f"cancel= takes a CancelToken, got {type(token).__name__}")
        settings = call_settings(
            self.settings,  # the tool sources' tools are read by the run: run_tools
            cache=cache,
            deps=deps,
            params=params,
            output_type=output_type,
            usage_limits=usage_limits,
            guardrails=guardrails,
        )
        return Call(settings, timeout, token)

    def with_source_tools(self, cancel: CancelScope | None = None) -> RunSettings:
        """The agent's settings with its tool sources' (MCP servers') tools as they list
        them now: a source connects at the first run, and a changed list is picked up at
        the next (``agent.tools`` shows the last run's); a cancel of ``cancel`` ends a
        connect (``CancelledError``)."""
        if not self.tool_sources:
            return self.settings
        tools = with_sources(self.own_tools, self.tool_sources, cancel)
        if tools != self.settings.tools:
            specs = tuple(t.spec for t in tools.values())
            self.settings = replace(self.settings, tools=tools, tool_specs=specs)
        return self.settings

    def run_tools(self, scope: CancelScope) -> dict[str, Tool[Any]]:
        """A run's tools, read by the run itself before its first step, under its scope: a
        tool source that connects (or never answers) is stopped by ``cancel()``,
        ``timeout=``, a token or a calling run's cancel, as any step is."""
        return self.with_source_tools(scope).tools

    def open(
        self,
        agent: RunAgent,
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
        driver = self.new_run(
            agent,
            prompt,
            call,
            emit_deltas=emit_deltas,
            resume=resume,
            parent=parent,
            run_id=run_id,
        )
        try:
            driver.start()
            return face(driver)
        except BaseException:
            release_surely(driver)
            raise

    def new_run(
        self,
        agent: RunAgent,
        prompt: Prompt,
        call: Call,
        *,
        emit_deltas: bool,
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
        parent: CancelScope | None = None,
        run_id: str | None = None,
    ) -> RunDriver:
        """The run of one call, not started (no side effects): ``agent`` is the agent its
        tools see as ``context.agent``."""
        return RunDriver(
            agent=agent,
            slot=self.slot,
            settings=call.settings,
            prompt=prompt,
            timeout=call.timeout,
            cache=call.settings.cache,
            token=call.token,
            emit_deltas=emit_deltas,
            resume=resume,
            binding=self.binding,
            parent=parent,
            run_id=run_id,
            source_tools=self.run_tools if self.tool_sources else None,
        )
