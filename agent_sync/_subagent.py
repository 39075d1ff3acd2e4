"""Sub-agents: ``Agent.as_tool()``, a tool whose every call is a child run of the calling run.

The agent ``as_tool`` was called on is a *template*: each call runs on a fresh copy of it
(same model, tools and settings; its own history), so one sub-agent tool serves parallel
calls and the template's own ``messages`` are never touched. The child run:

* is a run of its own (its own ``run_id``, on its events and on the ``CancelScope`` its
  model is given), driven by the thread that runs the call: the calling run's own thread
  for a lone call (:meth:`_SubAgentTool.stream_call`: the child's end is the call's end,
  with no hand-off between threads), else a tool worker;
* is part of the caller's cancel tree: its scope is linked to the calling run's
  (:meth:`~agent_sync.cancel.CancelScope.link`), so any cancel of the caller (a thread, a
  timeout, a token, a store cancel from another process) reaches it at once, and
  ``mode="after_turn"`` lets it finish its own turn;
* streams its events into the caller's stream, each wrapped in a
  :class:`~agent_sync.events.SubAgentEvent` (from a worker, through the tool's context);
  its ``Done`` carries its usage, which the caller adds to its own;
* with a store (the caller's, else the template's), is stored there with its
  ``parent_run_id``, under a conversation of its own.

The call's result is the child's final text (or ``result.output`` when the template has an
``output_type``). A child cancelled with its caller answers the call "Cancelled by user";
a child that fails answers it with an error result; a child that handed injected input back
(``result.unchecked_input``) says so after its answer or error (how much, never what). A
child that pauses for approval pauses its caller
(:class:`~agent_sync.tools._batch.SubRunPaused`): the caller's ``result.approvals`` carry
the child's requests, and the caller's resume resumes the child with the decisions for
them (:mod:`agent_sync.run._subruns`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, Protocol

from ._encodable import clean_json
from ._tracing import call_scope
from .cancel import CancelledError, CancelScope
from .errors import ToolError, UsageError
from .events import AgentEvent, Done, SubAgentEvent
from .run import _subruns as subruns
from .run._driver import release_surely
from .tools._batch import SubRunPaused
from .tools.context import ToolContext, _RunBoundAgent
from .tools.decorator import Tool

if TYPE_CHECKING:
    from ._decisions import Decision
    from .result import AgentResult
    from .run._binding import ConversationBinding
    from .run._driver import RunDriver
    from .run._settings import RunSettings

__all__ = ["DEFAULT_MAX_DEPTH", "ConversationIdFactory", "subagent_tool"]

logger = logging.getLogger(__name__)

ConversationIdFactory = Callable[[ToolContext[Any]], str]
"""Names the child's conversation for a call (given the call's context); calls that get
the same name continue the same conversation."""

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "description": "The task or question for the sub-agent."}
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


DEFAULT_MAX_DEPTH: Final = 8
"""How many levels below the top-level run a sub-agent's run may be, by default (its
``as_tool(max_depth=...)``): 1 is a child of the run a user started, 2 a grandchild."""


class _Agent(Protocol):
    """What the sub-agent path uses of an :class:`~agent_sync.Agent`: its package-internal
    verbs (typed here by their shape, so this module needs nothing above it)."""

    @property
    def _settings(self) -> RunSettings: ...

    @property
    def _binding(self) -> ConversationBinding | None: ...

    def _spawn_child(
        self, store: ConversationBinding | None, conversation_id: str | None
    ) -> _Agent: ...

    def _open_child(
        self,
        prompt: str | None,
        parent: CancelScope,
        *,
        decisions: Mapping[str, Decision] | None = None,
    ) -> RunDriver: ...


_LINEAGE = "_agent_sync_lineage"  # the attribute of a child's agent: its _Lineage


@dataclass(frozen=True, slots=True)
class _Lineage:
    """Where a child run sits in its tree (an attribute of the child's agent, set at each
    call: a sub-agent's tools are called by its run only)."""

    depth: int
    """1 for a child of the top-level run, 2 for a grandchild..."""
    root: CancelScope
    """The top-level run's scope: each child is linked to it directly as well as to its
    caller's, so its cancel reaches every level at once, whatever the levels between do."""


def _caller(context: ToolContext[Any]) -> _Agent:
    """The agent whose run calls the tool (``context.agent`` is a view of it)."""
    view = context.agent
    agent: _Agent = view._agent if isinstance(view, _RunBoundAgent) else view
    return agent


def subagent_tool(
    template: _Agent,
    *,
    name: str,
    description: str,
    conversation_id: ConversationIdFactory | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Tool[Any]:
    """The tool ``template.as_tool(...)`` returns (see :meth:`agent_sync.Agent.as_tool`)."""
    if not isinstance(description, str) or not description.strip():
        raise UsageError("as_tool needs a description: the model reads it to decide when to call")
    if conversation_id is not None and not callable(conversation_id):
        raise UsageError("conversation_id must be a callable (context) -> str, or None")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise UsageError(f"max_depth must be an int >= 1, got {max_depth!r}")
    runner = _SubAgent(template, conversation_id, name=name, max_depth=max_depth)
    return _SubAgentTool(runner, name, description)


_CALL_HINTS: dict[str, Any] = {"prompt": str, "context": ToolContext, "return": Any}


def _wrapper_maker() -> Callable[[str, str, str, AgentEvent], SubAgentEvent]:
    """``SubAgentEvent(run_id=, parent_run_id=, tool_use_id=, event=)`` at half the cost:
    every event of a child is wrapped once per level, so a frozen dataclass's ``__init__``
    (a keyword parse and ``object.__setattr__`` per field) was 40% of carrying an event up
    a level. The same instance, its slots set directly."""
    names = ("run_id", "parent_run_id", "tool_use_id", "event")
    if {field.name for field in fields(SubAgentEvent)} != set(names):  # a field added
        raise RuntimeError("SubAgentEvent's fields changed: update _subagent._wrapper_maker")
    set_run, set_parent, set_call, set_event = (getattr(SubAgentEvent, n).__set__ for n in names)
    new = object.__new__

    def wrap(run_id: str, parent_run_id: str, tool_use_id: str, event: AgentEvent) -> Any:
        wrapped = new(SubAgentEvent)
        set_run(wrapped, run_id)
        set_parent(wrapped, parent_run_id)
        set_call(wrapped, tool_use_id)
        set_event(wrapped, event)
        return wrapped

    return wrap


_wrapped = _wrapper_maker()


class _SubAgentTool(Tool[Any]):
    """A sub-agent's tool: callable as any tool (in a worker thread, its events sent
    through the context), or streamed by the calling run's own thread
    (:meth:`stream_call`): a lone call is, so the child's end is the call's end, with no
    thread hop between the child's loop and its caller's."""

    def __init__(self, runner: _SubAgent, name: str, description: str) -> None:
        def call(prompt: str, context: ToolContext[Any]) -> Any:
            return runner.call(prompt, context)

        call.__annotations__ = _CALL_HINTS  # resolved: no text to evaluate at each as_tool()

        super().__init__(
            call, name=name, description=description, input_schema=_INPUT_SCHEMA, namespace={}
        )
        self._runner = runner

    @property
    def inline_grace(self) -> float:
        """How long the child may take to end once cancelled: its tools' grace period. A
        caller whose own grace period is shorter runs the call in a worker instead (its
        grace period then bounds its wait, as for any tool)."""
        return float(self._runner._template._settings.tool_grace_period)

    def stream_call(
        self, arguments: dict[str, Any], context: ToolContext[Any]
    ) -> Generator[AgentEvent, None, Any]:
        """The call driven by the caller's thread: yields the child's events (wrapped in
        :class:`~agent_sync.events.SubAgentEvent`), returns the call's result."""
        return self._runner.stream(arguments["prompt"], context)


class _SubAgent:
    """Runs one call of a sub-agent tool as a child run of the calling run."""

    def __init__(
        self,
        template: _Agent,
        conversations: ConversationIdFactory | None,
        *,
        name: str,
        max_depth: int,
    ) -> None:
        self._template = template
        self._conversations = conversations
        self._name = name
        self._max_depth = max_depth
        # Without a store, the children of named conversations live here (in memory).
        self._lock = threading.Lock()
        self._named: dict[str, _Agent] = {}

    def call(self, prompt: str, context: ToolContext[Any]) -> Any:
        """The call in a tool worker: the child's events go through the context."""
        emit = context._emit
        events = self.stream(prompt, context)
        try:
            while True:
                try:
                    event = next(events)
                except StopIteration as end:
                    return end.value
                if emit is not None:
                    emit(event)
        finally:
            events.close()  # a no-op once it ended; else the child's run is closed

    def stream(self, prompt: str, context: ToolContext[Any]) -> Generator[AgentEvent, None, Any]:
        """Run the call: yield the child's events, each wrapped in a ``SubAgentEvent``;
        return the call's result (closing this generator closes the child's run)."""
        parent = context._scope
        caller = _caller(context)
        lineage = self._lineage(caller, parent)
        # the child's run span hangs under this call's span, whichever thread runs it
        with call_scope(parent.run_id, context.tool_use):
            if context._resume is not None:  # the child paused for approval: go on with it
                info, decisions = context._resume
                child = self._paused_child(info, caller)
                setattr(child, _LINEAGE, lineage)
                driver = child._open_child(None, parent, decisions=decisions)
            else:
                child = self._child(context, caller)
                setattr(child, _LINEAGE, lineage)
                driver = child._open_child(prompt, parent)
        result: AgentResult | None = None
        run_id, tool_use_id = driver.run_id, context.tool_use["toolUseId"]
        parent_run_id = parent.run_id or ""
        events = driver.events()
        # one hop from the top-level run, whatever the levels between do
        unlink = lineage.root.link(driver._scope) if lineage.root is not parent else None
        try:
            for event in events:
                yield _wrapped(run_id, parent_run_id, tool_use_id, event)
                if type(event) is Done:
                    result = event.result
        finally:
            if unlink is not None:
                unlink()
            events.close()  # a no-op once it ended; else the child's run is closed (cancelled)
            release_surely(driver)
        assert result is not None
        if result.stop_reason == "paused":  # the caller pauses with it
            binding = child._binding
            if binding is None:
                subruns.hold(caller, result.run_id, child)
            conversation = binding.conversation_id if binding is not None else None
            raise SubRunPaused(result.run_id, conversation, result.approvals, result.usage)
        return _answer(result, parent.cancel_requested)

    def _lineage(self, caller: _Agent, parent: CancelScope) -> _Lineage:
        """Where a child of ``caller``'s run (scope ``parent``) would sit in its tree, if
        it may start there: within ``max_depth`` and while the tree's top-level run is
        live (nothing of a tree starts once its top-level run is over or cancelled)."""
        above: _Lineage | None = getattr(caller, _LINEAGE, None)
        lineage = (
            _Lineage(depth=1, root=parent)
            if above is None
            else _Lineage(depth=above.depth + 1, root=above.root)
        )
        if lineage.root.cancelled or lineage.root.closed or parent.cancelled or parent.closed:
            raise CancelledError(lineage.root.reason or parent.reason or "cancelled")
        if lineage.depth > self._max_depth:
            raise ToolError(
                f"the sub-agent {self._name!r} was not called: its run would be "
                f"{lineage.depth} levels below the top-level run, past its max_depth of "
                f"{self._max_depth} (as_tool(max_depth=...)); answer without it"
            )
        return lineage

    def _paused_child(self, info: Mapping[str, Any], caller: _Agent) -> _Agent:
        """The agent of a paused child run: loaded from the store, or held by the caller."""
        conversation = info.get("conversation_id")
        binding = self._binding_for(caller)
        if conversation and binding is not None:
            return self._template._spawn_child(binding, str(conversation))
        agent: _Agent | None = subruns.take(caller, str(info.get("run_id")))
        if agent is None:
            raise ToolError(
                f"the sub-agent's paused run {info.get('run_id')} is not held by this process "
                "(without a store, a sub-agent's approval is resumed in the process it "
                "paused in)"
            )
        return agent

    def _binding_for(self, caller: _Agent) -> ConversationBinding | None:
        """Where a child of ``caller``'s run is stored: the caller's store, else the
        template's (with that store's lease), or nowhere."""
        return caller._binding or self._template._binding

    def _child(self, context: ToolContext[Any], caller: _Agent) -> _Agent:
        """The agent a call runs on: a fresh copy of the template, or the one of a named
        conversation."""
        template = self._template
        binding = self._binding_for(caller)
        factory = self._conversations
        if factory is None:
            return template._spawn_child(binding, f"sub_{uuid.uuid4().hex}" if binding else None)
        name = factory(context)
        if not isinstance(name, str) or not name.strip():
            raise ToolError("the sub-agent's conversation_id factory must return a non-empty str")
        if binding is not None:
            return template._spawn_child(binding, name)
        with self._lock:  # in memory: the named conversation's agent lives with the tool
            agent = self._named.get(name)
            if agent is None:
                agent = self._named[name] = template._spawn_child(None, name)
            return agent


def _answer(result: AgentResult, caller_cancelled: bool) -> Any:
    """The call's result from the child's: its output, its text, or the cancel/failure
    (a guardrail's trip in the child: an error naming the guardrail). A child that handed
    injected input back (``result.unchecked_input``) says so after it
    (:func:`_undelivered`): nothing injected into it is lost without a word."""
    undelivered = _undelivered(result)
    if result.stop_reason == "cancelled":
        if caller_cancelled:
            raise CancelledError(result.cancel_reason or "cancelled")
        raise ToolError(f"the sub-agent's run {result.run_id} was cancelled{undelivered}")
    trip = result.guardrail
    if trip is not None:  # the child's trip ends the child; the caller goes on
        raise ToolError(
            f"the sub-agent's run {result.run_id} was stopped by guardrail {trip.name} "
            f"({trip.stage}): {trip.reason}{undelivered}"
        )
    output = getattr(result, "output", None)  # with an output_type: the structured output
    answer = output if output is not None else result.text
    if not undelivered:
        return answer
    piece = (
        {"text": answer}
        if isinstance(answer, str)
        else {"json": clean_json(answer, what="the output", convert=True)}
    )
    return {"content": [piece, {"text": undelivered.lstrip(". ")}]}


def _undelivered(result: AgentResult) -> str:
    """The sentence that tells the caller's model a child handed input back: how much,
    never what (nothing checked it; the child's ``Done``, in the caller's stream and
    its web log, carries it), or ``""``."""
    blocks = len(result.unchecked_input)
    if not blocks:
        return ""
    return (
        f". Input injected into the sub-agent's run {result.run_id} was not delivered to it "
        f"({blocks} block{'s' if blocks > 1 else ''}: its input guardrails never passed it)"
    )
