"""The model step: one model call of a run, with retries, the context policy's view,
structured-output partials and a cancel checkpoint on every stream event.

The assistant message is appended whole (a cancelled stream's partial message ends
"Cancelled by user"); the step names what follows: ``tools``, ``output`` (with an output
type), ``finish``, or ``max_cycles`` at the cycle limit.

A new run's first call checks its prompt first (:mod:`._guard_input`); race-mode input checks
run against the call (:mod:`._input_race`): its events are held and released once they
passed, and the answer is taken only after. A call that nothing gates (no output guardrails,
no input checks pending) streams through a loop of its own, as before guardrails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import replace
from typing import Any

from .._run_state import Step, StepName
from ..cancel import CancelledError, CancelScope
from ..errors import ContextWindowOverflowError, ModelStreamError
from ..events import AgentEvent, MessageComplete, ModelRetry
from ..messages import CANCELLED_TEXT, StreamEvent
from ..models._answer import answered_by, answering_model, read_until_content
from ..models.base import ModelRequest
from ._assemble import MessageAssembler
from ._context import RunContext
from ._guard_input import check_input
from ._guard_output import output_guard, stop_at_output_trip
from ._output import output_request, partial_tracker

__all__ = ["model_step"]

logger = logging.getLogger("agent_sync.run._steps")  # one logger name for every step


def model_step(
    ctx: RunContext, *, redo: bool = False
) -> Generator[AgentEvent, None, StepName | None]:
    """One model call (with retries): append the assistant message, name what follows.
    ``redo``: the call again, the first having been discarded (an input redaction)."""
    _before_model_call(ctx)
    race = None  # the prompt's race-mode input checks, pending while the call streams
    if ctx.cycle == 0 and ctx.settings.guardrails is not None:  # a new run's prompt
        race = yield from check_input(ctx)
    if ctx.cycle >= ctx.settings.max_cycles and not redo:
        return "max_cycles"
    budget = ctx.settings.budget
    if budget is not None:  # requests, tokens and cost so far: a limit reached stops here
        ctx.stop_at_limit(budget.before_call(ctx.cycle, ctx.usage, ctx.cost))
    cycle = ctx.begin_model_call()
    settings, scope, hooks = ctx.settings, ctx.scope, ctx.hooks
    keeper = settings.context
    request = ModelRequest(
        messages=tuple(ctx.messages if keeper is None else keeper.view(ctx)),
        system_prompt=settings.system_prompt,
        tool_specs=settings.tool_specs,
        params=settings.params,
        cache=ctx.cache,
        output=output_request(ctx),
    )
    hooks.before_model_call(
        run_id=ctx.run_id, cycle=cycle, messages=request.messages, model=settings.model
    )
    started = time.perf_counter()
    assembler = MessageAssembler(emit_deltas=ctx.emit_deltas, run_id=ctx.run_id)
    add, cancelled = assembler.add, scope.event.is_set  # the per-chunk hot path
    guard = output_guard(ctx)  # None without output guardrails: one `if` per chunk
    # partials show the answer before the guardrails passed it: none with output guardrails
    partials = partial_tracker(ctx) if guard is None else None
    held: list[AgentEvent] | None = None if race is None else []  # until the checks pass
    try:
        if race is not None:
            race.start()  # the checks race the call from here
        call = scope if race is None else race.call  # a race may discard the call alone
        stream, request = yield from _open_fitting(ctx, request, call)
        if race is not None:
            stream = race.pump(stream)
        try:
            if guard is None and held is None:  # nothing gates the answer: the hot path
                for event in stream:  # (its own loop: no guardrail test per chunk)
                    delta = add(event)
                    if delta is not None:
                        yield delta
                    if partials is not None and (partial := partials.feed(event)) is not None:
                        yield partial
                    if cancelled():  # checkpoint: every stream event
                        raise CancelledError(scope.reason or "cancelled")
            else:  # guardrails release the answer, or input checks hold it
                for event in stream:
                    delta = add(event)
                    if guard is not None:  # the seam where the answer is released
                        shown = guard.feed(event)
                        if guard.trip is not None:
                            break
                        delta = shown[-1] if shown else None
                        for earlier in shown[:-1]:  # released text of two blocks at once
                            if held is None:
                                yield earlier
                                continue
                            held = yield from race.hold(held, earlier)  # type: ignore[union-attr]
                    if held is not None:  # input checks pending (race): held back, in order
                        held = yield from race.hold(held, delta)  # type: ignore[union-attr]
                    elif delta is not None:
                        yield delta
                    if partials is not None and (partial := partials.feed(event)) is not None:
                        if held is None:
                            yield partial
                        else:
                            held.append(partial)
                    if cancelled():  # checkpoint: every stream event
                        raise CancelledError(scope.reason or "cancelled")
        finally:
            _close(stream)
        if race is not None:  # nothing leaves before the input checks passed
            yield from race.settle(held)
            held = None
        if guard is not None and guard.trip is None and assembler.stop_reason is not None:
            yield from guard.finish(assembler)  # the rest, judged and settled; or the trip
        tripped = guard is not None and guard.trip is not None  # stopped below
        if not tripped and assembler.stop_reason is None:
            # A truncated stream is never a finished answer. After an abort a provider
            # may simply stop yielding (models.base): then it is the cancel (below).
            raise ModelStreamError(
                "the model stream ended before its stop event (messageStop): "
                "the response is incomplete",
                provider=type(settings.model).__name__,
            )
    except BaseException as exc:
        duration = time.perf_counter() - started
        ctx.end_model_call(duration)
        interrupted = not isinstance(exc, Exception)  # closed generator, Ctrl-C, exit
        if guard is not None and guard.trip is not None and not interrupted:
            # a judge's trip woke the loop (it cancelled the scope): stop at the trip
            yield from stop_at_output_trip(ctx, guard, assembler, cycle, duration)  # raises
        if guard is not None:
            guard.close()  # a pending judge is told to stop, never waited for
        cut = scope.cancelled or interrupted
        if cut:  # whatever the provider raised after an abort is the cancel, not an error
            if held is not None:  # the input checks had not passed: nothing was released
                ctx.messages.append({"role": "assistant", "content": [{"text": CANCELLED_TEXT}]})
            else:
                ctx.messages.append(
                    assembler.partial(CANCELLED_TEXT)
                    if guard is None  # with guardrails, only what they released is kept
                    else guard.stopped_message(CANCELLED_TEXT)
                )
            ctx.count_call(assembler.usage, assembler.first_text_at)
        if not interrupted:
            # after an abort, whatever the provider raised is the cancel: say so
            error = CancelledError(scope.reason or "cancelled") if cut else exc
            hooks.model_call_failed(
                run_id=ctx.run_id,
                cycle=cycle,
                usage=assembler.usage,
                error=error,
                duration_s=duration,
            )
        if race is not None and interrupted:
            race.close()
        elif race is not None:  # the call raced the input checks
            redacted = yield from race.leave(exc, cut)  # a trip stops the run here
            if redacted is not None:  # the call saw the original prompt: discarded
                ctx.count_call(assembler.usage, None)
                ctx.redact_prompt(redacted)
                return (yield from model_step(ctx, redo=True))
        if cut and not interrupted:
            raise CancelledError(scope.reason or "cancelled") from exc
        raise
    duration = time.perf_counter() - started
    ctx.end_model_call(duration)
    if guard is not None:
        if guard.trip is not None:
            yield from stop_at_output_trip(ctx, guard, assembler, cycle, duration)  # raises
        guard.close()
    assembled = assembler.finish()
    ctx.count_call(assembler.usage, assembler.first_text_at)
    if keeper is not None:
        keeper.observe(ctx, request.messages, assembler.usage)
    message = assembled.message
    ctx.take_answer(assembled)
    follows: StepName
    if settings.output is not None:
        follows = "output"  # the answer is read and validated there (run/_output.py)
    elif any("toolUse" in block for block in message["content"]):
        follows = "tools"
    else:
        follows = "finish"
    ctx.keep_progress(follows)  # a resumable run's: committed before anyone is told of it
    # (the seam where the answer is released: the event, then the hooks)
    yield MessageComplete(message=message, run_id=ctx.run_id)
    hooks.after_model_call(
        run_id=ctx.run_id,
        cycle=cycle,
        message=message,
        stop_reason=assembled.stop_reason,
        usage=assembled.usage,
        duration_s=duration,
        response=assembler.stop,  # the provider's own stop reason, response id and model
    )
    if follows == "finish":
        ctx.add_step(Step(cycle=cycle, message=message, tool_results=()))
    if budget is not None and ctx.usage_limit is None:
        passed = budget.after_response(ctx.usage, ctx.cost)
        if follows == "tools":  # nothing it asked for runs: its calls answered "not run"
            ctx.stop_at_limit(passed)
        ctx.note_limit(passed)  # a final answer is kept; the run ends naming the limit
    return follows


def _before_model_call(ctx: RunContext) -> None:
    """The checkpoint before a model call: a cancel, now or after the turn, stops here."""
    ctx.scope.end_of_turn()
    ctx.scope.raise_if_cancelled()


def _open_fitting(
    ctx: RunContext, request: ModelRequest, call: CancelScope
) -> Generator[AgentEvent, None, tuple[Iterator[StreamEvent], ModelRequest]]:
    """:func:`_open_stream`; with a context policy, a view the provider refuses as too long
    is retried once with at most half of it. Returns the stream and the request sent."""
    try:
        return (yield from _open_stream(ctx, request, call)), request
    except ContextWindowOverflowError:
        keeper = ctx.settings.context
        smaller = None if keeper is None else keeper.shrink(request.messages)
        if smaller is None:
            raise
    request = replace(request, messages=tuple(smaller))
    return (yield from _open_stream(ctx, request, call)), request


def _open_stream(
    ctx: RunContext, request: ModelRequest, call: CancelScope
) -> Generator[AgentEvent, None, Iterator[StreamEvent]]:
    """Start a model call with retries; return its events from the first content on.

    Errors raised before the first content event are retried by the policy; the events
    before that point (``messageStart``) are buffered and replayed. ``call``: the scope the
    model is given, the run's (or one linked to it that aborts this call alone).
    """
    scope, model = ctx.scope, ctx.settings.model
    delays: list[float] = []
    last_error = ""
    for attempt in ctx.settings.retry.attempts(scope, delays):
        if delays:
            delay = delays.pop()
            number = attempt.retry_state.attempt_number - 1
            logger.debug("attempt=<%d>, delay_s=<%.2f> | retrying model call", number, delay)
            ctx.enter_retry_wait()  # before the event: whoever sees it sees the phase
            yield ModelRetry(attempt=number, delay=delay, error=last_error, run_id=ctx.run_id)
            scope.wait(delay)  # checkpoint: back-off ends at once on cancel
            ctx.leave_retry_wait()
        with attempt:
            scope.raise_if_cancelled()  # never send a request after a cancel
            stream: Iterator[StreamEvent] = iter(())
            try:
                # spans the provider makes (e.g. its SDK's) nest under the call's
                with ctx.hooks.model_call_scope(ctx.cycle):
                    stream = iter(model.stream(request, cancel=call))
                    head = read_until_content(stream)
            except BaseException as exc:
                _close(stream)
                last_error = f"{type(exc).__name__}: {exc}"
                raise
            answered = answered_by(head, model)
            if answered is not None:
                ctx.answered_by(answered)
                ctx.hooks.model_answered(ctx.cycle, answering_model(stream, model))
            return _chain(head, stream)
    raise AssertionError("unreachable: tenacity either returns or raises")


def _chain(head: Sequence[StreamEvent], rest: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    try:
        yield from head
        yield from rest
    finally:
        _close(rest)


def _close(stream: Iterator[Any]) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()
