"""What the chat routes do to runs, through the store: start, resume, stop.

:class:`RunControl` starts a conversation's run (or goes on with a paused one) on this
worker, each holding one of the worker's ``max_live_runs`` slots, and publishes it to the
run's event log (:class:`._publish.Publisher`), from where every stream follows it on any
worker. With a ``start`` hook it hands a new run to another process instead
(:meth:`RunControl.hand_off`), and the streams follow that run's log the same way. It stops
runs wherever they run (a paused run has no writer left, so its log is closed here).
Whatever it refuses is a :class:`._http.Refusal` or a :class:`._http.BadRequest`, answered
by the routes (:mod:`._routes`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._decisions import Decision, Deny
from .._prompt import content_blocks
from .._run_log._publish import Publisher, RunSlots
from .._run_log._records import run_record
from .._run_log._stream import DISCONNECT_REASON
from .._run_state import RunSnapshot
from ..errors import (
    ConcurrentInvocationError,
    DecisionValidationError,
    PendingApprovalError,
    RunConflictError,
    UsageError,
)
from ..run._driver import new_run_id
from ..stores import StoredRun
from ..stores._event_log import EventLogStore
from ._follow import close_log
from ._http import BadRequest, Refusal

if TYPE_CHECKING:
    from ..agent import Agent
    from ..run._binding import ConversationBinding

__all__ = ["RETRY_AFTER_S", "RunControl"]

logger = logging.getLogger(__name__)

RETRY_AFTER_S: Final = 5
"""``Retry-After`` of a 503 answered because the worker runs ``max_live_runs``."""
_LOOK_S: Final = 0.5
"""How often a worker that does not recover yet looks for lost runs, while it serves."""
_SINCE_THE_END: Final = 1 << 62  # ``load(since=...)`` past any log: read no message
_STOPPED: Final = {
    "type": "error",
    "error": "Stopped",
    "message": "the answer was stopped before it started",
    "retryable": False,
}
_NOT_STARTED: Final = {
    "type": "error",
    "error": "NotStarted",
    "message": "the answer could not be started; try again",
    "retryable": True,
}


class RunControl:
    """Starts, resumes and stops the runs of one store's conversations for the routes.

    Args:
        make_agent: Builds the agent of a conversation id, on ``store``.
        store: The routes' store.
        timeout: Each run's ``timeout``.
        replay_ttl: Seconds a finished run's log is kept for reconnects.
        max_live_runs: Runs this worker holds at once.
    """

    def __init__(
        self,
        make_agent: Callable[[str], Agent],
        store: EventLogStore,
        *,
        timeout: float | None,
        replay_ttl: float,
        max_live_runs: int,
    ) -> None:
        self._make_agent = make_agent
        self._store = store
        self._timeout = timeout
        self._replay_ttl = replay_ttl
        self._slots = RunSlots(max_live_runs)
        self._recovering = False  # see notice_lost_runs
        self._next_look = 0.0
        # From the routes' creation, not their first request: a worker that serves nothing
        # (started after a crash, or behind a balancer that sends it nothing) takes lost
        # runs over too. Only runs of agents with on_owner_lost="resume" are ever lost, so
        # an app whose agents fail theirs pays one cheap poll.
        self._recover_lost_runs()

    def current_run(self, conversation_id: str) -> StoredRun | None:
        """The conversation's current run, read without its messages."""
        return self._store.load(conversation_id, since=_SINCE_THE_END).run

    def start(self, conversation_id: str, message: Any) -> Publisher:
        """Start a run on the conversation and publish it (409 busy or paused; 503 if
        this worker runs ``max_live_runs`` already)."""
        return self._in_slot(functools.partial(self._start_run, conversation_id, message))

    def hand_off(
        self, conversation_id: str, message: Any, start: Callable[[str, Any, str], object]
    ) -> str:
        """Have another process run a new run of the conversation: open the run's log with
        its ``run`` record, then call ``start(conversation_id, message, run_id)``, which
        must have the run started under that id; return the id. The run's owner appends
        the rest (400 for a message no run takes, 409 busy or paused, 503 if ``start``
        raises: the log then ends with an ``error`` record)."""
        try:
            content_blocks(message, what="message")
        except UsageError as exc:
            raise BadRequest(str(exc)) from None
        current = self.current_run(conversation_id)
        snapshot = None if current is None else self._store.get(current.state.run_id)
        if snapshot is not None and snapshot.status == "running":
            raise Refusal(409, "busy", "this conversation is still answering; stop it or wait")
        if snapshot is not None and snapshot.status == "paused":
            raise Refusal(
                409, "paused", "this conversation waits for a decision", run_id=snapshot.run_id
            )
        run_id = new_run_id()
        self._store.append_events(run_id, [run_record(run_id, conversation_id)], after=0)
        try:
            start(conversation_id, message, run_id)
        except Exception:
            logger.exception("run_id=<%s> | the run could not be handed over", run_id)
            try:
                self._store.append_events(
                    run_id, [dict(_NOT_STARTED)], after=1, keep_s=self._replay_ttl
                )
            except Exception:
                logger.warning("run_id=<%s> | its log could not be closed", run_id, exc_info=True)
            raise Refusal(
                503, "not_started", "the answer could not be started; try again"
            ) from None
        return run_id

    def _take_slot(self) -> RunSlots:
        slot = self._slots.take()
        if slot is None:
            refusal = Refusal(
                503,
                "busy_worker",
                "this worker runs as many answers as it may; try again shortly",
            )
            refusal.response.headers["Retry-After"] = str(RETRY_AFTER_S)
            raise refusal
        return slot

    def _start_run(self, conversation_id: str, message: Any, slot: RunSlots) -> Publisher:
        agent = self._agent(conversation_id)
        try:
            stream = agent.stream(message, timeout=self._timeout)
        except ConcurrentInvocationError:
            raise Refusal(
                409, "busy", "this conversation is still answering; stop it or wait"
            ) from None
        except PendingApprovalError:
            current = self.current_run(conversation_id)
            raise Refusal(
                409,
                "paused",
                "this conversation waits for a decision",
                run_id=None if current is None else current.state.run_id,
            ) from None
        except UsageError as exc:
            raise BadRequest(str(exc)) from None
        run_id = stream.run_id
        return Publisher(
            self._store,
            stream,
            run_id=run_id,
            first=[run_record(run_id, conversation_id)],
            replay_ttl=self._replay_ttl,
            slot=slot,
        )

    def resume(self, snapshot: RunSnapshot, decisions: dict[str, Decision]) -> Publisher:
        """Go on with a paused run here, published after its log's last record (422 for
        decisions the stored approvals refuse, 409 if another decision won, 503 if this
        worker runs ``max_live_runs`` already)."""
        return self._in_slot(functools.partial(self._resume_run, snapshot, decisions))

    def _in_slot(self, begin: Callable[[RunSlots], Publisher]) -> Publisher:
        """``begin(slot)`` holding one of the worker's slots, given back if it fails."""
        slot = self._take_slot()
        try:
            return begin(slot)
        except BaseException:
            slot.give()
            raise

    def _resume_run(
        self, snapshot: RunSnapshot, decisions: dict[str, Decision], slot: RunSlots
    ) -> Publisher:
        run_id = snapshot.run_id
        conversation_id = snapshot.conversation_id or ""
        agent = self._agent(conversation_id)
        pending = {approval.id: approval for approval in agent.pending_approvals}
        try:
            stream = agent.resume_stream(decisions, timeout=self._timeout)
        except DecisionValidationError as exc:
            raise Refusal(422, "invalid_decision", str(exc), problems=list(exc.problems)) from None
        except (RunConflictError, ConcurrentInvocationError, UsageError):
            raise Refusal(409, "conflict", "the run was resumed or cancelled meanwhile") from None
        if stream.run_id != run_id:  # the conversation's paused run is another one
            stream.close()
            raise Refusal(409, "conflict", "the run was resumed or cancelled meanwhile")
        denied = {
            pending[approval_id].tool_use["toolUseId"]
            for approval_id, decision in decisions.items()
            if approval_id in pending
            and (decision is False or isinstance(decision, Deny))
            and pending[approval_id].run_id in (None, run_id)  # a sub-agent's is its own
        }
        logged = self._store.read_events(run_id)
        return Publisher(
            self._store,
            stream,
            run_id=run_id,
            first=[] if logged else [run_record(run_id, conversation_id)],
            after=logged[-1].seq if logged else 0,
            cycle=snapshot.cycle,
            denied=denied,
            replay_ttl=self._replay_ttl,
            slot=slot,
        )

    def _agent(self, conversation_id: str) -> Agent:
        agent = self._make_agent(conversation_id)
        binding: ConversationBinding | None = getattr(agent, "_binding", None)
        if binding is None or not binding.holds(self._store):
            raise UsageError(
                "make_agent must build agents on the routes' store "
                "(Agent(..., store=store, conversation_id=conversation_id))"
            )
        if not self._recovering and binding.on_owner_lost == "resume":
            self._recover_lost_runs()
        return agent

    def notice_lost_runs(self, following: str | StoredRun | None = None) -> None:
        """At each request: this worker takes lost runs over too (a worker died running a
        run of an agent with ``on_owner_lost="resume"``), even if it has served none of
        its own yet (a worker started after the crash). It starts once the store has a
        lost run (looked at most every :data:`_LOOK_S`), or once a stream here follows the
        running run of an agent that resumes (``following``: its conversation): the
        browser reconnecting after its worker died, before the lease has run out; the
        caller's :meth:`current_run` of it, if it has read it already)."""
        if self._recovering:
            return
        if following is not None:  # a conversation whose run a stream here follows
            current = self.current_run(following) if isinstance(following, str) else following
            if current is not None and current.state.on_owner_lost == "resume":
                self._recover_lost_runs()
                return
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + _LOOK_S
        if self._store.lost_runs(limit=1):
            self._recover_lost_runs()

    def _recover_lost_runs(self) -> None:
        """The app's agents resume runs whose worker died: from now on (while these routes
        exist) this worker takes them over too, in one of its live-run slots."""
        from ..stores._recovery import keep_recovering

        keep_recovering(
            self._store,
            self._make_agent,
            timeout=self._timeout,
            replay_ttl=self._replay_ttl,
            slots=self._slots,
            while_alive=self,
        )
        self._recovering = True

    def stop(self, snapshot: RunSnapshot, reason: str | None) -> bool:
        """Cancel a run; one that was paused has no writer left, so its log is closed here."""
        run_id = snapshot.run_id
        cancelled = self._store.cancel(run_id, reason)
        if cancelled and snapshot.status == "paused":
            logged = self._store.read_events(run_id)
            close_log(self._store, run_id, logged[-1].seq if logged else 0, self._replay_ttl)
        return cancelled

    def handed_off(self, run_id: str) -> str | None:
        """The conversation of a run handed to another process (:meth:`hand_off`) whose
        log only has its ``run`` record: its owner has not started it (or is starting it
        now); ``None`` for any other run."""
        logged = self._store.read_events(run_id)
        if len(logged) != 1 or logged[0].data.get("type") != "run":
            return None
        conversation_id = logged[0].data.get("conversation_id")
        return conversation_id if isinstance(conversation_id, str) else None

    def stop_handed_off(self, run_id: str) -> bool:
        """Stop a run handed off and not started: its log ends here (its streams end at
        once), and its owner, seeing the log closed, never starts it; one that started
        meanwhile finds its log closed under it and ends cancelled. ``False`` if its log
        went on meanwhile (its owner wrote it first: stop it as a started run)."""
        try:
            self._store.append_events(run_id, [dict(_STOPPED)], after=1, keep_s=self._replay_ttl)
        except RunConflictError:
            snapshot = self._store.get(run_id)
            return snapshot is not None and self.stop(snapshot, None)
        return True

    def stop_conversation(self, conversation_id: str, reason: str | None) -> bool:
        """Cancel the conversation's current run, if it has one (:meth:`stop`)."""
        current = self.current_run(conversation_id)
        if current is None:
            return False
        snapshot = self._store.get(current.state.run_id)
        return snapshot is not None and self.stop(snapshot, reason)

    def cancel_if_running(self, run_id: str) -> None:
        """A disconnect with ``on_disconnect="cancel"``: never a paused run."""
        snapshot = self._store.get(run_id)
        if snapshot is not None and snapshot.status == "running":
            self._store.cancel(run_id, DISCONNECT_REASON)
