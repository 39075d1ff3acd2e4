"""What a run commits to its store, and when: :class:`Commits`, the store side of a driver.

A run with a store loads the conversation when it takes the agent, commits its state at
every step boundary, stores a pause before anyone is told of it, and stores its end, where
input the store accepted just before the end is answered (one more model call after the
model's finished turn, after its input checks) or written to the history (any other end,
a guardrail's or a usage limit's stop among them; with input checks, handed back in the
result instead): nothing injected is lost. A run without a store only records
its pause in the agent's slot. Used by the run's driver, in the loop's thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._guardrails._set import STOPPED_TEXT
from .._history import add_user_blocks, close_cancelled_turn
from .._limits import stopped_text
from ..messages import CANCELLED_TEXT, ContentBlock, Message
from ._durable import StoreLink, load_log
from ._slot import check_no_stored_run

if TYPE_CHECKING:
    from .._run_state import RunState
    from ._context import RunContext
    from ._slot import RunSlot

__all__ = ["Commits"]

logger = logging.getLogger(__name__)

_STOPS = frozenset({"guardrail", "usage_limit"})
"""The stop reasons of a ``done`` run that ended at a stop, not at the model's answer."""


def _closing(ctx: RunContext) -> str:
    """The text that closed the run's turn (:func:`~._steps.end_cancelled`'s)."""
    if ctx.stop_reason == "guardrail":
        return STOPPED_TEXT
    if ctx.stop_reason == "usage_limit" and ctx.usage_limit is not None:
        return stopped_text(ctx.usage_limit)
    return CANCELLED_TEXT


class Commits:
    """One run's commits: ``link`` is its store link (``None`` without a store). What is
    committed is the run's context's state, given to each verb (the context calls
    :meth:`pause` and :meth:`checkpoint` itself, from its verbs)."""

    def __init__(self, link: StoreLink | None, slot: RunSlot) -> None:
        self._link = link
        self._slot = slot

    def load(self, link: StoreLink, messages: list[Message]) -> list[Message]:
        """Refresh the history from the store (the run holds the slot: nobody else changes
        it meanwhile) and return the log; refuse if the conversation is busy there."""
        _, synced, generation = self._slot.sync_point()
        record, logged, mirrored = load_log(
            link.store, link.conversation_id, messages, synced, generation
        )
        self._slot.apply_record(record, logged, mirrored)
        check_no_stored_run(record, link.conversation_id)
        return logged

    def pause(self, ctx: RunContext, state: RunState) -> None:
        """Store the pause before anyone is told of it (fail closed). Input the store
        accepted while the run was pausing is carried by the paused state (answered in the
        first user message after the resume), never dropped with the run's queue."""
        version = 0
        link = self._link
        if link is not None:
            while late := link.commit_end(state):
                ctx.inbox.requeue(late)
                state = ctx.state()
            version = link.version
        self._slot.pause(state, version)

    def checkpoint(self, ctx: RunContext) -> None:
        """Commit a running run's state at a step boundary (a failure stops the run)."""
        link = self._link
        if link is not None and ctx.status == "running":
            received = link.received()  # first: the state then holds every inject it counts
            link.commit(ctx.state(), injects_received=received)

    def final(self, ctx: RunContext, *, strict: bool) -> list[ContentBlock]:
        """Commit the end of the run; ``strict``: raise a failure, else log it.

        Input injected through the store that the run has not answered yet (accepted just
        before the end) stops the end of a finished turn (``done``, the model's answer):
        nothing is committed and it is returned, for one more model call
        (``RunContext.reopen``: checked first, with input checks). Any other end writes it
        to the history first, its turn closed again as the run closed it (nothing injected
        is lost): a cancel, a failure, and a stop (a guardrail or a usage limit: ``done``,
        but it never goes on, or it would answer what its stop refused). A cancelled or
        stopped run with input checks hands it back in its result instead
        (``RunContext.hand_back``: nothing checks it now, and unchecked input is never
        committed); a failed one keeps it in its trailing user message, which the next
        call checks as its prompt."""
        link = self._link
        if link is None or link.ended or ctx.status in ("running", "paused"):
            return []
        going_on = False
        try:
            while True:
                state = ctx.state()
                late = link.commit_end(state)
                if not late:
                    self._slot.mark_synced(state.history_start + len(state.messages))
                    return []
                if ctx.status == "done" and ctx.stop_reason not in _STOPS:
                    going_on = True
                    return late
                if ctx.status == "failed":  # a failed one keeps it as its last user message
                    add_user_blocks(ctx.messages, late)  # (the next call checks it: its prompt)
                elif kept := ctx.hand_back(late):  # cancelled or stopped: unless unchecked,
                    close_cancelled_turn(ctx.messages, queued=kept, closing_text=_closing(ctx))
        except Exception:
            if strict:
                raise
            logger.warning("run_id=<%s> | could not store the end of the run", ctx.run_id)
            return []
        finally:
            if not going_on:
                link.close()
