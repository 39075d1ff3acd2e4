"""The :class:`RunDriver`: one run's driver, and the only owner of its lifecycle.

A run is created by ``Agent.invoke``/``stream``/``steps``, which hold the agent through a
:class:`RunSlot` for as long as the run lives (users see it through the
:class:`~agent_sync.run.Run` handle and ``AgentStream``, never directly: those can be
garbage-collected while the slot holds the driver, and closing them ends the run). The
driver owns everything with a lifetime: the
cancel scope, the deadline, the link to a caller's :class:`~agent_sync.CancelToken`, the
event generator of its steps (:mod:`._steps`), and the release of the slot.

Iteration (``invoke`` draining events, ``stream`` handing them out, ``steps`` grouping them
into :class:`~agent_sync.run.Step`) always goes through :meth:`RunDriver.next_event`, which
orders one iterating thread against :meth:`RunDriver.close` from any other:

* ``close()`` while nobody iterates ends the run itself;
* ``close()`` while another thread is inside ``next()`` cancels the run and returns at once;
  that thread ends the run as soon as its ``next()`` returns.

Either way the run is ended exactly once (:meth:`RunDriver.release`), with one closing
message.

Ctrl-C: ``KeyboardInterrupt`` can land between any two bytecodes of the iterating thread.
So callers take the slot *inside* the ``try`` whose ``finally`` calls
:meth:`RunDriver.release` twice (the second completes whatever an interruption of the first
cut short), and ``release`` ends the run (the steps' own cleanup cancels the scope, wakes
running tools and closes the turn, while the scope is still open), then frees the slot with
one attribute store that no call precedes.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from .._decisions import Approve, Deny
from .._prompt import content_blocks
from ..cancel import CancelledError, CancelMode, CancelScope
from ..errors import ConcurrentInvocationError, PendingApprovalError, UsageError
from ..events import AgentEvent, Done, InputInjected
from ..messages import CANCELLED_TEXT, ContentBlock, Message
from ..result import AgentResult
from ..stores._rules import check_mode
from ._context import RunContext, RunSettings
from ._durable import StoreLink, load_log
from ._history import add_user_blocks, close_turn
from ._hooks import run_hooks
from ._inbox import Inbox
from ._state import RunSnapshot, RunState, RunStatus, Step
from ._steps import STEPS, end_cancelled, end_failed

if TYPE_CHECKING:
    from .._deadlines import Deadline
    from ..cancel import CancelToken
    from ..models.base import CacheMode

__all__ = ["STREAM_CLOSED", "CancelMode", "RunDriver", "RunSlot"]

logger = logging.getLogger(__name__)


STREAM_CLOSED = "stream closed"


class RunSlot:
    """An agent's history and its active run (``None`` or the live :class:`RunDriver`).

    ``lock`` makes "check ``run``, then take it (and read ``messages``)" atomic, and
    replacing ``messages`` only while idle; freeing the slot is one store.
    """

    __slots__ = ("generation", "lock", "messages", "paused", "paused_version", "run", "synced")

    def __init__(self, messages: list[Message]) -> None:
        self.lock = threading.Lock()
        self.messages = messages
        self.run: RunDriver | None = None
        self.paused: RunState | None = None  # a run waiting for approval decisions
        self.paused_version = 0  # its version in the store, if there is one
        self.synced = 0  # with a store: messages[:synced] are the stored log's first ones
        self.generation = 0  # ... of the log's generation (bumped when it is replaced)


def new_run_id() -> str:
    """A fresh, unique run id (``run_`` + 32 hex digits)."""
    return f"run_{uuid.uuid4().hex}"


class RunDriver:
    """One run: its context, lifecycle and iteration. Thread rules in the module docstring;
    the public face is :class:`~agent_sync.run.Run`, whose methods forward here.
    """

    def __init__(
        self,
        *,
        agent: object,
        slot: RunSlot,
        settings: RunSettings,
        prompt: object,
        timeout: float | None,
        cache: CacheMode | None,
        token: CancelToken | None,
        emit_deltas: bool,
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
        link: StoreLink | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise UsageError("timeout must be positive (seconds)")
        self.run_id = resume[0].run_id if resume is not None else new_run_id()
        self._slot = slot
        self._scope = CancelScope(self.run_id)
        self._ctx = RunContext(
            settings,
            slot.messages,  # replaced by the history of the moment the run takes the slot
            self._scope,
            run_id=self.run_id,
            history_start=len(slot.messages),
            emit_deltas=emit_deltas,
            cache=cache,
            agent=agent,
        )
        self._resume = resume
        self._link = link
        if resume is not None:
            _restore(self._ctx, *resume)
        self._ctx.commit_pause = self._commit_pause
        self._prompt = prompt
        self._timeout = timeout
        self._token = token
        self._events: Generator[AgentEvent, None, None] | None = None
        self._deadline: Deadline | None = None
        self._unlink: Callable[[], None] | None = None
        self._guard = threading.Lock()  # orders next() against close() from other threads
        self._iterating = False  # a thread is inside next(self._events)
        self._closing = False  # close() was called: no new next(); an iterator finishes
        self._ended = False  # the run has been ended (exactly once)

    # -- any thread (documented on agent_sync.run.Run, which forwards here) --

    @property
    def status(self) -> RunStatus:
        return self._ctx.status

    @property
    def result(self) -> AgentResult | None:
        return self._ctx.result

    @property
    def state(self) -> RunState:
        return self._ctx.state()

    def snapshot(self) -> RunSnapshot:
        ctx = self._ctx
        result = ctx.result
        return RunSnapshot(
            run_id=self.run_id,
            status=ctx.status,
            phase=ctx.phase,
            cycle=ctx.cycle,
            pending_tool_ids=ctx.pending_tool_ids,
            queued_inputs=ctx.inbox.queued(),
            usage=ctx.usage,
            elapsed_s=ctx.elapsed(),
            conversation_id=ctx.settings.conversation_id,
            stop_reason=None if result is None else result.stop_reason,
            cancel_reason=None if result is None else result.cancel_reason,
        )

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        if check_mode(mode) == "now":
            return self._scope.cancel(reason)
        accepted = self._scope.cancel_after_turn(reason)
        if accepted:
            logger.debug("run_id=<%s> | cancel after the current turn requested", self.run_id)
        return accepted

    def inject(self, content: object) -> None:
        self._ctx.inbox.put(content_blocks(content, what="injected input"))

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
            self._scope.cancel(STREAM_CLOSED)
            return
        try:
            self.release()
        except Exception:  # called from finalisers and other threads: never raise
            logger.warning("closing the run failed", exc_info=True)

    # -- driving (one iterating thread at a time; used by Agent, AgentStream and Run) --

    def next_step(self) -> Step:
        """Run to the end of the next step and return it (``StopIteration`` at the end)."""
        steps = self._ctx.steps
        seen = len(steps)
        while len(steps) == seen:
            self.next_event()  # StopIteration at the end of the run
        return steps[seen]

    @property
    def ended(self) -> bool:
        """Whether the run has been ended and the agent released (or is being)."""
        return self._ended

    def __repr__(self) -> str:
        return f"<RunDriver {self.run_id} {self._ctx.status}>"

    def start(self) -> None:
        """Take the agent, add the prompt, arm the deadline and the token.

        The caller's ``finally`` calls :meth:`release`, whether or not this got as far as
        taking the agent (it only frees a slot that holds this run).
        """
        slot = self._slot
        with slot.lock:
            if slot.run is not None:
                raise ConcurrentInvocationError(
                    "this agent is already running; use one agent per conversation or wait for it"
                )
            if self._resume is None and slot.paused is not None and self._link is None:
                raise PendingApprovalError(
                    "this agent's run waits for approval: answer it with agent.resume(...) "
                    "or drop it with agent.cancel()"
                )
            if self._resume is not None and slot.paused is not self._resume[0]:
                raise ConcurrentInvocationError(
                    "this paused run was resumed or cancelled meanwhile"
                )
            slot.paused = None
            slot.run = self
            messages = slot.messages
        ctx = self._ctx
        ctx.messages = messages
        logged: list[Message] | None = None
        if self._link is not None and self._resume is None:
            logged = self._load_conversation(messages)
        blocks = self._prompt_blocks(messages) if self._resume is None else []
        if blocks:
            if messages and messages[-1]["role"] == "user":
                ctx.history_start = len(messages) - 1
                messages[-1]["content"].extend(blocks)  # e.g. after a model error
            else:
                ctx.history_start = len(messages)
                messages.append({"role": "user", "content": blocks})
        elif self._resume is None:
            ctx.history_start = len(messages) - 1  # answering the trailing user message
        link = self._link
        if link is not None:
            if self._resume is not None:
                link.claim(self._resume[0], slot.paused_version, self)
            else:
                assert logged is not None
                try:
                    link.begin(ctx.state(), self, expected_length=len(logged))
                except BaseException:
                    messages[:] = logged  # another worker won: the prompt was never sent
                    raise
        ctx.hooks = run_hooks(self.run_id, ctx.settings)
        self._events = self._drive(blocks or None)
        if self._timeout is not None:
            from .._deadlines import schedule

            self._deadline = schedule(self._timeout, self._timed_out)
        if self._token is not None:
            self._unlink = self._token._link(self._scope)

    def _prompt_blocks(self, messages: list[Message]) -> list[ContentBlock]:
        prompt = self._prompt
        if prompt is None:
            if not messages or messages[-1]["role"] != "user":
                raise UsageError("prompt is None but the history does not end with a user message")
            return []
        return content_blocks(prompt)

    def _load_conversation(self, messages: list[Message]) -> list[Message]:
        """Refresh the history from the store; refuse if the conversation is busy there."""
        assert self._link is not None
        slot = self._slot  # this run holds it: nobody else changes it meanwhile
        record, logged, slot.synced = load_log(
            self._link.store, self._link.conversation_id, messages, slot.synced, slot.generation
        )
        slot.generation = record.generation
        messages[:] = logged
        stored = record.run
        self._slot.paused, self._slot.paused_version = None, 0  # the store knows better
        if stored is not None:
            if stored.state.status == "paused":
                self._slot.paused, self._slot.paused_version = stored.state, stored.version
                messages[stored.state.history_start :] = list(stored.state.messages)
                raise PendingApprovalError(
                    f"conversation {self._link.conversation_id!r} has a run waiting for "
                    "approval: resume or cancel it first"
                )
            raise ConcurrentInvocationError(
                f"conversation {self._link.conversation_id!r} is running in another worker"
            )
        return logged

    def _commit_pause(self, state: RunState) -> None:
        """Store the pause before anyone is told of it (fail closed). Input the store
        accepted while the run was pausing is carried by the paused state (answered in the
        first user message after the resume), never dropped with the run's queue."""
        version = 0
        link = self._link
        if link is not None:
            while late := link.commit_end(state):
                self._ctx.inbox.requeue(late)
                state = self._ctx.state()
            version = link.version
        self._slot.paused, self._slot.paused_version = state, version

    def _checkpoint(self) -> None:
        """Commit a running run's state at a step boundary (a failure stops the run)."""
        link = self._link
        if link is not None and self._ctx.status == "running":
            link.commit(self._ctx.state())

    def _commit_final(self, *, strict: bool) -> list[ContentBlock]:
        """Commit the end of the run; ``strict``: raise a failure, else log it.

        Input injected through the store that the run has not answered yet (accepted just
        before the end) stops a ``done`` end: nothing is committed and it is returned, for
        one more model call. Any other end writes it to the history first (nothing
        injected is lost)."""
        link = self._link
        if link is None or link.ended or self._ctx.status in ("running", "paused"):
            return []
        going_on = False
        try:
            while True:
                state = self._ctx.state()
                late = link.commit_end(state)
                if not late:
                    self._slot.synced = state.history_start + len(state.messages)  # the log now
                    return []
                if self._ctx.status == "done":
                    going_on = True
                    return late
                _write_late(self._ctx, late)
        except Exception:
            if strict:
                raise
            logger.warning("run_id=<%s> | could not store the end of the run", self.run_id)
            return []
        finally:
            if not going_on:
                link.close()

    def _timed_out(self) -> None:
        self._scope.cancel("timeout")

    def _drive(self, prompt: list[ContentBlock] | None) -> Generator[AgentEvent, None, None]:
        """Run the steps from ``ctx.next_step`` to the end; the last event is ``Done``."""
        ctx = self._ctx
        hooks = ctx.hooks
        hooks.run_started(prompt)
        error: BaseException | None = None
        try:
            step = ctx.next_step
            late: list[ContentBlock] = []  # input the store accepted while the run ended
            while True:
                try:
                    if late:  # answered as input queued at the end is: one more model call
                        _reopen(ctx, late)
                        yield InputInjected(content=tuple(late), run_id=self.run_id)
                        step = ctx.next_step
                    while step is not None:
                        ctx.next_step = step
                        step = yield from STEPS[step](ctx)
                        if step is not None:
                            ctx.next_step = step  # the state names where it goes on
                        self._checkpoint()
                except CancelledError:
                    injected = end_cancelled(ctx)
                    self._commit_final(strict=True)
                    if injected:
                        yield InputInjected(content=tuple(injected), run_id=self.run_id)
                except GeneratorExit:  # the caller abandoned the stream: that is a cancel
                    self._scope.cancel(STREAM_CLOSED)
                    end_cancelled(ctx)
                    self._commit_final(strict=False)
                    raise
                except BaseException as exc:  # a model or hook error, or Ctrl-C
                    error = exc
                    if not isinstance(exc, Exception):
                        # Ctrl-C (KeyboardInterrupt) and the like end the run as cancel() does:
                        # running tools are told, and the turn is closed.
                        self._scope.cancel("interrupted")
                    if self._scope.cancelled:
                        end_cancelled(ctx)
                    else:
                        end_failed(ctx)
                    self._commit_final(strict=False)
                    raise
                late = self._commit_final(strict=True)
                if not late:
                    break
            result = ctx.result
            assert result is not None
            yield Done(result=result, run_id=self.run_id)
        finally:
            hooks.run_ended(
                stop_reason=ctx.stop_reason,
                cancel_reason=ctx.result.cancel_reason if ctx.result else None,
                usage=ctx.usage,
                error=error,
            )

    def drain(self) -> None:
        """Run to the end, discarding the events (``invoke``)."""
        try:
            while True:
                self.next_event()
        except StopIteration:
            return

    def next_event(self) -> AgentEvent:
        """The next event; at the end (or on an error) the run is ended and released."""
        mine = False  # whether this call entered the generator (then it must finish)
        try:
            with self._guard:
                if self._ended or self._closing:
                    raise StopIteration
                if self._iterating:
                    raise UsageError("this run is being iterated by another thread")
                self._iterating = mine = True
            assert self._events is not None
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
                self.release()
            raise

    def release(self) -> None:
        """End the run (once) and free the agent. Callers call it twice from ``finally``."""
        mine = False
        try:
            with self._guard:
                if not self._ended:
                    self._ended = mine = True
            if mine:
                self._end()
        finally:
            if mine:
                try:
                    self._end()  # again: completes whatever a Ctrl-C cut short
                finally:
                    slot = self._slot
                    if slot.run is self:  # no call before the store: Ctrl-C cannot skip it
                        slot.run = None

    def _end(self) -> None:
        """Leave the history valid, close the scope, disarm deadline and token.

        Idempotent; each part runs even if an earlier one is interrupted.
        """
        try:
            events, ctx = self._events, self._ctx
            if events is not None:
                if inspect.getgeneratorstate(events) == inspect.GEN_CREATED:
                    self._scope.cancel(STREAM_CLOSED)  # a stream nobody read: keep the
                    end_cancelled(ctx)  # prompt, close the turn
                    self._commit_final(strict=False)
                # The steps' own cleanup runs here, while the scope is still open: it
                # cancels the scope (waking running tools), waits out their grace period
                # and closes the turn. No-op if the generator has finished.
                events.close()
                if ctx.status != "paused":  # a paused run's calls await their decisions
                    close_turn(ctx.messages, None)  # never leave a toolUse unanswered
                if ctx.ended is None:
                    ctx.ended = time.perf_counter()
        finally:
            try:
                self._scope.close()
            finally:
                try:
                    deadline = self._deadline
                    if deadline is not None:
                        deadline.cancel()
                finally:
                    try:
                        unlink = self._unlink
                        if unlink is not None:
                            unlink()
                    finally:
                        if self._link is not None:
                            self._link.close()


def _reopen(ctx: RunContext, blocks: list[ContentBlock]) -> None:
    """A ``done`` run given input the store accepted before its end was stored: it goes on
    (DESIGN section 5: input queued when the model ends its turn gets one more model call)."""
    ctx.inbox = Inbox()  # the closed one refused local input meanwhile; this one takes more
    add_user_blocks(ctx.messages, blocks)
    ctx.result = None
    ctx.stop_reason = None
    ctx.ended = None
    ctx.next_step = "model"
    ctx.status = "running"


def _write_late(ctx: RunContext, blocks: list[ContentBlock]) -> None:
    """A cancelled or failed run given input the store accepted before its end was stored:
    the input goes into the history (a cancelled run's turn closed again after it)."""
    add_user_blocks(ctx.messages, blocks)
    if ctx.status == "cancelled":
        close_turn(ctx.messages, CANCELLED_TEXT)


def _restore(ctx: RunContext, state: RunState, decisions: dict[str, Approve | Deny]) -> None:
    """Set a new context up to go on from a paused run's state, with the decisions."""
    ctx.history_start = state.history_start
    ctx.cycle = state.cycle
    ctx.usage = dict(state.usage)  # type: ignore[assignment]
    ctx.next_step = state.next_step or "tools"
    ctx.inbox = Inbox([list(blocks) for blocks in state.queued_inputs])
    ctx.invalid_tool_inputs = dict(state.invalid_tool_inputs)
    ctx.decisions = decisions
