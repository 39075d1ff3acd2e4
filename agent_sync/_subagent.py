"""Sub-agents: ``Agent.as_tool()``, a tool whose every call is a child run of the calling run.

The agent ``as_tool`` was called on is a *template*: each call runs on a fresh copy of it
(same model, tools and settings; its own history), so one sub-agent tool serves parallel
calls and the template's own ``messages`` are never touched. The child run:

* is a run of its own (its own ``run_id``, on its events and on the ``CancelScope`` its
  model is given), started in the tool's worker thread;
* is part of the caller's cancel tree: its scope is linked to the calling run's
  (:meth:`~agent_sync.cancel.CancelScope.link`), so any cancel of the caller (a thread, a
  timeout, a token, a store cancel from another process) reaches it at once, and
  ``mode="after_turn"`` lets it finish its own turn;
* streams its events into the caller's stream, each wrapped in a
  :class:`~agent_sync.events.SubAgentEvent` (through the tool's context, from the worker
  thread to the loop's); its ``Done`` carries its usage, which the caller adds to its own;
* with a store (the caller's, else the template's), is stored there with its
  ``parent_run_id``, under a conversation of its own.

The call's result is the child's final text (or ``result.output`` when the template has an
``output_type``). A child cancelled with its caller answers the call "Cancelled by user";
a child that fails answers it with an error result. A gated tool in a child is denied with
a clear reason (approvals are not carried across the boundary yet).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._decisions import Deny
from .cancel import CancelledError
from .errors import ToolError, UsageError
from .events import Done, SubAgentEvent
from .tools.context import ToolContext
from .tools.decorator import Tool

if TYPE_CHECKING:
    from .agent import Agent
    from .result import AgentResult

__all__ = ["ConversationIdFactory", "subagent_tool"]

logger = logging.getLogger(__name__)

ConversationIdFactory = Callable[[ToolContext], str]
"""Names the child's conversation for a call (given the call's context); calls that get
the same name continue the same conversation."""

APPROVAL_DENIED = (
    "approval is not available inside a sub-agent: a tool that requires approval cannot "
    "run in a sub-agent's run"
)
"""The reason a gated call in a child run is denied with."""

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "description": "The task or question for the sub-agent."}
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


def subagent_tool(
    template: Agent,
    *,
    name: str,
    description: str,
    conversation_id: ConversationIdFactory | None = None,
) -> Tool[Any]:
    """The tool ``template.as_tool(...)`` returns (see :meth:`agent_sync.Agent.as_tool`)."""
    if not isinstance(description, str) or not description.strip():
        raise UsageError("as_tool needs a description: the model reads it to decide when to call")
    if conversation_id is not None and not callable(conversation_id):
        raise UsageError("conversation_id must be a callable (context) -> str, or None")
    runner = _SubAgent(template, conversation_id)

    def call(prompt: str, context: ToolContext) -> Any:
        return runner.call(prompt, context)

    return Tool(call, name=name, description=description, input_schema=_INPUT_SCHEMA)


class _SubAgent:
    """Runs one call of a sub-agent tool as a child run of the calling run."""

    def __init__(self, template: Agent, conversations: ConversationIdFactory | None) -> None:
        self._template = template
        self._conversations = conversations
        # Without a store, the children of named conversations live here (in memory).
        self._lock = threading.Lock()
        self._named: dict[str, Agent] = {}

    def call(self, prompt: str, context: ToolContext) -> Any:
        parent = context._scope
        child = self._child(context)
        tool_use_id = context.tool_use["toolUseId"]
        emit = context._emit
        result: AgentResult | None = None
        deny: dict[str, Deny | bool] | None = None
        while True:
            if deny is None:
                stream = child._open_child(prompt, parent)
            else:
                stream = child._open_child(None, parent, deny=deny)
            with stream:
                for event in stream:
                    if emit is not None:
                        emit(
                            SubAgentEvent(
                                run_id=stream.run_id,
                                parent_run_id=parent.run_id or "",
                                tool_use_id=tool_use_id,
                                event=event,
                            )
                        )
                    if type(event) is Done:
                        result = event.result
            assert result is not None
            if result.stop_reason != "paused":
                break
            # Approvals stop at the boundary: each gated call is denied with the reason.
            deny = {request.id: Deny(APPROVAL_DENIED) for request in result.approvals}
        return _answer(result, parent.cancel_requested)

    def _child(self, context: ToolContext) -> Agent:
        """The agent a call runs on: a fresh copy of the template, or the one of a named
        conversation."""
        template = self._template
        stored = context._store or template._stored()
        factory = self._conversations
        if factory is None:
            return template._spawn(stored, f"sub_{uuid.uuid4().hex}" if stored else None)
        name = factory(context)
        if not isinstance(name, str) or not name.strip():
            raise ToolError("the sub-agent's conversation_id factory must return a non-empty str")
        if stored is not None:
            return template._spawn(stored, name)
        with self._lock:  # in memory: the named conversation's agent lives with the tool
            agent = self._named.get(name)
            if agent is None:
                agent = self._named[name] = template._spawn(None, name)
            return agent


def _answer(result: AgentResult, caller_cancelled: bool) -> Any:
    """The call's result from the child's: its output, its text, or the cancel/failure."""
    if result.stop_reason == "cancelled":
        if caller_cancelled:
            raise CancelledError(result.cancel_reason or "cancelled")
        raise ToolError(f"the sub-agent's run {result.run_id} was cancelled")
    output = getattr(result, "output", None)  # with an output_type: the structured output
    if output is not None:
        return output
    return result.text
