"""The steps of a run: functions of a :class:`~._context.RunContext` that yield events and
return the name of the next step (``None``: the run is over).

::

    model ──(tool calls)──> tools ──> model ...      (tools ──(gated)──> approval: paused)
      │                                  │
      └──(no tool calls)──> finish ──(input queued)──> model
                              └──> None (done)
    model, at the cycle limit ──> max_cycles ──> None
    model, with an output type ──> output (run/_output.py: validate, re-ask or finish)

Cancel checkpoints: before every model call (so after tools), on every stream event,
during retry back-off (an ``Event.wait``), before tools, between sequential tools, and while
waiting for tool threads. Blocked I/O is woken by the provider's abort callback, so no
checkpoint waits on a socket. A ``cancel(mode="after_turn")`` is honoured at the first of
these, the check before the next model call: the turn in flight and its tools finish.

History rule: a step that is cut short leaves the history valid up to its last complete
message (a cancelled stream appends its partial message ending "Cancelled by user"; the
tool step always appends one result per call). :func:`end_cancelled` and
:func:`end_failed` then add queued input and close the turn.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import replace
from typing import Any

from .._decisions import ApprovalRequest, Deny
from .._guardrails._checks import GuardrailTrip
from .._guardrails._set import NOT_RUN_TEXT, STOPPED_TEXT
from .._history import add_user_blocks, close_cancelled_turn, close_turn, tool_result_message
from .._limits import not_run_text, stopped_text
from .._run_state import Step, StepName
from ..events import (
    AgentEvent,
    ApprovalRequired,
    Done,
    InputInjected,
    MessageComplete,
    SubAgentEvent,
    ToolEnd,
    ToolStart,
)
from ..messages import CANCELLED_TEXT, ContentBlock, Message, ToolResult, ToolUse
from ..tools._batch import SubRunPaused, ToolBatch, ToolCall
from ..tools.context import ToolContext
from ._context import RunContext
from ._guard_input import check_inject
from ._guard_tools import (
    check_tool_calls,
    check_tool_result,
    guardrail_tripped,
    settle_results,
    tripped_result,
)
from ._model_step import model_step
from ._output import output_step
from ._subruns import cancel_subruns, child_usage, round_paused

__all__ = ["STEPS", "end_cancelled", "end_failed"]

logger = logging.getLogger(__name__)

StepFunction = Callable[[RunContext], Generator[AgentEvent, None, StepName | None]]


def tools_step(ctx: RunContext) -> Generator[AgentEvent, None, StepName | None]:
    """Run the tool calls of the last assistant message; append one result per call and
    the input queued meanwhile."""
    ctx.scope.raise_if_cancelled()  # checkpoint: before tools
    assistant = ctx.messages[-1]
    budget = ctx.settings.budget
    if budget is not None:  # a batch that would pass tool_calls does not start
        uses = [b["toolUse"]["toolUseId"] for b in assistant["content"] if "toolUse" in b]
        count = sum(1 for i in uses if i not in ctx.round_results)  # not run before a pause
        ctx.stop_at_limit(budget.before_tools(ctx.tool_calls, count))
    ctx.await_approval(_awaiting_approval(ctx, assistant))
    if ctx.awaiting:
        return "approval"  # nothing of this round runs before every gated call is answered
    calls = _tool_calls(ctx, assistant)
    guarded = ctx.settings.guardrails is not None
    if ctx.decisions:  # a resumed round: its decisions are stored (in a resumable run)
        ctx.keep_progress()  # before a gated call runs (a recoverer reuses them)
    # the seam where the batch starts: its calls are decided (hooks, decisions) and pending
    if guarded:  # no call starts before every tool_call check passed them all
        calls = yield from check_tool_calls(ctx, calls)
    ctx.begin_tools(tuple(call.tool_use["toolUseId"] for call in calls))
    started = time.perf_counter()
    settings, cycle = ctx.settings, ctx.cycle
    batch = ToolBatch(
        calls,
        scope=ctx.scope,
        agent=ctx.agent,
        run_id=ctx.run_id,
        available=sorted(settings.tools),
        max_workers=settings.max_tool_workers if settings.tool_executor == "concurrent" else 1,
        grace_period=settings.tool_grace_period,
        deps=settings.deps,
    )
    results: list[ToolResult] = []
    injected: list[ContentBlock] = []
    pausing: dict[str, SubRunPaused] = {}
    completed = False
    seen: dict[str, ToolResult] = {}  # guarded: each result as checked (or its trip's answer)
    try:
        for event in batch.run():
            if type(event) is ToolEnd:  # (resumable: committed before anyone is told)
                if guarded:  # checked before anyone sees it
                    checked = check_tool_result(ctx, event)
                    if isinstance(checked, GuardrailTrip):
                        seen[event.tool_use["toolUseId"]] = tripped_result(event, checked)
                        yield guardrail_tripped(checked)
                        ctx.stop_at_guardrail(checked)
                    event = checked
                    seen[event.tool_use["toolUseId"]] = event.result
                ctx.tool_done(event.tool_use["toolUseId"], event.result)
            elif type(event) is SubAgentEvent:
                if type(event.event) is Done:  # a child's usage (its children's included)
                    usage = event.event.result.usage
                    ctx.add_usage(child_usage(ctx, event.tool_use_id, usage))  # type: ignore[arg-type]
                yield event  # a sub-agent's event: not the hooks' (they see its own)
                continue
            _tool_event_to_hooks(ctx, event, cycle)
            yield event
        completed = True
    finally:
        # One result per call, whatever happened (cancel, closed stream, Ctrl-C, a hook).
        results = batch.finish()
        if guarded:  # what the model sees: only checked results
            results = settle_results(ctx, calls, results, seen)
        pausing = round_paused(ctx, calls, batch, results, completed=completed)
        ctx.end_tools(time.perf_counter() - started)
        if not pausing:
            ctx.take_round()
            injected = [] if guarded else ctx.inbox.take()  # guarded: checked below
            message = tool_result_message(results)
            message["content"].extend(injected)
            ctx.messages.append(message)
    if pausing:  # a child waits for approval: this round waits with it
        approvals = tuple(request for paused in pausing.values() for request in paused.approvals)
        yield from _pause(ctx, approvals)
        return None
    if guarded:  # injected input is checked before it is committed
        injected = yield from check_inject(ctx, ctx.inbox.take(hold=True))
        message["content"].extend(injected)
    ctx.add_step(
        Step(cycle=cycle, message=assistant, tool_results=tuple(results), injected=tuple(injected))
    )
    ctx.keep_progress("model")  # the round's end, before anyone is told of it
    yield MessageComplete(message=message, run_id=ctx.run_id)
    if injected:
        yield InputInjected(content=tuple(injected), run_id=ctx.run_id)
    return "model"


def _tool_calls(ctx: RunContext, assistant: Message) -> list[ToolCall]:
    """The calls to run, after the ``before_tool_call`` hooks had their say."""
    tools, invalid, hooks = ctx.settings.tools, ctx.invalid_tool_inputs, ctx.hooks
    calls: list[ToolCall] = []
    for block in assistant["content"]:
        if "toolUse" not in block:
            continue
        tool_use = block["toolUse"]
        call = ToolCall(
            tool_use=tool_use,
            tool=tools.get(tool_use["name"]),
            invalid_input=invalid.get(tool_use["toolUseId"]),
        )
        tool_use_id = tool_use["toolUseId"]
        if tool_use_id in ctx.round_results:  # finished before the round paused
            calls.append(replace(call, result=ctx.round_results[tool_use_id]))
            continue
        subrun = ctx.subruns.get(tool_use_id)
        if subrun is not None:  # a paused child: resumed with the decisions for it
            answers = {i: ctx.decisions[i] for i in subrun["requests"] if i in ctx.decisions}
            calls.append(replace(call, resume=(subrun, answers)))
            continue
        decision = ctx.decisions.get(tool_use_id)
        if isinstance(decision, Deny):
            call = replace(call, denied=decision.reason or "the reviewer said no")
        elif decision is not None:
            call = replace(call, decision=decision, input=decision.input)
        if call.denied is None:
            hook_use = tool_use if call.input is None else {**tool_use, "input": call.input}
            verdict = hooks.before_tool_call(run_id=ctx.run_id, cycle=ctx.cycle, tool_use=hook_use)
            if isinstance(verdict, Deny):
                call = replace(call, denied=verdict.reason)
            elif verdict is not None and verdict.input is not None:
                call = replace(call, input=verdict.input)
        calls.append(call)
    return calls


def _tool_event_to_hooks(ctx: RunContext, event: Any, cycle: int) -> None:
    if type(event) is ToolStart:
        ctx.hooks.tool_started(event.tool_use, cycle)
    elif type(event) is ToolEnd:
        ctx.hooks.after_tool_call(
            run_id=ctx.run_id,
            cycle=cycle,
            tool_use=event.tool_use,
            result=event.result,
            duration_s=event.duration_s,
        )


def _awaiting_approval(ctx: RunContext, assistant: Message) -> tuple[ToolUse, ...]:
    """The calls of this round that are gated and have no decision yet."""
    waiting: list[ToolUse] = []
    for block in assistant["content"]:
        tool_use = block.get("toolUse")
        if tool_use is None or tool_use["toolUseId"] in ctx.decisions:
            continue
        if tool_use["toolUseId"] in ctx.round_results or tool_use["toolUseId"] in ctx.subruns:
            continue  # ran (or its sub-agent paused) before this round paused
        tool = ctx.settings.tools.get(tool_use["name"])
        if tool is None or tool.requires_approval is False:
            continue
        context: ToolContext[Any] = ToolContext(
            tool_use=tool_use, agent=ctx.agent, _scope=ctx.scope, deps=ctx.settings.deps
        )
        try:
            gated = tool.needs_approval(tool_use, context)
        except Exception:  # fail closed: a gate that cannot decide asks a human
            logger.warning("tool=<%s> | approval gate raised; asking", tool.name, exc_info=True)
            gated = True
        if gated:
            waiting.append(tool_use)
    return tuple(waiting)


def approval_step(ctx: RunContext) -> Generator[AgentEvent, None, StepName | None]:
    """Pause: commit the state with its approval requests first, then tell the caller."""
    timeout = ctx.settings.approval_timeout
    expires_at = time.time() + timeout if timeout is not None else None
    tools = ctx.settings.tools
    approvals = tuple(
        ApprovalRequest(
            id=f"apr_{uuid.uuid4().hex}",
            tool_use=tool_use,
            schema=tools[tool_use["name"]].decision_schema,
            expires_at=expires_at,
            run_id=ctx.run_id,
        )
        for tool_use in ctx.awaiting
    )
    yield from _pause(ctx, approvals)
    return None


def _pause(
    ctx: RunContext, approvals: tuple[ApprovalRequest, ...]
) -> Generator[AgentEvent, None, None]:
    """Pause on ``approvals`` (the run's own, or its paused children's): the state is
    committed before anyone is told of it (:meth:`RunContext.pause`)."""
    ctx.pause(approvals)
    logger.debug("run_id=<%s>, approvals=<%d> | paused for approval", ctx.run_id, len(approvals))
    yield ApprovalRequired(approvals=approvals, run_id=ctx.run_id)


def finish_step(ctx: RunContext) -> Generator[AgentEvent, None, StepName | None]:
    """The model ended its turn: answer input queued meanwhile, or end the run."""
    guarded = ctx.settings.guardrails is not None  # input is checked before it is committed
    queued = ctx.inbox.take_or_close(hold=guarded)  # closes the inbox if nothing is queued
    if queued:
        if guarded:
            queued = yield from check_inject(ctx, queued)
        add_user_blocks(ctx.messages, queued)
        yield InputInjected(content=tuple(queued), run_id=ctx.run_id)
        return "model"
    ctx.finish("done", ctx.last_stop_reason or "end_turn", None)
    return None


def max_cycles_step(ctx: RunContext) -> Generator[AgentEvent, None, StepName | None]:
    """The cycle limit was reached before a model call: close the turn and stop."""
    limit = ctx.settings.max_cycles
    logger.debug("max_cycles=<%d> | stopping the loop", limit)
    add_user_blocks(ctx.messages, ctx.hand_back(ctx.inbox.close()))  # never checked
    close_turn(ctx.messages, f"Stopped: reached the limit of {limit} model calls (max_cycles).")
    ctx.finish("done", "max_cycles", None)
    yield MessageComplete(message=ctx.messages[-1], run_id=ctx.run_id)
    return None


STEPS: dict[StepName, StepFunction] = {
    "model": model_step,
    "tools": tools_step,
    "approval": approval_step,
    "finish": finish_step,
    "max_cycles": max_cycles_step,
    "output": output_step,
}
"""Step name -> step function (a :class:`~agent_sync.run.RunState` names where to go on)."""


def end_cancelled(ctx: RunContext) -> list[ContentBlock]:
    """Close a cancelled run: queued input, answers for pending calls, "Cancelled by user".

    A run a usage limit stopped (:meth:`RunContext.stop_at_limit`, unless a real cancel
    came too) is closed the same way, its calls answered "not run: ... limit" and the turn
    closed naming the limit; it ends ``"usage_limit"``, status ``done``. A run a guardrail
    stopped (:meth:`RunContext.stop_at_guardrail`) likewise: calls not started answered
    "not run", the turn closed "Stopped by guardrail", ``"guardrail"``, status ``done``.

    Queued input is written to the history, unless the run has input checks: nothing checks
    it now (a cancel never waits for a check), so it is handed back in the result instead
    (:meth:`RunContext.hand_back`).

    Returns:
        The queued input that was written to the history.
    """
    if ctx.subruns:  # resumed, then cancelled before its paused children went on
        cancel_subruns(ctx.agent, ctx.subruns, ctx.binding, ctx.scope.reason or "cancelled")
    results = ctx.take_round()
    queued = ctx.hand_back(ctx.inbox.close())
    if _prompt_unchecked(ctx):  # never committed: the history as before the call
        ctx.withdraw_prompt()  # (the inbox was held until the prompt passed: nothing queued)
        _finish_withdrawn(ctx)
        return []
    if ctx.guardrail is not None:  # a trip (recorded before any cancel) closes naming it
        close_cancelled_turn(
            ctx.messages,
            results=results,
            queued=queued,
            unanswered_text=NOT_RUN_TEXT,
            closing_text=STOPPED_TEXT,
        )
        ctx.finish("done", "guardrail", None)
        return queued
    limit = None if ctx.scope.cancelled else ctx.usage_limit
    if limit is None:
        close_cancelled_turn(ctx.messages, results=results, queued=queued)
        ctx.finish("cancelled", "cancelled", ctx.scope.reason)
        return queued
    close_cancelled_turn(
        ctx.messages,
        results=results,
        queued=queued,
        unanswered_text=not_run_text(limit),
        closing_text=stopped_text(limit),
    )
    ctx.finish("done", "usage_limit", None)
    return queued


def _prompt_unchecked(ctx: RunContext) -> bool:
    """Whether the run's prompt is under input checks that have not passed it (a trip, a
    cancel or a usage limit while they were pending): DESIGN 13, an unchecked prompt is not
    committed, or the next call would send it unchecked."""
    return not ctx.prompt_passed and ctx.input_checked


def _finish_withdrawn(ctx: RunContext) -> None:
    """End a run whose prompt was withdrawn: its result's message names why; the history
    has none of it."""
    limit = None if ctx.scope.cancelled else ctx.usage_limit
    if ctx.guardrail is None and limit is None:
        closing: Message = {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
        ctx.finish("cancelled", "cancelled", ctx.scope.reason, closing)
        return
    if ctx.guardrail is not None:
        text, stop_reason = STOPPED_TEXT, "guardrail"
    else:
        text, stop_reason = stopped_text(limit or ""), "usage_limit"
    ctx.finish("done", stop_reason, None, {"role": "assistant", "content": [{"text": text}]})


def end_failed(ctx: RunContext) -> None:
    """Leave a failed run's history valid, ending with the user's message (so
    ``invoke()`` with no prompt can try again) with any queued input in it: input checks
    or not, the next call checks that message as its prompt; a failed run has no result to
    hand input back in (an inject whose check failed to run included)."""
    add_user_blocks(ctx.messages, [*ctx.unchecked, *ctx.inbox.close()])
    close_turn(ctx.messages, None)
    ctx.fail()
