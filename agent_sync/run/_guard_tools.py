"""The tool stages of a run's guardrails (DESIGN 13): ``tool_call`` checks each call before
any call of the batch starts, ``tool_result`` checks each result before anyone (the events,
the hooks, the store, the model) sees it.

tool_call: every call of the batch is checked before the batch starts (the seam in
:func:`~._steps.tools_step`, before ``begin_tools``): a ``Redact(text)`` replaces the input
the tool runs with (JSON, as ``Approve(input=)`` does; the history keeps the model's
request); a trip stops the run before any tool starts, the tripped call answered with an
error naming the guardrail and the others "not run".

tool_result: a ``Redact(text)`` replaces the result's content; a trip stops the run, the
tripped call answered with an error naming the guardrail (its content never kept).

Checks run in the loop's thread, in order (a redaction is what the next sees).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import replace
from typing import Any

from .._encodable import load_json
from .._guardrails._checks import (
    Guardrail,
    GuardrailTrip,
    GuardView,
    Redact,
    Trip,
    pattern_verdict,
)
from .._guardrails._pattern import PatternGuard, Stage
from .._guardrails._set import AnyGuard
from ..cancel import CancelToken
from ..events import AgentEvent, GuardrailTripped, ToolEnd
from ..messages import ToolResult
from ..tools._batch import ToolCall
from ..tools._results import error_result
from ._context import RunContext

__all__ = [
    "check_tool_calls",
    "check_tool_result",
    "guardrail_tripped",
    "refused_text",
    "settle_results",
    "tripped_result",
]


def refused_text(trip: GuardrailTrip) -> str:
    """The error result of the call a guardrail tripped on (its name and reason only)."""
    return f"stopped by guardrail {trip.name}: {trip.reason}"


def check_tool_calls(
    ctx: RunContext, calls: list[ToolCall]
) -> Generator[AgentEvent, None, list[ToolCall]]:
    """The calls with their checked input; on a trip, announce it and stop the run (no call
    of the batch starts)."""
    guards = ctx.settings.guardrails
    checks = guards.stage("tool_call") if guards is not None else ()
    if not checks:
        return calls
    checked: list[ToolCall] = []
    before = tuple(ctx.messages[:-1])  # the history before the calls' message
    for call in calls:
        if call.result is not None or call.denied is not None or call.resume is not None:
            checked.append(call)  # ran before a pause, denied, or a paused child: not started here
            continue
        tool_use = call.tool_use
        tool_input = call.input if call.input is not None else tool_use["input"]
        text = json.dumps(tool_input, ensure_ascii=False)
        verdict = _judge(ctx, checks, "tool_call", text, tool_use["name"], tool_input, before)
        if not isinstance(verdict, GuardrailTrip) and verdict[1] is not None:
            parsed = _json_object(verdict[0])
            if parsed is not None:
                call = replace(call, input=parsed)
            else:  # a redaction that is no tool input: fail closed
                reason = "its redaction of the input is not a JSON object"
                verdict = GuardrailTrip(
                    name=verdict[1], stage="tool_call", reason=reason, run_id=ctx.run_id
                )
        if isinstance(verdict, GuardrailTrip):
            answer = error_result(tool_use["toolUseId"], refused_text(verdict))
            yield guardrail_tripped(verdict)
            ctx.stop_at_guardrail(verdict, answered=(answer,))
        checked.append(call)
    return checked


def check_tool_result(ctx: RunContext, event: ToolEnd) -> ToolEnd | GuardrailTrip:
    """The tool's end as anyone may see it (its content redacted), or the trip."""
    guards = ctx.settings.guardrails
    checks = guards.stage("tool_result") if guards is not None else ()
    if not checks:
        return event
    result = event.result
    text = "".join(piece["text"] for piece in result["content"] if "text" in piece)
    tool_use = event.tool_use
    verdict = _judge(
        ctx, checks, "tool_result", text, tool_use["name"], tool_use["input"], tuple(ctx.messages)
    )
    if isinstance(verdict, GuardrailTrip):
        return verdict
    if verdict[1] is None:
        return event
    redacted: ToolResult = {**result, "content": [{"text": verdict[0]}]}
    return replace(event, result=redacted)


def tripped_result(event: ToolEnd, trip: GuardrailTrip) -> ToolResult:
    """What the history keeps of a result a guardrail tripped on."""
    return error_result(event.tool_use["toolUseId"], refused_text(trip))


def settle_results(
    ctx: RunContext,
    calls: list[ToolCall],
    results: list[ToolResult],
    seen: dict[str, ToolResult],
) -> list[ToolResult]:
    """The batch's results as the history keeps them: each as it was checked when its tool
    ended (``seen``), and any other (one that ended as the batch was cut short) checked now:
    redacted, or answered with the trip's error (the run is ending already)."""
    uses = {call.tool_use["toolUseId"]: call.tool_use for call in calls}
    settled: list[ToolResult] = []
    for result in results:
        tool_use_id = result["toolUseId"]
        known = seen.get(tool_use_id)
        if known is None:
            event = ToolEnd(tool_use=uses[tool_use_id], result=result, duration_s=0.0)
            checked = check_tool_result(ctx, event)
            known = (
                tripped_result(event, checked)
                if isinstance(checked, GuardrailTrip)
                else checked.result
            )
        settled.append(known)
    return settled


def guardrail_tripped(trip: GuardrailTrip) -> GuardrailTripped:
    """The event that announces ``trip`` (every stage's)."""
    return GuardrailTripped(
        name=trip.name, stage=trip.stage, reason=trip.reason, run_id=trip.run_id
    )


def _judge(
    ctx: RunContext,
    checks: tuple[AnyGuard, ...],
    stage: Stage,
    text: str,
    tool_name: str,
    tool_input: Any,
    messages: tuple[Any, ...],
) -> tuple[str, str | None] | GuardrailTrip:
    """Every check in order over ``text``: the first trip, or the text as redacted and the
    name of the last check that changed it (``None``: none did)."""
    token = CancelToken()
    changed_by: str | None = None
    for check in checks:
        if isinstance(check, PatternGuard):
            verdict = pattern_verdict(check, text)
        else:
            verdict = _run_check(
                check, stage, ctx.run_id, text, tool_name, tool_input, messages, token
            )
        if isinstance(verdict, Trip):
            token.cancel("guardrail tripped")
            return GuardrailTrip(
                name=check.name, stage=stage, reason=verdict.reason, run_id=ctx.run_id
            )
        if isinstance(verdict, Redact) and verdict.text != text:
            text, changed_by = verdict.text, check.name
    return text, changed_by


def _run_check(
    check: Guardrail,
    stage: Stage,
    run_id: str,
    text: str,
    tool_name: str,
    tool_input: Any,
    messages: tuple[Any, ...],
    token: CancelToken,
) -> Trip | Redact | None:
    view = GuardView(
        stage=stage,
        run_id=run_id,
        text=text,
        pending=text,
        tool_name=tool_name,
        tool_input=tool_input,
        messages=messages,
        cancel_token=token,
    )
    return check.judge(view)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = load_json(text, what="the redacted tool input")
    except ValueError:  # Unencodable among them
        return None
    return value if isinstance(value, dict) else None
