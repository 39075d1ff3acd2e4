"""Paused sub-agent runs a caller waits on (``agent.as_tool()`` across an approval).

A child run that pauses for approval pauses its caller: the caller's state names it in
``subruns`` (``toolUseId`` -> ``{"run_id", "conversation_id", "requests"}``). With a store
the child's paused state is in the store (any process resumes it from there); without one
its agent is held by the agent of its caller (:func:`hold`), in this process, until the
caller resumes or cancels it: dropping a paused lead frees its whole paused tree with it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..messages import CANCELLED_TEXT, ToolResult
from ..tools._batch import SubRunPaused, ToolBatch, ToolCall
from ..tools._results import error_result

if TYPE_CHECKING:
    from ._binding import ConversationBinding
    from ._context import RunContext

__all__ = ["cancel_subruns", "child_usage", "held", "hold", "round_paused", "take"]

logger = logging.getLogger(__name__)

_HELD = "_agent_sync_held_subruns"  # the attribute of a caller's agent holding its children
_lock = threading.Lock()  # creating a holder (each holder has its own lock)


class _Held:
    """The paused children (no store) of one caller's agent: child run id -> its agent.

    An attribute of that agent, so the children live as long as their caller: nothing
    module-wide keeps them. It names its owner (weakly): a copy of the agent (a sub-agent
    call's, ``Agent._spawn_child``) gets a holder of its own, never its template's.
    """

    __slots__ = ("agents", "lock", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = weakref.ref(owner)
        self.lock = threading.Lock()
        self.agents: dict[str, Any] = {}


def _held_by(owner: object) -> _Held:
    with _lock:
        held: _Held | None = vars(owner).get(_HELD)
        if held is None or held.owner() is not owner:
            held = _Held(owner)
            setattr(owner, _HELD, held)
        return held


def hold(owner: object, run_id: str, agent: Any) -> None:
    """Keep a paused child's agent (no store) with ``owner``, the agent of the run that
    called it, until that run resumes or cancels it."""
    held = _held_by(owner)
    with held.lock:
        held.agents[run_id] = agent


def take(owner: object, run_id: str) -> Any:
    """The agent of ``owner``'s paused child run ``run_id``, no longer held, or ``None``."""
    held = _held_by(owner)
    with held.lock:
        return held.agents.pop(run_id, None)


def held(owner: object) -> list[str]:
    """The run ids of the paused children ``owner`` holds (for checks and logs)."""
    held = _held_by(owner)
    with held.lock:
        return list(held.agents)


def cancel_subruns(
    owner: object,
    subruns: Mapping[str, Mapping[str, Any]],
    binding: ConversationBinding | None,
    reason: str | None,
) -> None:
    """Cancel the paused children a cancelled caller (``owner``, its agent) waited on
    (cancel is a tree): each child's pending calls are answered "Cancelled by user" and
    its turn closed. Never raises (a cancel path): a failure is logged."""
    for info in subruns.values():
        run_id = str(info.get("run_id", ""))
        try:
            agent = take(owner, run_id)
            if agent is not None:
                agent.cancel(reason)
            elif binding is not None:
                binding.cancel_run(run_id, reason)
        except Exception:
            logger.warning("run_id=<%s> | could not cancel a paused sub-agent run", run_id)


def round_paused(
    ctx: RunContext,
    calls: list[ToolCall],
    batch: ToolBatch,
    results: list[ToolResult],
    *,
    completed: bool,
) -> dict[str, SubRunPaused]:
    """The calls whose sub-agent paused for approval, by ``toolUseId``, if the round
    pauses with them (it ran to its end, uncancelled): then the round's finished results
    and the paused children are recorded for the resume. Otherwise the paused children
    are cancelled and their calls answered "Cancelled by user" (in ``results``)."""
    if not batch.paused:
        return {}
    paused = {calls[index].tool_use["toolUseId"]: child for index, child in batch.paused.items()}
    if not completed or ctx.scope.cancelled:
        subruns = {key: {"run_id": child.run_id} for key, child in paused.items()}
        cancel_subruns(ctx.agent, subruns, ctx.binding, ctx.scope.reason or "cancelled")
        for index in batch.paused:
            results[index] = error_result(calls[index].tool_use["toolUseId"], CANCELLED_TEXT)
        return {}
    ctx.hold_round(
        {r["toolUseId"]: r for r in results if r["toolUseId"] not in paused},
        {
            key: {
                "run_id": child.run_id,
                "conversation_id": child.conversation_id,
                "requests": [request.id for request in child.approvals],
                "usage": child.usage,
            }
            for key, child in paused.items()
        },
    )
    return paused


def child_usage(ctx: RunContext, tool_use_id: str, usage: Mapping[str, int]) -> dict[str, int]:
    """What a child's final usage adds to its caller's: all of it, or for a child resumed
    after a pause, what it used since (the rest was counted when it paused)."""
    before = ctx.subruns.get(tool_use_id, {}).get("usage") if ctx.subruns else None
    if not before:  # the usual case (no pause): all of it, at no cost on a tree's way out
        return dict(usage)
    return {key: int(value) - int(before.get(key, 0)) for key, value in usage.items()}
