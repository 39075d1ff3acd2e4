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
So everything the driver arms has its undo pushed onto one undo stack (:class:`~._undo.Undo`:
the contract of :class:`contextlib.ExitStack`) *before* it is armed (each undo is a no-op
for what was never armed): give the slot back, close the store link, close the scope, end
the steps (the steps' own cleanup cancels the scope, wakes running tools and closes the
turn, while the scope is still open; a run they never ended, not started or cut short at
its start, is ended here as cancelled), close the turn, disarm the deadline, unlink the
token. The release itself (:meth:`RunDriver.release`, :meth:`RunDriver.close`,
:func:`release_surely`) is protected from Ctrl-C
(:func:`~agent_sync._signal_safe.ki_protected`): a Ctrl-C that lands in it, at its entry
included, is raised when it returns, so it always runs to its end. Callers that drive a run
call :func:`release_surely` in their ``finally``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from .._decisions import Approve, Deny
from .._history import close_turn
from .._prompt import content_blocks
from .._run_state import RunSnapshot, RunState, RunStatus, Step
from .._signal_safe import ki_protected
from ..cancel import CancelledError, CancelMode, CancelScope, check_mode
from ..errors import UsageError
from ..events import AgentEvent, Done, InputInjected
from ..messages import ContentBlock, Message
from ..result import AgentResult
from ._binding import ConversationBinding
from ._commits import Commits
from ._context import RunAgent, RunContext, RunSettings
from ._hooks import run_hooks
from ._slot import RunSlot
from ._steps import STEPS, end_cancelled, end_failed
from ._undo import Undo

if TYPE_CHECKING:
    from .._deadlines import Deadline
    from ..cancel import CancelToken
    from ..models.base import CacheMode
    from ..tools.decorator import Tool

__all__ = ["STREAM_CLOSED", "CancelMode", "RunDriver", "release_surely"]

logger = logging.getLogger(__name__)


STREAM_CLOSED = "stream closed"


def new_run_id() -> str:
    """A fresh, unique run id (``run_`` + 32 hex digits: 128 random bits, as a uuid4's
    122, without building a ``UUID``)."""
    return "run_" + os.urandom(16).hex()


class RunDriver:
    """One run: its context, lifecycle and iteration. Thread rules in the module docstring;
    the public face is :class:`~agent_sync.run.Run`, whose methods forward here.
    """

    def __init__(
        self,
        *,
        agent: RunAgent,
        slot: RunSlot,
        settings: RunSettings,
        prompt: object,
        timeout: float | None,
        cache: CacheMode | None,
        token: CancelToken | None,
        emit_deltas: bool,
        resume: tuple[RunState, dict[str, Approve | Deny]] | None = None,
        binding: ConversationBinding | None = None,
        parent: CancelScope | None = None,
        run_id: str | None = None,
        source_tools: Callable[[CancelScope], dict[str, Tool[Any]]] | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise UsageError("timeout must be positive (seconds)")
        # run_id: a new run's id chosen by the caller (agent_sync.celery: the web worker
        # that hands the run over names it); by default a fresh one.
        self.run_id = resume[0].run_id if resume is not None else run_id or new_run_id()
        self._slot = slot
        self._scope = CancelScope(self.run_id)
        link = binding.link() if binding is not None else None
        self._commits = Commits(link, slot)
        self._ctx = RunContext(
            settings,
            slot.messages,  # replaced by the history of the moment the run takes the slot
            self._scope,
            run_id=self.run_id,
            history_start=len(slot.messages),
            emit_deltas=emit_deltas,
            cache=cache,
            agent=agent,
            parent_run_id=parent.run_id if parent is not None else None,
            binding=binding,
            commits=self._commits,
            # see docs/recovery.md
            resumable=binding is not None and parent is None and binding.on_owner_lost == "resume",
        )
        self._parent = parent  # a sub-agent's run: the calling run's scope (cancel is a tree)
        self._resume = resume
        self._link = link
        if resume is not None:
            self._ctx.restore(*resume)
        self._prompt = prompt
        self._timeout = timeout
        self._token = token
        self._events: Generator[AgentEvent, None, None] | None = None
        self._deadline: Deadline | None = None
        self._guard = threading.Lock()  # orders next() against close() from other threads
        self._iterating = False  # a thread is inside next(self._events)
        self._closing = False  # close() was called: no new next(); an iterator finishes
        self._releaser: int | None = None  # the thread that ends the run (exactly once)
        self._undo = Undo()  # what release() undoes, last armed first (module docstring)
        # The agent's tools with its tool sources' (MCP servers, which may connect): read by
        # the run before its first step, under its scope, deadline and token (_drive).
        self._source_tools = source_tools

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
        return self._ctx.snapshot()

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        if check_mode(mode) == "now":
            return self._scope.cancel(reason)
        accepted = self._scope.cancel_after_turn(reason)
        if accepted:
            logger.debug("run_id=<%s> | cancel after the current turn requested", self.run_id)
        return accepted

    def inject(self, content: object) -> None:
        self._ctx.inbox.put(content_blocks(content, what="injected input"))

    @ki_protected
    def close(self) -> None:
        """Cancel the run if it is still going and release the agent.

        Idempotent and safe from any thread; never raises (a failure while ending the run
        is logged; a Ctrl-C that lands in it is raised when it returns). The closing
        message ("Cancelled by user") is written exactly once.
        """
        with self._guard:
            if self._releaser is not None:
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
    def released(self) -> bool:
        """Whether the run has been ended and the agent released (or is being)."""
        return self._releaser is not None

    def __repr__(self) -> str:
        return f"<RunDriver {self.run_id} {self._ctx.status}>"

    def start(self) -> None:
        """Take the agent, add the prompt, arm the deadline and the token.

        The caller's ``finally`` calls :func:`release_surely`, whether or not this got as
        far as taking the agent: each undo is pushed before what it undoes is armed.
        """
        undo, slot, link = self._undo, self._slot, self._link
        undo.push(functools.partial(slot.release, self))
        if link is not None:
            undo.push(link.close)
        undo.push(self._scope.close)
        undo.push(self._close_turn)
        undo.push(self._end_steps)
        resuming = self._resume[0] if self._resume is not None else None
        messages = slot.take(self, resuming=resuming, stored=link is not None)
        ctx = self._ctx
        logged: list[Message] | None = None
        if link is not None and resuming is None:
            logged = self._commits.load(link, messages)
        blocks = self._prompt_blocks(messages) if resuming is None else None
        ctx.take_history(messages, blocks)
        if link is not None:
            if resuming is not None:
                link.claim(resuming, slot.paused_version, self)
            else:
                assert logged is not None
                try:
                    link.begin(ctx.state(), self, expected_length=len(logged))
                except BaseException:
                    messages[:] = logged  # another worker won: the prompt was never sent
                    raise
        ctx.listen(run_hooks(self.run_id, ctx.settings))
        self._events = self._drive(blocks or None)
        if self._timeout is not None:
            from .._deadlines import schedule

            undo.push(self._disarm_deadline)
            self._deadline = schedule(self._timeout, self._timed_out)
        if self._token is not None:
            undo.push(self._token._link(self._scope))
        if self._parent is not None:
            undo.push(self._parent.link(self._scope))

    def _prompt_blocks(self, messages: list[Message]) -> list[ContentBlock]:
        prompt = self._prompt
        if prompt is None:
            if not messages or messages[-1]["role"] != "user":
                raise UsageError("prompt is None but the history does not end with a user message")
            return []
        return content_blocks(prompt)

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
                    if self._source_tools is not None:
                        source_tools, self._source_tools = self._source_tools, None
                        ctx.use_tools(source_tools(self._scope))
                    if late:  # answered as input queued at the end is (the finish step:
                        ctx.reopen(late)  # checked, committed, one more model call)
                        step = ctx.next_step
                    while step is not None:
                        ctx.go_to(step)
                        step = yield from STEPS[step](ctx)  # a step names the next one
                        if step is not None:
                            ctx.go_to(step)  # the state names where it goes on
                        self._commits.checkpoint(ctx)
                except CancelledError:
                    injected = end_cancelled(ctx)
                    self._commits.final(ctx, strict=True)
                    if injected:
                        yield InputInjected(content=tuple(injected), run_id=self.run_id)
                except GeneratorExit:  # the caller abandoned the stream: that is a cancel
                    self._scope.cancel(STREAM_CLOSED)
                    end_cancelled(ctx)
                    self._commits.final(ctx, strict=False)
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
                    self._commits.final(ctx, strict=False)
                    raise
                late = self._commits.final(ctx, strict=True)
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
        """Run to the end, discarding the events (``invoke``: its thread is the run's only
        reader, and no handle can close it)."""
        for _ in self.events():
            pass

    def next_event(self) -> AgentEvent:
        """The next event; at the end (or on an error) the run is ended and released."""
        mine = False  # whether this call entered the generator (then it must finish)
        try:
            with self._guard:
                if self._releaser is not None or self._closing:
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
                release_surely(self)
            raise

    def events(self) -> Generator[AgentEvent, None, None]:
        """The run's events, for a caller that drives the run in its own thread and is its
        only reader (``invoke``, and a sub-agent's call run by its caller's thread): the
        steps' generator itself, with no per-event guard, so each event of a tree crosses a
        level in one frame. Meanwhile ``close()`` from another thread cancels the run. The
        caller's ``finally`` releases the run (:func:`release_surely`) whatever happened."""
        with self._guard:
            if self._releaser is not None or self._closing:
                return
            if self._iterating:
                raise UsageError("this run is being iterated by another thread")
            self._iterating = True
        assert self._events is not None
        try:
            yield from self._events
        finally:
            self._iterating = False  # (its end, an error, or the caller closing this)

    @ki_protected
    def release(self) -> None:
        """End the run (once, by one thread) and free the agent, whatever a Ctrl-C does
        (module docstring)."""
        me = threading.get_ident()
        with self._guard:
            if self._releaser is None:
                self._releaser = me
        if self._releaser == me:
            self._undo.close()

    def _end_steps(self) -> None:
        """Let the steps end the run (the generator's own cleanup; a no-op once it has
        finished); a run they never ended is ended here as cancelled, its prompt kept: a
        stream nobody read, or a run a Ctrl-C cut short before the steps' ``try`` (in the
        hooks' ``run_started``)."""
        events = self._events
        if events is None:
            return
        unread = inspect.getgeneratorstate(events) == inspect.GEN_CREATED
        events.close()
        if self._ctx.status == "running":
            self._scope.cancel(STREAM_CLOSED if unread else "interrupted")
            end_cancelled(self._ctx)
            self._commits.final(self._ctx, strict=False)

    def _close_turn(self) -> None:
        """Never leave a ``toolUse`` unanswered (a paused run's calls await decisions)."""
        ctx = self._ctx
        if self._events is not None and ctx.status != "paused":
            close_turn(ctx.messages, None)
        ctx.mark_ended()

    def _disarm_deadline(self) -> None:
        deadline = self._deadline
        if deadline is not None:
            deadline.cancel()


@ki_protected
def release_surely(driver: RunDriver) -> None:
    """Release ``driver`` from a caller's ``finally``: protected from its first bytecode, so
    a Ctrl-C landing as it is entered cannot leave the agent held (it is raised after)."""
    driver.release()
