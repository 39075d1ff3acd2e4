"""What the steps of a run work on: the run's live state (its settings are
:class:`~agent_sync.run._settings.RunSettings`).

:class:`RunContext` is one run's state in memory: the conversation it appends to, its cancel
scope and inbox, counters, and the fields :meth:`~agent_sync.run.Run.snapshot` reads.

Thread rules: only the loop's thread writes a context. Other threads read single attributes
(``status``, ``phase``, ``cycle``, ``pending_tool_ids``, ``usage``), each written with one
store of an immutable value (a str, an int, a tuple, a dict never changed after it is
stored), so a reader sees one value or the next, never a torn one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._decisions import ApprovalRequest, Approve, Deny
from .._run_state import RunPhase, RunSnapshot, RunState, RunStatus, Step, StepName
from ..cancel import CancelledError
from ..messages import Message, ToolResult, ToolUse, Usage
from ..models.base import CacheMode
from ..result import AgentMetrics, AgentResult
from ._hooks import NO_HOOKS, HookRunner
from ._inbox import Inbox
from ._output import NO_OUTPUT, output_json, result_output
from ._settings import RunSettings

if TYPE_CHECKING:
    from ..cancel import CancelScope
    from ._binding import ConversationBinding

__all__ = ["RunContext", "RunSettings"]


class RunContext:
    """One run's state in memory. Written by the loop's thread only (see module docstring)."""

    def __init__(
        self,
        settings: RunSettings,
        messages: list[Message],
        scope: CancelScope,
        *,
        run_id: str,
        history_start: int,
        emit_deltas: bool,
        cache: CacheMode | None,
        agent: object = None,
        hooks: HookRunner = NO_HOOKS,
        parent_run_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.agent = agent  # what a tool's context.agent views (bound to this run)
        self.messages = messages  # the agent's history: the run appends to it in place
        self.scope = scope
        self.run_id = run_id
        self.history_start = history_start
        self.emit_deltas = emit_deltas
        self.cache = cache
        self.hooks = hooks
        self.parent_run_id = parent_run_id  # a sub-agent's run: the run that called it
        # the agent's conversation in its store, if any: sub-agents' runs are stored there
        self.binding: ConversationBinding | None = None
        self.inbox = Inbox()
        # what snapshot() reads: each written with one store of an immutable value
        self.status: RunStatus = "running"
        self.phase: RunPhase = "idle"
        self.cycle = 0
        self.pending_tool_ids: tuple[str, ...] = ()
        self.usage: Usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        self.next_step: StepName | None = "model"
        # filled as the run goes
        self.steps: list[Step] = []
        self.result: AgentResult | None = None
        self.stop_reason: str | None = None
        self.last_stop_reason: str | None = None  # of the last model call
        self.invalid_tool_inputs: dict[str, str] = {}  # of the last model call
        self.decisions: dict[str, Approve | Deny] = {}  # toolUseId -> a human's answer
        self.approvals: tuple[ApprovalRequest, ...] = ()  # while paused
        self.awaiting: tuple[ToolUse, ...] = ()  # gated calls without a decision
        # the round's finished calls' results (kept while it pauses on a sub-agent's
        # approvals, and committed as each ends in a resumable run), and toolUseId ->
        # the paused child run ({"run_id", "conversation_id", "requests"})
        self.round_results: dict[str, ToolResult] = {}
        self.subruns: dict[str, dict[str, Any]] = {}
        self.commit_pause: Callable[[RunState], None] | None = None  # set by the driver
        # a run that may be resumed after its worker dies (on_owner_lost="resume"): commits
        # what a follower is about to see (a model call's message, a tool's result) first
        self.keep_progress: Callable[[], None] | None = None  # set by the driver
        self.tool_calls = 0
        self.cost = 0.0  # dollars of this run's model calls (counted with cost_usd only)
        self.usage_limit: str | None = None  # the usage limit passed, once one is
        self.retries = 0
        self.model_ids: list[str] = []  # per answered model call (run/_model_step.py)
        self.started = time.perf_counter()
        self.ended_at: float | None = None
        self.model_time = 0.0
        self.tool_time = 0.0
        self.first_token: float | None = None
        # structured output (run/_output.py): the answer, as JSON, and re-asks made
        self.output: Any = NO_OUTPUT
        self.output_json: Any = NO_OUTPUT  # made when a state is asked for
        self.output_attempts = 0

    def elapsed(self) -> float:
        """Seconds since the run started, or its length once it is over."""
        end = self.ended_at if self.ended_at is not None else time.perf_counter()
        return end - self.started

    def add_usage(self, usage: Usage | None) -> None:
        """Add one call's usage (a new dict: readers may hold the old one)."""
        if usage is None:
            return
        total: dict[str, int] = dict(self.usage)  # type: ignore[arg-type]
        for key, value in usage.items():
            total[key] = total.get(key, 0) + int(value)  # type: ignore[call-overload]
        self.usage = total  # type: ignore[assignment]

    def note_limit(self, limit: str | None) -> None:
        """Record a usage limit a final answer passed (no-op for ``None``): the answer is
        kept and the run ends naming the limit (:meth:`finish`)."""
        if limit is not None:
            self.usage_limit = limit

    def stop_at_limit(self, limit: str | None) -> None:
        """Stop the run at a usage limit (no-op for ``None``): raised as a cancel is, so
        the run ends through the same close (:func:`~._steps.end_cancelled`), which
        tells the two apart by the scope (a real cancel wins)."""
        if limit is not None:
            self.note_limit(limit)
            raise CancelledError(f"usage limit: {limit}")

    def finish(self, status: RunStatus, stop_reason: str, cancel_reason: str | None) -> None:
        """Record the outcome and build the result (the history is already closed); a run
        that ends once a usage limit was passed (its final answer kept) says so."""
        self.ended_at = time.perf_counter()
        if status == "done" and self.usage_limit is not None:
            stop_reason = "usage_limit"
        message = self.messages[-1]  # a run always has its user message, at least
        self.stop_reason = stop_reason
        self.result = AgentResult(
            run_id=self.run_id,
            stop_reason=stop_reason,
            cancel_reason=cancel_reason,
            message=message,
            usage=self.usage,
            metrics=AgentMetrics(
                cycles=self.cycle,
                tool_calls=self.tool_calls,
                retries=self.retries,
                duration_s=self.ended_at - self.started,
                model_duration_s=self.model_time,
                tool_duration_s=self.tool_time,
                time_to_first_token_s=self.first_token,
                model_ids=tuple(self.model_ids),
            ),
            output=result_output(self),
            usage_limit=self.usage_limit if stop_reason == "usage_limit" else None,
        )
        self.pending_tool_ids = ()
        self.phase = "idle"
        self.next_step = None
        self.status = status

    def pause(self, approvals: tuple[ApprovalRequest, ...]) -> None:
        """Record the pause: the run goes on from the tool step once decisions arrive."""
        self.approvals = approvals
        self.inbox.seal()  # queued input stays in the state; new input is refused
        self.finish("paused", "paused", None)
        self.next_step = "tools"
        self.result = replace(self.result, approvals=approvals) if self.result else None

    def fail(self) -> None:
        """Record that the run ended with an exception (no result)."""
        self.ended_at = time.perf_counter()
        self.pending_tool_ids = ()
        self.phase = "idle"
        self.next_step = None
        self.status = "failed"

    def state(self) -> RunState:
        """The run as data (see :class:`~agent_sync.run.RunState`); cheap, any thread."""
        messages = tuple(self.messages[self.history_start :])
        pending: tuple[Any, ...] = ()
        if self.next_step == "tools" and messages and messages[-1]["role"] == "assistant":
            pending = tuple(b["toolUse"] for b in messages[-1]["content"] if "toolUse" in b)
        result = self.result
        round_results, decisions = self.round_results, self.decisions  # one read of each
        owed = {tool_use["toolUseId"] for tool_use in pending} - round_results.keys()
        return RunState(
            run_id=self.run_id,
            status=self.status,
            next_step=self.next_step,
            cycle=self.cycle,
            messages=messages,
            history_start=self.history_start,
            pending_tool_uses=pending,
            queued_inputs=self.inbox.queued(),
            usage=self.usage,
            stop_reason=self.stop_reason,
            cancel_reason=result.cancel_reason if result is not None else None,
            conversation_id=self.settings.conversation_id,
            approvals=self.approvals,
            invalid_tool_inputs=dict(self.invalid_tool_inputs) if pending else {},
            output=output_json(self),
            parent_run_id=self.parent_run_id,
            round_results=tuple(round_results.values()),
            subruns=dict(self.subruns),
            # a sub-agent's run ends with its caller's: only a top-level run is resumed
            on_owner_lost=self.settings.on_owner_lost if self.parent_run_id is None else "fail",
            # kept until the call's result is: a recovered run reuses them (never for
            # another call: only the pending calls' own, by toolUseId)
            decisions={key: d for key, d in decisions.items() if key in owed},
        )

    def snapshot(self) -> RunSnapshot:
        """Where the run is now (see :meth:`~agent_sync.run.Run.snapshot`); any thread."""
        result = self.result
        return RunSnapshot(
            run_id=self.run_id,
            status=self.status,
            phase=self.phase,
            cycle=self.cycle,
            pending_tool_ids=self.pending_tool_ids,
            queued_inputs=self.inbox.queued(),
            usage=self.usage,
            elapsed_s=self.elapsed(),
            conversation_id=self.settings.conversation_id,
            stop_reason=None if result is None else result.stop_reason,
            cancel_reason=None if result is None else result.cancel_reason,
            parent_run_id=self.parent_run_id,
        )

    def restore(self, state: RunState, decisions: dict[str, Approve | Deny]) -> None:
        """Set this new context up to go on from a paused or lost run's state, with the
        decisions: the new ones, and those the state kept (made before its worker died:
        each reused for its own call, never asked again)."""
        self.history_start = state.history_start
        self.cycle = state.cycle
        self.usage = dict(state.usage)  # type: ignore[assignment]
        self.next_step = state.next_step or "tools"
        self.inbox = Inbox([list(blocks) for blocks in state.queued_inputs])
        self.invalid_tool_inputs = dict(state.invalid_tool_inputs)
        self.decisions = {**state.decisions, **decisions}
        self.round_results = {result["toolUseId"]: result for result in state.round_results}
        self.subruns = {key: dict(info) for key, info in state.subruns.items()}
