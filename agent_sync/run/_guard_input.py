"""The input stage of a run's guardrails (DESIGN 13): the prompt is checked before the
run's first model call.

Every input check runs before the model is called (the ``"block"`` mode; a ``"race"``
check is run the same way for now: nothing of the run leaves before it passed, and the
model call waits for it). Patterns run in the loop's thread; a :class:`Guardrail` runs on a
worker thread of its own, waited for with its ``timeout`` and the run's cancel: a
``cancel()`` while a check is pending returns as fast as without one (the check's
``cancel_token`` is cancelled and the thread left to end by itself), and a check past its
``timeout`` trips (or passes, ``on_error="pass"``).

``Redact(text)`` replaces the prompt's text (model view, history, store); a trip withdraws
the prompt, so ``agent.messages`` is left as it was before the call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator

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
from ._context import RunContext
from ._guard_tools import guardrail_tripped

__all__ = ["check_input"]

logger = logging.getLogger(__name__)


def check_input(ctx: RunContext) -> Generator[AgentEvent, None, None]:
    """Check the run's prompt (the user message it answers) before its first model call:
    it is redacted in place, or the run stops at the trip."""
    guards = ctx.settings.guardrails
    checks = guards.stage("input") if guards is not None else ()
    if not checks:
        return
    prompt = ctx.messages[ctx.history_start]
    text = "".join(block["text"] for block in prompt["content"] if "text" in block)
    original = text
    before = tuple(ctx.messages[: ctx.history_start])
    token = CancelToken()
    try:
        for check in checks:
            if isinstance(check, PatternGuard):
                verdict: Trip | Redact | None = pattern_verdict(check, text)
            else:
                view = GuardView(
                    stage="input",
                    run_id=ctx.run_id,
                    text=text,
                    pending=text,
                    messages=before,
                    cancel_token=token,
                )
                verdict = _on_worker(ctx, check, view)
            if isinstance(verdict, Trip):
                trip = GuardrailTrip(
                    name=check.name, stage="input", reason=verdict.reason, run_id=ctx.run_id
                )
                yield guardrail_tripped(trip)
                ctx.stop_at_guardrail(trip)
            if isinstance(verdict, Redact):
                text = verdict.text
    finally:
        token.cancel("input checks over")  # a check still running is told to stop
    if text != original:
        ctx.redact_prompt(text)
    ctx.input_passed()  # injected input is taken from now on (refused while checking)


def _on_worker(ctx: RunContext, check: Guardrail, view: GuardView) -> Trip | Redact | None:
    """``check.judge(view)`` on a worker thread, waited for up to its timeout and cut short
    by the run's cancel (:class:`CancelledError`)."""
    done = threading.Event()
    verdicts: list[Trip | Redact | None] = []

    def judge() -> None:
        verdicts.append(check.judge(view))
        done.set()

    unregister = ctx.scope.register_abort(done.set)
    try:
        worker = threading.Thread(target=judge, name=f"guardrail-{check.name}", daemon=True)
        worker.start()
        finished = done.wait(check.timeout)
        ctx.scope.raise_if_cancelled()
    finally:
        unregister()
    if not finished or not verdicts:
        return check.failed("timeout")
    return verdicts[0]
