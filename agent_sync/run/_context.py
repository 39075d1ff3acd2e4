"""What the steps of a run work on: the run's live state (its settings are
:class:`~agent_sync.run._settings.RunSettings`).

:class:`RunContext` is one run's state in memory: the conversation it appends to, its cancel
scope and inbox, counters, and the fields :meth:`~agent_sync.run.Run.snapshot` reads. Its
fields are private (declared and read in :mod:`._context_fields`); only its verbs, here,
change them, as only a ``concurrent.futures.Future``'s methods change its state. A step
returns the name of the step that follows, and the driver applies it (:meth:`go_to`); the
status changes only as the run ends (:meth:`finish`, :meth:`pause`, :meth:`fail`) or a
``done`` run is reopened (:meth:`reopen`).

Thread rules: only the loop's thread calls the verbs; other threads read (see
:mod:`._context_fields`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from .._decisions import ApprovalRequest, Approve, Deny
from .._guardrails._checks import GuardrailTrip
from .._run_state import RunState, RunStatus, Step, StepName
from ..cancel import CancelledError
from ..messages import ContentBlock, Message, ToolResult, ToolUse, Usage
from ..result import AgentMetrics, AgentResult
from ._context_fields import ContextFields, RunAgent
from ._hooks import HookRunner
from ._inbox import Inbox
from ._output import result_output
from ._settings import RunSettings

if TYPE_CHECKING:
    from ..tools.decorator import Tool
    from ._assemble import AssembledMessage

__all__ = ["RunAgent", "RunContext", "RunSettings"]


class RunContext(ContextFields):
    """One run's state in memory; changed only by these verbs, in the loop's thread (see
    the module docstring)."""

    __slots__ = ()

    # -- the driver's verbs --

    def take_history(self, messages: list[Message], prompt: list[ContentBlock] | None) -> None:
        """The history of the moment the run took the agent: the prompt is added to it, and
        this run's part starts at the prompt's user message (``[]``: none, the run answers
        the trailing user message; ``None``: a resumed run, whose start its state gave)."""
        self._messages = messages
        if prompt is None:
            return
        if not prompt:
            self._history_start = len(messages) - 1  # answering the trailing user message
        elif messages and messages[-1]["role"] == "user":
            self._history_start = len(messages) - 1
            self._prompt_undo = (len(messages), len(messages[-1]["content"]))
            messages[-1]["content"].extend(prompt)  # e.g. after a model error
        else:
            self._history_start = len(messages)
            self._prompt_undo = (len(messages), -1)
            messages.append({"role": "user", "content": prompt})

    def listen(self, hooks: HookRunner) -> None:
        """The hooks and tracer that hear this run (made as it starts: a side effect)."""
        self._hooks = hooks

    def use_tools(self, tools: dict[str, Tool[Any]]) -> None:
        """The run's tools, its tool sources' included (read before its first step)."""
        specs = tuple(tool.spec for tool in tools.values())
        self._settings = replace(self._settings, tools=tools, tool_specs=specs)

    def go_to(self, step: StepName) -> None:
        """Apply a step's decision: the step the run goes on with (what its state names)."""
        self._next_step = step

    def reopen(self, blocks: list[ContentBlock]) -> None:
        """A ``done`` run given input the store accepted before its end was stored goes on,
        as for input queued when the model ends its turn (the finish step takes it): one
        more model call answers it."""
        # the closed inbox refused local input meanwhile; this one takes more, and holds
        # ``blocks`` for the finish step, which answers them as input queued at the turn's
        # end: checked first, in a run with input checks (committed only once they passed)
        self._inbox = Inbox([blocks])
        self._result = None
        self._stop_reason = None
        self._ended_at = None
        self._next_step = "finish"
        self._status = "running"

    def mark_ended(self) -> None:
        """The run's length ends now, unless its end was recorded already."""
        if self._ended_at is None:
            self._ended_at = time.perf_counter()

    # -- the steps' verbs --

    def keep_progress(self, next_step: StepName | None = None) -> None:
        """In a resumable run, commit the state now (naming ``next_step``, when given, as
        where it goes on): before anyone is told of what it holds. A no-op otherwise."""
        if self._resumable:
            assert self._commits is not None
            if next_step is not None:
                self._next_step = next_step
            self._commits.checkpoint(self)

    def add_step(self, step: Step) -> None:
        """A step of the run is complete (what ``steps()`` hands out)."""
        self._steps.append(step)

    def begin_model_call(self) -> int:
        """A model call starts: the run's cycle, counted, is returned."""
        self._cycle += 1
        self._phase = "model"
        return self._cycle

    def enter_retry_wait(self) -> None:
        """The model call failed and is retried after a back-off (counted)."""
        self._retries += 1
        self._phase = "retry_wait"  # before the event: whoever sees it sees the phase

    def leave_retry_wait(self) -> None:
        self._phase = "model"

    def answered_by(self, model_id: str) -> None:
        """The model that gave this call's answer (``metrics.model_ids``)."""
        self._model_ids.append(model_id)

    def end_model_call(self, duration: float) -> None:
        """A model call is over, answered or not: its time counted."""
        self._model_time += duration

    def count_call(self, usage: Usage | None, first_text_at: float | None) -> None:
        """Count a model call into the run: the usage the provider reported (and its cost,
        with a price) and the first token's time, whether the call finished or was cut
        short (a cancel after the input tokens were reported still cost them)."""
        self.add_usage(usage)
        budget = self._settings.budget
        if budget is not None and budget.price is not None:
            # priced with the model that answered (a fallback chain's): a usage comes only
            # from a call whose answer began, which _open_stream recorded in model_ids
            answered = self._model_ids[-1] if self._model_ids else None
            self._cost += budget.cost(usage, answered)
        if self._first_token is None and first_text_at is not None:
            self._first_token = first_text_at - self.started

    def take_answer(self, assembled: AssembledMessage) -> None:
        """Append the model's answer to the history, with what the call said of it."""
        self._messages.append(assembled.message)
        self._phase = "idle"
        self._invalid_tool_inputs = assembled.invalid_tool_inputs
        self._tool_input_texts = assembled.tool_input_texts
        self._last_stop_reason = assembled.stop_reason

    def await_approval(self, tool_uses: tuple[ToolUse, ...]) -> None:
        """The gated calls of this round that have no decision yet (the approval step's)."""
        self._awaiting = tool_uses

    def begin_tools(self, tool_use_ids: tuple[str, ...]) -> None:
        """A tool batch starts: its calls are pending, and counted."""
        self._phase = "tools"
        self._pending_tool_ids = tool_use_ids
        self._tool_calls += len(tool_use_ids)

    def tool_done(self, tool_use_id: str, result: ToolResult) -> None:
        """A call of the batch ended; a resumable run commits its result before anyone is
        told of it."""
        self._pending_tool_ids = tuple(i for i in self._pending_tool_ids if i != tool_use_id)
        if self._resumable:
            self._round_results[tool_use_id] = result
            self.keep_progress()

    def end_tools(self, duration: float) -> None:
        """The batch is over (whatever happened): nothing pending, its time counted; the
        decisions answered this round only, never a later call reusing an id."""
        self._pending_tool_ids = ()
        self._decisions = {}
        self._tool_time += duration
        self._phase = "idle"

    def hold_round(
        self, round_results: dict[str, ToolResult], subruns: dict[str, dict[str, Any]]
    ) -> None:
        """The round pauses on its sub-agents' approvals: its finished calls' results and
        its paused children are kept for the resume."""
        self._round_results, self._subruns = round_results, subruns

    def take_round(self) -> tuple[ToolResult, ...]:
        """The round is over: the results it kept, no longer kept (nor its children)."""
        results = tuple(self._round_results.values())
        self._round_results, self._subruns = {}, {}
        return results

    def keep_output(self, output: Any, *, stop_reason: str | None = None) -> None:
        """The valid structured output (``stop_reason``: when the run's own closing
        message ends the turn, not the model's)."""
        self._output = output
        if stop_reason is not None:
            self._last_stop_reason = stop_reason

    def reask(self) -> int:
        """One more re-ask for a valid output: how many were made."""
        self._output_attempts += 1
        return self._output_attempts

    def add_usage(self, usage: Usage | None) -> None:
        """Add one call's usage (a new dict: readers may hold the old one)."""
        if usage is None:
            return
        total: dict[str, int] = dict(self._usage)  # type: ignore[arg-type]
        for key, value in usage.items():
            total[key] = total.get(key, 0) + int(value)  # type: ignore[call-overload]
        self._usage = total  # type: ignore[assignment]

    def note_limit(self, limit: str | None) -> None:
        """Record a usage limit a final answer passed (no-op for ``None``): the answer is
        kept and the run ends naming the limit (:meth:`finish`)."""
        if limit is not None:
            self._usage_limit = limit

    def stop_at_limit(self, limit: str | None) -> None:
        """Stop the run at a usage limit (no-op for ``None``): raised as a cancel is, so
        the run ends through the same close (:func:`~._steps.end_cancelled`), which
        tells the two apart by the scope (a real cancel wins)."""
        if limit is not None:
            self.note_limit(limit)
            raise CancelledError(f"usage limit: {limit}")

    def redact_prompt(self, text: str) -> None:
        """An input guardrail's ``Redact``: the prompt's text blocks become one block of
        ``text`` (where the first was), before the model, the history or the store see it."""
        content = self._messages[self._history_start]["content"]
        kept: list[ContentBlock] = []
        for block in content:
            if "text" not in block:
                kept.append(block)
            elif not any("text" in seen for seen in kept):
                kept.append({"text": text})
        content[:] = kept

    def pass_prompt(self) -> None:
        """The prompt passed its input checks: committed, a later input trip is an
        inject's (which leaves the history as it is, less the inject), and the run takes
        injected input from now on (its inbox was held until then, see ``_inbox``)."""
        self._prompt_passed = True
        self._inbox.open()

    def hand_back(self, blocks: list[ContentBlock]) -> list[ContentBlock]:
        """Injected input the run took as it ends, that no check will see now (a cancel or
        a stop never waits for one): returned, to be written to the history with the
        closing, by a run without input checks; a run with them (:attr:`input_checked`)
        commits input only once its checks passed it, so it keeps none of it and hands it
        back in its result's ``unchecked_input`` (and the done record) instead, and
        returns ``[]``. Called before or after :meth:`finish` (input a store accepted as
        the run's end was being stored)."""
        if not blocks or not self.input_checked:
            return blocks
        self._unchecked.extend(blocks)
        if self._result is not None:
            self._result = replace(self._result, unchecked_input=tuple(self._unchecked))
        return []

    def withdraw_prompt(self) -> None:
        """An input trip: the prompt leaves the history, which is as it was before the call
        (no-op for a run that added none)."""
        if self._prompt_undo is None:
            return
        length, joined = self._prompt_undo
        if joined < 0:
            del self._messages[length:]
        else:
            del self._messages[length:]
            del self._messages[-1]["content"][joined:]
        self._prompt_undo = None

    def stop_at_guardrail(
        self, trip: GuardrailTrip, answered: tuple[ToolResult, ...] = (), *, claimed: bool = False
    ) -> NoReturn:
        """Stop the run at a guardrail's trip: raised as a cancel is, so the run ends
        through the same close (:func:`~._steps.end_cancelled`). The first of a trip and a
        real cancel wins: a trip is recorded only while the scope is not cancelled, and
        once recorded the run ends ``"guardrail"`` whatever cancels the scope after (a
        batch's end cancels its running tools). ``answered``: the results of the round's
        calls known now (the tripped call's error), kept for the close. ``claimed``: the
        trip was claimed on another thread while the scope was not cancelled, and cancelled
        it to wake the loop (an output judge's, ``run/_guard_judges.py``, or an input check
        raced against the model call, ``run/_input_race.py``): it came first."""
        if self._guardrail is None and (claimed or not self.scope.cancelled):
            self._guardrail = trip
            for result in answered:
                self._round_results[result["toolUseId"]] = result
        raise CancelledError(f"guardrail: {trip.name}")

    # -- the ends: only these change the status (and reopen, above) --

    def finish(
        self,
        status: RunStatus,
        stop_reason: str,
        cancel_reason: str | None,
        message: Message | None = None,
    ) -> None:
        """Record the outcome and build the result (the history is already closed); a run
        that ends once a usage limit was passed (its final answer kept) says so.
        ``message``: the result's, when it is not the history's last (an input trip)."""
        self._ended_at = ended = time.perf_counter()
        if status == "done" and self._usage_limit is not None:
            stop_reason = "usage_limit"
        if message is None:
            message = self._messages[-1]  # a run always has its user message, at least
        self._stop_reason = stop_reason
        self._result = AgentResult(
            run_id=self.run_id,
            stop_reason=stop_reason,
            cancel_reason=cancel_reason,
            message=message,
            usage=self._usage,
            metrics=AgentMetrics(
                cycles=self._cycle,
                tool_calls=self._tool_calls,
                retries=self._retries,
                duration_s=ended - self.started,
                model_duration_s=self._model_time,
                tool_duration_s=self._tool_time,
                time_to_first_token_s=self._first_token,
                model_ids=tuple(self._model_ids),
            ),
            output=result_output(self),
            usage_limit=self._usage_limit if stop_reason == "usage_limit" else None,
            guardrail=self._guardrail if stop_reason == "guardrail" else None,
            unchecked_input=tuple(self._unchecked),
        )
        self._pending_tool_ids = ()
        self._phase = "idle"
        self._next_step = None
        self._status = status

    def pause(self, approvals: tuple[ApprovalRequest, ...]) -> None:
        """Pause: the run goes on from the tool step once decisions arrive. The pause is
        stored (with its approval requests) before anyone is told of it."""
        self._approvals = approvals
        self._inbox.seal()  # queued input stays in the state; new input is refused
        self.finish("paused", "paused", None)
        self._next_step = "tools"
        self._result = replace(self._result, approvals=approvals) if self._result else None
        if self._commits is not None:
            self._commits.pause(self, self.state())  # committed before anyone is told of it

    def fail(self) -> None:
        """Record that the run ended with an exception (no result)."""
        self._ended_at = time.perf_counter()
        self._pending_tool_ids = ()
        self._phase = "idle"
        self._next_step = None
        self._status = "failed"

    def restore(self, state: RunState, decisions: dict[str, Approve | Deny]) -> None:
        """Set this new context up to go on from a paused or lost run's state, with the
        decisions: the new ones, and those the state kept (made before its worker died:
        each reused for its own call, never asked again)."""
        self._history_start = state.history_start
        self._prompt_passed = True  # checked by the run that started it
        self._cycle = state.cycle  # the requests a usage limit counts, with the rest:
        self._usage = dict(state.usage)  # type: ignore[assignment]
        self._tool_calls, self._cost = state.tool_calls, state.cost_usd
        self._usage_limit = state.usage_limit
        self._next_step = state.next_step or "tools"
        self._inbox = Inbox([list(blocks) for blocks in state.queued_inputs])
        self._invalid_tool_inputs = dict(state.invalid_tool_inputs)
        self._decisions = {**state.decisions, **decisions}
        self._round_results = {result["toolUseId"]: result for result in state.round_results}
        self._subruns = {key: dict(info) for key, info in state.subruns.items()}
