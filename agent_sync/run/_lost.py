"""A lost run taken over: the state it goes on from in its new worker.

A run with ``on_owner_lost="resume"`` commits a model call's message and each tool result
before anyone is told of it, so its last committed state holds all a follower saw but the
model call or tool calls in flight when its worker died. The model call is made again (the
state says ``next_step == "model"``). A tool call in flight is run again if its tool is
idempotent (``@tool(idempotent=True)``); any other is answered with the error result a
store writes for a dead worker's calls ("worker stopped; effect unknown"), as a result
the round already holds, so it is not run. A gated call keeps the reviewer's decision the
state holds for it (``RunState.decisions``): approved, it is not asked again; denied, it
never ran, so it is answered with the reason again, whatever its tool.

A run lost at the approval step goes on from the tool step: the approval step asks for the
calls the tool step found gated (held in the run's context, not in its state: the requests
are stored with the pause), so from the state alone it would pause asking for nothing. The
tool step finds them again (a call with a kept decision is not asked again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .._decisions import Deny
from .._run_state import RunState
from ..stores._rules import WORKER_STOPPED_TEXT
from ..tools._results import error_result
from ..tools.decorator import Tool

__all__ = ["in_flight_answers", "resumed_state"]


def resumed_state(state: RunState, tools: Mapping[str, Tool[Any]]) -> RunState:
    """``state`` with its in-flight calls that may not run again answered (see the module
    docstring); unchanged when it was not in a tool round."""
    if state.status == "running" and state.next_step == "approval":
        state = replace(state, next_step="tools")  # it asks again (see the module docstring)
    answers = in_flight_answers(state, tools)
    if not answers and not state.subruns:
        return state
    # a sub-agent's child run ended with its dead worker (a child is never resumed on its own)
    return replace(state, round_results=(*state.round_results, *answers), subruns={})


def in_flight_answers(state: RunState, tools: Mapping[str, Tool[Any]]) -> list[Any]:
    """The "worker stopped; effect unknown" results of the state's pending calls that have
    no committed result and are not idempotent (an unknown tool never ran: it is run, to
    be answered as such; a denied call never ran either: answered with its reason)."""
    if state.status != "running" or state.next_step != "tools":
        return []
    answered = {result["toolUseId"] for result in state.round_results}
    answers = []
    for tool_use in state.pending_tool_uses:
        tool_use_id = tool_use["toolUseId"]
        if tool_use_id in answered:
            continue
        tool = tools.get(tool_use["name"])
        if tool is None or tool.idempotent or isinstance(state.decisions.get(tool_use_id), Deny):
            continue
        answers.append(error_result(tool_use_id, WORKER_STOPPED_TEXT))
    return answers
