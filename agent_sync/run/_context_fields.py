"""One run's fields (:class:`ContextFields`): declared, set up and read here; changed only
by the verbs of :class:`~agent_sync.run._context.RunContext`, in the loop's thread.

Thread rules: other threads read single attributes (``status``, ``phase``, ``cycle``,
``pending_tool_ids``, ``usage``), each written with one store of an immutable value (a str,
an int, a tuple, a dict never changed after it is stored), so a reader sees one value or the
next, never a torn one; :meth:`ContextFields.state` and :meth:`ContextFields.snapshot` are
built from such reads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._decisions import ApprovalRequest, Approve, Deny
from .._guardrails._checks import GuardrailTrip
from .._run_state import RunPhase, RunSnapshot, RunState, RunStatus, Step, StepName
from ..cancel import CancelMode
from ..messages import ContentBlock, Message, ToolResult, ToolUse, Usage
from ..models.base import CacheMode
from ..result import AgentResult
from ._hooks import NO_HOOKS, HookRunner
from ._inbox import Inbox
from ._output import NO_OUTPUT
from ._settings import RunSettings

if TYPE_CHECKING:
    from ..cancel import CancelScope
    from ._binding import ConversationBinding
    from ._commits import Commits

__all__ = ["ContextFields", "RunAgent"]


class RunAgent(Protocol):
    """The agent a run belongs to, as the run sees it: what its tools are given (a view
    bound to the run, ``context.agent``) and what holds its paused children
    (:mod:`._subruns`). :class:`~agent_sync.Agent` has this shape."""

    @property
    def messages(self) -> list[Message]: ...

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool: ...


class ContextFields:
    """One run's fields, private, and what any thread reads of them; only the verbs of
    :class:`~agent_sync.run._context.RunContext`, its one subclass, change them."""

    __slots__ = (
        "_approvals",
        "_awaiting",
        "_commits",
        "_cost",
        "_cycle",
        "_decisions",
        "_ended_at",
        "_first_token",
        "_guardrail",
        "_prompt_undo",
        "_prompt_passed",
        "_history_start",
        "_hooks",
        "_inbox",
        "_invalid_tool_inputs",
        "_tool_input_texts",
        "_last_stop_reason",
        "_messages",
        "_model_ids",
        "_model_time",
        "_next_step",
        "_output",
        "_output_attempts",
        "_output_json",
        "_pending_tool_ids",
        "_phase",
        "_result",
        "_resumable",
        "_retries",
        "_round_results",
        "_settings",
        "_status",
        "_steps",
        "_stop_reason",
        "_subruns",
        "_tool_calls",
        "_tool_time",
        "_unchecked",
        "_usage",
        "_usage_limit",
        "agent",
        "binding",
        "cache",
        "emit_deltas",
        "parent_run_id",
        "run_id",
        "scope",
        "started",
    )

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
        agent: RunAgent,
        parent_run_id: str | None = None,
        binding: ConversationBinding | None = None,
        commits: Commits | None = None,
        resumable: bool = False,
    ) -> None:
        # what the run is given, for its whole life
        self.agent: Final = agent  # what a tool's context.agent views (bound to this run)
        self.scope: Final = scope
        self.run_id: Final = run_id
        self.emit_deltas: Final = emit_deltas
        self.cache: Final = cache
        self.parent_run_id: Final = parent_run_id  # a sub-agent's run: the run that called it
        # the agent's conversation in its store, if any: sub-agents' runs are stored there
        self.binding: Final = binding
        self.started: Final = time.perf_counter()
        # where a pause is stored; with ``resumable`` (on_owner_lost="resume"), where the
        # run commits what a follower is about to see (a model call's message, a tool's
        # result) first (:meth:`keep_progress`)
        self._commits = commits
        self._resumable = resumable and commits is not None
        self._settings = settings
        self._messages = messages  # the agent's history: the run appends to it in place
        self._history_start = history_start
        self._hooks: HookRunner = NO_HOOKS
        # held until the prompt passes the input guardrails (see _inbox), if there are any
        guards = settings.guardrails
        self._inbox = Inbox(held=guards is not None and bool(guards.stage("input")))
        # what snapshot() reads: each written with one store of an immutable value
        self._status: RunStatus = "running"
        self._phase: RunPhase = "idle"
        self._cycle = 0
        self._pending_tool_ids: tuple[str, ...] = ()
        self._usage: Usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        self._next_step: StepName | None = "model"
        # filled as the run goes
        self._steps: list[Step] = []
        self._result: AgentResult | None = None
        self._stop_reason: str | None = None
        self._last_stop_reason: str | None = None  # of the last model call
        self._invalid_tool_inputs: dict[str, str] = {}  # of the last model call
        self._tool_input_texts: dict[str, str] = {}  # of the last model call
        self._decisions: dict[str, Approve | Deny] = {}  # toolUseId -> a human's answer
        self._approvals: tuple[ApprovalRequest, ...] = ()  # while paused
        self._awaiting: tuple[ToolUse, ...] = ()  # gated calls without a decision
        # the round's finished calls' results (kept while it pauses on a sub-agent's
        # approvals, and committed as each ends in a resumable run), and toolUseId ->
        # the paused child run ({"run_id", "conversation_id", "requests"})
        self._round_results: dict[str, ToolResult] = {}
        self._subruns: dict[str, dict[str, Any]] = {}
        self._tool_calls = 0
        self._cost = 0.0  # dollars of this run's model calls (counted with cost_usd only)
        self._usage_limit: str | None = None  # the usage limit passed, once one is
        self._guardrail: GuardrailTrip | None = None  # the guardrail that tripped, if one did
        # how to take the prompt back out (an input trip): the history's length before it,
        # and the length of the trailing user message it joined (-1: a message of its own)
        self._prompt_undo: tuple[int, int] | None = None
        self._prompt_passed = False  # its input checks passed: a later input trip is an inject's
        # injected input taken as the run ended, which its input checks never passed: not
        # committed, handed back in the result (RunContext.hand_back)
        self._unchecked: list[ContentBlock] = []
        self._retries = 0
        self._model_ids: list[str] = []  # per answered model call (run/_model_step.py)
        self._ended_at: float | None = None
        self._model_time = 0.0
        self._tool_time = 0.0
        self._first_token: float | None = None
        # structured output (run/_output.py): the answer, as JSON, and re-asks made
        self._output: Any = NO_OUTPUT
        self._output_json: Any = NO_OUTPUT  # made when a state is asked for
        self._output_attempts = 0

    # -- read by the steps, the driver and other threads (one read of one value each) --

    @property
    def settings(self) -> RunSettings:
        return self._settings

    @property
    def messages(self) -> list[Message]:
        """The agent's history: the steps and the history rules extend it in place."""
        return self._messages

    @property
    def history_start(self) -> int:
        return self._history_start

    @property
    def hooks(self) -> HookRunner:
        return self._hooks

    @property
    def inbox(self) -> Inbox:
        return self._inbox

    @property
    def status(self) -> RunStatus:
        return self._status

    @property
    def phase(self) -> RunPhase:
        return self._phase

    @property
    def cycle(self) -> int:
        return self._cycle

    @property
    def pending_tool_ids(self) -> tuple[str, ...]:
        return self._pending_tool_ids

    @property
    def usage(self) -> Usage:
        return self._usage

    @property
    def next_step(self) -> StepName | None:
        return self._next_step

    @property
    def steps(self) -> Sequence[Step]:
        return self._steps

    @property
    def result(self) -> AgentResult | None:
        return self._result

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def last_stop_reason(self) -> str | None:
        return self._last_stop_reason

    @property
    def invalid_tool_inputs(self) -> Mapping[str, str]:
        return self._invalid_tool_inputs

    @property
    def tool_input_texts(self) -> Mapping[str, str]:
        """The last model call's tool inputs as they streamed, where that text is the
        input's JSON as is (:attr:`AssembledMessage.tool_input_texts`)."""
        return self._tool_input_texts

    @property
    def decisions(self) -> Mapping[str, Approve | Deny]:
        return self._decisions

    @property
    def awaiting(self) -> tuple[ToolUse, ...]:
        return self._awaiting

    @property
    def round_results(self) -> Mapping[str, ToolResult]:
        return self._round_results

    @property
    def subruns(self) -> Mapping[str, Mapping[str, Any]]:
        return self._subruns

    @property
    def tool_calls(self) -> int:
        return self._tool_calls

    @property
    def cost(self) -> float:
        return self._cost

    @property
    def usage_limit(self) -> str | None:
        return self._usage_limit

    @property
    def guardrail(self) -> GuardrailTrip | None:
        return self._guardrail

    @property
    def prompt_passed(self) -> bool:
        return self._prompt_passed

    @property
    def unchecked(self) -> tuple[ContentBlock, ...]:
        """Injected input the run handed back (``RunContext.hand_back``)."""
        return tuple(self._unchecked)

    @property
    def input_checked(self) -> bool:
        """Whether the run's input is checked (it has input guardrails): then input is
        committed only once its checks passed it (DESIGN 13)."""
        guards = self._settings.guardrails
        return guards is not None and guards.has("input")

    @property
    def first_token(self) -> float | None:
        return self._first_token

    @property
    def output(self) -> Any:
        return self._output

    @property
    def output_attempts(self) -> int:
        return self._output_attempts

    @property
    def resumable(self) -> bool:
        """Whether the run commits what a follower is about to see first (:meth:`keep_progress`)."""
        return self._resumable

    def elapsed(self) -> float:
        """Seconds since the run started, or its length once it is over."""
        end = self._ended_at if self._ended_at is not None else time.perf_counter()
        return end - self.started

    # -- the run as data (any thread) --

    def state(self) -> RunState:
        """The run as data (see :class:`~agent_sync.run.RunState`); cheap, any thread."""
        messages = tuple(self._messages[self._history_start :])
        pending: tuple[Any, ...] = ()
        if self._next_step == "tools" and messages and messages[-1]["role"] == "assistant":
            pending = tuple(b["toolUse"] for b in messages[-1]["content"] if "toolUse" in b)
        result = self._result
        round_results, decisions = self._round_results, self._decisions  # one read of each
        owed = {tool_use["toolUseId"] for tool_use in pending} - round_results.keys()
        return RunState(
            run_id=self.run_id,
            status=self._status,
            next_step=self._next_step,
            cycle=self._cycle,
            messages=messages,
            history_start=self._history_start,
            pending_tool_uses=pending,
            queued_inputs=self._inbox.queued(),
            usage=self._usage,
            stop_reason=self._stop_reason,
            cancel_reason=result.cancel_reason if result is not None else None,
            guardrail=result.guardrail if result is not None else None,
            conversation_id=self._settings.conversation_id,
            approvals=self._approvals,
            invalid_tool_inputs=dict(self._invalid_tool_inputs) if pending else {},
            output=self._output_as_json(),
            parent_run_id=self.parent_run_id,
            round_results=tuple(round_results.values()),
            subruns=dict(self._subruns),
            # a sub-agent's run ends with its caller's: only a top-level run is resumed
            on_owner_lost=self._settings.on_owner_lost if self.parent_run_id is None else "fail",
            # kept until the call's result is: a recovered run reuses them (never for
            # another call: only the pending calls' own, by toolUseId)
            decisions={key: d for key, d in decisions.items() if key in owed},
            tool_calls=self._tool_calls,
            cost_usd=self._cost,
            usage_limit=self._usage_limit,
            input_checked=self.input_checked,
        )

    def _output_as_json(self) -> Any:
        """The output as JSON, for the run's state (``None`` until there is one). Made the
        first time a state is asked for (any thread: a race makes the same value twice)."""
        spec = self._settings.output
        if self._output is NO_OUTPUT or spec is None:
            return None
        if self._output_json is NO_OUTPUT:
            self._output_json = spec.to_json(self._output)
        return self._output_json

    def snapshot(self) -> RunSnapshot:
        """Where the run is now (see :meth:`~agent_sync.run.Run.snapshot`); any thread."""
        result = self._result
        return RunSnapshot(
            run_id=self.run_id,
            status=self._status,
            phase=self._phase,
            cycle=self._cycle,
            pending_tool_ids=self._pending_tool_ids,
            queued_inputs=self._inbox.queued(),
            usage=self._usage,
            elapsed_s=self.elapsed(),
            conversation_id=self._settings.conversation_id,
            stop_reason=None if result is None else result.stop_reason,
            cancel_reason=None if result is None else result.cancel_reason,
            guardrail=None if result is None else result.guardrail,
            parent_run_id=self.parent_run_id,
            usage_limit=None if result is None else result.usage_limit,
        )
