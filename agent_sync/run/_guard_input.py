"""The input stage of a run's guardrails (DESIGN 13): the prompt is checked before anything
of the run leaves it.

``PatternGuard`` checks run first, in the loop's thread, before the model is called; then the
``"block"`` checks, each on a worker thread waited for (its ``timeout``, the run's cancel:
:func:`~._input_race.wait_for_check`) before the model is called; then the ``"race"`` checks
start on worker threads and the model is called at once (:class:`~._input_race.InputRace`:
nothing of the call leaves the run before they passed). A ``cancel()`` while a check is
pending returns as fast as without one (the check's ``cancel_token`` is cancelled and the
check abandoned), and a check past its ``timeout`` trips (or passes, ``on_error="pass"``).

``Redact(text)`` replaces the prompt's text (model view, history, store); a trip withdraws
the prompt, so ``agent.messages`` is left as it was before the call.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence

from .._guardrails._checks import (
    Guardrail,
    GuardrailTrip,
    GuardView,
    Redact,
    Trip,
    pattern_verdict,
)
from .._guardrails._pattern import PatternGuard
from ..cancel import CancelToken
from ..events import AgentEvent
from ..messages import ContentBlock, Message
from ._context import RunContext
from ._guard_tools import guardrail_tripped
from ._input_race import InputRace, wait_for_check

__all__ = ["check_inject", "check_input"]

logger = logging.getLogger(__name__)


def check_input(ctx: RunContext) -> Generator[AgentEvent, None, InputRace | None]:
    """Check the run's prompt (the user message it answers) before its first model call:
    it is redacted in place, or the run stops at the trip. Returns the race of the
    ``"race"`` checks, to start as the model call starts (``None``: none)."""
    guards = ctx.settings.guardrails
    checks = guards.stage("input") if guards is not None else ()
    if not checks:
        return None
    prompt = ctx.messages[ctx.history_start]
    original = _text(prompt["content"])
    before = tuple(ctx.messages[: ctx.history_start])
    first = [c for c in checks if not (isinstance(c, Guardrail) and c.mode == "race")]
    racing = [c for c in checks if isinstance(c, Guardrail) and c.mode == "race"]
    first.sort(key=lambda check: not isinstance(check, PatternGuard))  # patterns first
    text = yield from _judge(ctx, first, original, before)
    if text != original:
        ctx.redact_prompt(text)
    if not racing:
        ctx.pass_prompt()
        return None
    return InputRace(ctx, racing, text, before)


def check_inject(
    ctx: RunContext, blocks: list[ContentBlock]
) -> Generator[AgentEvent, None, list[ContentBlock]]:
    """Check injected input before it is committed to the history: every input check, each
    waited for (whatever its mode). Returns the blocks, redacted; a trip stops the run (the
    inject is not in the history).

    ``blocks`` were taken with the inbox held (``Inbox.take(hold=True)``): more input is
    refused while they are checked and taken again once they passed, so a trip never drops
    input the run accepted. A run that ends while they are checked (a cancel, which never
    waits for the check) hands them back in its result (``RunContext.hand_back``)."""
    guards = ctx.settings.guardrails
    checks = guards.stage("input") if guards is not None else ()
    if not blocks or not checks:
        ctx.inbox.open()
        return blocks
    original = _text(blocks)
    ordered = sorted(checks, key=lambda check: not isinstance(check, PatternGuard))
    try:
        text = yield from _judge(ctx, ordered, original, tuple(ctx.messages))
    except BaseException:  # the run ends: a cancel, another stop, or this input's trip
        tripped = ctx.guardrail is not None and ctx.guardrail.stage == "input"
        if not tripped:  # unchecked, not refused: handed back, never dropped
            ctx.hand_back(blocks)
        raise
    ctx.inbox.open()  # passed (a trip raised above, the inbox held until the run's close)
    if text == original:
        return blocks
    kept: list[ContentBlock] = []
    for block in blocks:  # the text blocks become one of ``text``, where the first was
        if "text" not in block:
            kept.append(block)
        elif not any("text" in seen for seen in kept):
            kept.append({"text": text})
    return kept


def _text(blocks: Sequence[ContentBlock]) -> str:
    return "".join(block["text"] for block in blocks if "text" in block)


def _judge(
    ctx: RunContext,
    checks: Sequence[Guardrail | PatternGuard],
    text: str,
    before: tuple[Message, ...],
) -> Generator[AgentEvent, None, str]:
    """Each check in turn on ``text`` (a pattern in this thread, a check on a worker thread,
    waited for): the text, redacted; at a trip the run stops."""
    for check in checks:
        if isinstance(check, PatternGuard):
            verdict: Trip | Redact | None = pattern_verdict(check, text)
        else:
            view = GuardView(
                stage="input", run_id=ctx.run_id, text=text, pending=text, messages=before,
                cancel_token=CancelToken(),
            )  # fmt: skip
            verdict = wait_for_check(ctx, check, view)
        if isinstance(verdict, Trip):
            trip = GuardrailTrip(
                name=check.name, stage="input", reason=verdict.reason, run_id=ctx.run_id
            )
            yield guardrail_tripped(trip)
            ctx.stop_at_guardrail(trip)
        if isinstance(verdict, Redact):
            text = verdict.text
    return text
