"""Input checks on worker threads (DESIGN 13): waited for before the model call (``"block"``,
:func:`wait_for_check`), or raced against it (``"race"``, :class:`InputRace`).

The race: the run's first model call starts at once while its prompt's race checks run on
worker threads, and nothing of the call leaves the run before every check passed. The model
step holds its events (:meth:`InputRace.hold`) and releases them, in order, as soon as the
checks pass; the stream is read through :meth:`InputRace.pump` meanwhile, which reads it on a
helper thread so the loop's thread wakes the moment the checks settle (not at the model's
next chunk), and hands the stream back to the loop's thread once they passed. A check that
trips records the trip while the run's scope is live, then cancels the scope: the model call
stops through the cancel path, and the model step's failure path (:meth:`InputRace.leave`)
stops the run at the trip (the trip was first: :meth:`RunContext.stop_at_guardrail` with
``claimed``). A ``Redact`` discards the call made with the original prompt
(:class:`InputRedacted`): aborted as the checks settle on it (through
:attr:`InputRace.call`, the call's own scope), never read on; the model step calls again
with the redacted prompt. A check past its ``timeout`` trips (or passes,
``on_error="pass"``), and a check still running when the run stops waiting for it is
abandoned (:class:`~._check_worker.CheckWorker`).
A ``cancel()`` ends the waits at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Final

from .._guardrails._checks import Guardrail, GuardrailTrip, GuardView, Redact, Trip
from ..cancel import CancelledError, CancelScope, CancelToken
from ..events import AgentEvent
from ..messages import Message, StreamEvent
from ._check_worker import CheckWorker
from ._context import RunContext
from ._guard_judges import TripClaim
from ._guard_tools import guardrail_tripped

__all__ = ["InputRace", "InputRedacted", "wait_for_check"]

_WAKE: Final[StreamEvent] = {}
"""What :meth:`InputRace.pump` yields when the checks pass while the model is silent: an event
every reader of a stream ignores, so the loop goes round once and releases what it held."""


class InputRedacted(CancelledError):
    """A race check redacted the prompt: the model call made with the original is discarded
    (raised in the model step, which calls again with ``text``)."""

    def __init__(self, text: str) -> None:
        super().__init__("discarded: an input guardrail redacted the prompt")
        self.text = text


def wait_for_check(ctx: RunContext, check: Guardrail, view: GuardView) -> Trip | Redact | None:
    """``check.judge(view)`` on a worker thread, waited for up to its timeout (past it: the
    check's failure verdict) and cut short by the run's cancel (:class:`CancelledError`); a
    check left running is abandoned."""
    done = threading.Event()
    worker = CheckWorker(check, view, lambda _: done.set())
    unregister = ctx.scope.register_abort(done.set)
    try:
        worker.start()
        done.wait(check.timeout)
    finally:
        unregister()
        view.cancel_token.cancel("input check over")
        worker.abandon()  # a no-op for a check that returned
    ctx.scope.raise_if_cancelled()
    return worker.verdict if worker.finished else check.failed("timeout")


class InputRace:
    """The race checks of one prompt, and the hold of the model call raced against them.

    Thread rules: check threads call only :meth:`_judged`; everything else is the loop's.
    ``passed`` and ``trip`` are written under ``_cond`` and read by the loop without it
    (a bool and a reference: a stale read only delays by one event).
    """

    def __init__(
        self, ctx: RunContext, checks: Sequence[Guardrail], text: str, before: tuple[Message, ...]
    ) -> None:
        self._ctx = ctx
        self._scope: CancelScope = ctx.scope
        self._cond = threading.Condition()
        self._token = CancelToken()  # every view's: cancelled once the race is over
        self._before = before
        self._verdicts: dict[int, Trip | Redact | None] = {}
        self._settled = False  # every verdict known, or a trip
        self.passed = False  # settled, and every check passed as it is: release
        self._claim = TripClaim()  # a trip, claimed while the scope was live
        self._workers = [
            CheckWorker(check, self._view(text, self._token), self._judged) for check in checks
        ]
        self._deadlines = [0.0] * len(checks)
        self._unregister: Callable[[], None] = _nothing
        self.call = CancelScope(ctx.run_id)
        """The model call's scope: the run's cancel reaches it (linked in :meth:`start`), and
        a redaction aborts the call alone."""
        self._unlink: Callable[[], None] = _nothing

    def start(self) -> None:
        """Start the checks: the first thing of the model call's ``try`` (so a failure before
        it leaves no thread behind)."""
        self._unregister = self._scope.register_abort(self._wake)
        self._unlink = self._scope.link(self.call)
        now = time.monotonic()
        self._deadlines = [now + worker.check.timeout for worker in self._workers]
        for worker in self._workers:
            worker.start()

    @property
    def trip(self) -> GuardrailTrip | None:
        """The trip that stops the run (claimed while its scope was live), if one did."""
        return self._claim.trip

    def _view(self, text: str, token: CancelToken) -> GuardView:
        run_id = self._ctx.run_id
        return GuardView(
            stage="input", run_id=run_id, text=text, pending=text, messages=self._before,
            cancel_token=token,
        )  # fmt: skip

    # -- check threads --

    def _judged(self, worker: CheckWorker) -> None:
        self._record(self._workers.index(worker), worker.verdict)

    def _record(self, index: int, verdict: Trip | Redact | None) -> None:
        """One check's verdict (its thread's, or a timeout's); a trip cancels the run."""
        won = False
        with self._cond:
            if self._settled or index in self._verdicts:
                return
            self._verdicts[index] = verdict
            if isinstance(verdict, Trip):
                self._settled = True  # claimed with it (the first of a trip and a cancel wins)
                won = self._claim.claim(self._trip(index, verdict), self._scope)
            elif len(self._verdicts) == len(self._workers):
                self._settled = True
                self.passed = not any(isinstance(v, Redact) for v in self._verdicts.values())
            self._cond.notify_all()
        if won:
            self._claim.wake(self._scope, self._token)  # stops the model call

    def _trip(self, index: int, verdict: Trip) -> GuardrailTrip:
        name, run_id = self._workers[index].check.name, self._ctx.run_id
        return GuardrailTrip(name=name, stage="input", reason=verdict.reason, run_id=run_id)

    def _tripped(self) -> bool:
        """Whether a check tripped (claimed or not: a cancel may have come first). Under
        ``_cond``."""
        return any(isinstance(verdict, Trip) for verdict in self._verdicts.values())

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- the loop's thread --

    def _expire(self) -> float | None:
        """Give the checks past their timeout their failure verdict; the seconds until the
        next deadline (``None``: none pending)."""
        now = time.monotonic()
        with self._cond:
            if self._settled:
                return None
            pending = [i for i in range(len(self._workers)) if i not in self._verdicts]
        late = [i for i in pending if self._deadlines[i] <= now]
        for index in late:
            worker = self._workers[index]
            self._record(index, worker.check.failed("timeout"))
            worker.abandon()
        left = [self._deadlines[i] - now for i in pending if i not in late]
        return min(left) if left else None

    def _wait(self) -> None:
        """Until every verdict is known or a trip, bounded by the timeouts; a cancel raises."""
        while True:
            timeout = self._expire()
            with self._cond:
                if not self._settled and not self._scope.cancelled:
                    self._cond.wait(timeout)
                    continue
            break
        self._scope.raise_if_cancelled()

    def hold(
        self, held: list[AgentEvent], event: AgentEvent | None
    ) -> Generator[AgentEvent, None, list[AgentEvent] | None]:
        """Hold ``event`` back while the checks are pending; once they passed, release every
        held event in order and return ``None`` (nothing is held from then on)."""
        if event is not None:
            held.append(event)
        if not self.passed:
            return held
        self._ctx.pass_prompt()
        yield from held
        return None

    def pump(self, stream: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
        """``stream``, read on a helper thread while the checks are pending: a wait for the
        model wakes when they pass (:data:`_WAKE`), expire or a cancel comes. Once they
        passed, the helper stops and this thread reads the stream itself."""
        items: deque[StreamEvent] = deque()
        state: dict[str, object] = {}  # "end": StopIteration or the exception; "stop": asked
        cond = self._cond

        def read() -> None:
            try:
                while True:
                    with cond:
                        if "stop" in state:
                            return
                    try:
                        item = next(stream)
                    except BaseException as exc:  # the end, or the stream's failure
                        with cond:
                            state["end"] = exc
                        return
                    with cond:
                        items.append(item)
                        cond.notify_all()
            finally:
                with cond:
                    state["done"] = True
                    closing = "close" in state
                    cond.notify_all()
                if closing:
                    _close(stream)

        reader = threading.Thread(target=read, name="guardrail-input-pump", daemon=True)
        reader.start()
        woke = False  # the loop was woken for the release (once)
        redacted = False  # settled on a redaction: the call is discarded at once
        try:
            while True:
                timeout = self._expire()
                with cond:
                    redacted = self._settled and not self.passed and not self._tripped()
                    if not redacted:
                        waking = self.passed and not woke
                        if waking:
                            state["stop"] = True  # the helper hands the stream back
                        done = "done" in state
                        if not items and not waking and not done and not self._scope.cancelled:
                            cond.wait(timeout)
                            continue
                        item = items.popleft() if items else None
                if redacted:  # aborted (the reader ends, and closes the stream); what it
                    self.call.cancel("discarded: an input guardrail redacted the prompt")
                    with cond:  # read before is taken still (held, never released: the
                        read_before = list(items)  # call's usage is counted)
                        items.clear()
                    yield from read_before
                    break
                if self._scope.cancelled:
                    raise CancelledError(self._scope.reason or "cancelled")
                if item is not None:
                    yield item
                elif waking:
                    woke = True
                    yield _WAKE  # the loop releases what it held, now
                elif done:
                    break
            end = state.get("end")
            if redacted:
                pass
            elif end is None:  # handed back: the rest, read in this thread
                yield from stream
            elif not isinstance(end, StopIteration):
                raise end  # type: ignore[misc]
        finally:
            with cond:
                running = "done" not in state
                if running:  # the helper closes the stream as it ends
                    state["stop"] = state["close"] = True
            if not running:
                _close(stream)
        if redacted:  # the call made with the original prompt is discarded: never read on
            raise InputRedacted(self._redacted())

    def settle(self, held: list[AgentEvent] | None) -> Generator[AgentEvent, None, None]:
        """The model's answer ended: wait for the checks (bounded by their timeouts and the
        run's cancel), then release what is held. A trip or a cancel raises
        :class:`CancelledError`, a redaction :class:`InputRedacted`."""
        try:
            self._wait()
            if self.trip is not None:
                raise CancelledError(self._scope.reason or "cancelled")
            if not self.passed:
                raise InputRedacted(self._redacted())
        finally:
            self.close()
        self._ctx.pass_prompt()
        if held:
            yield from held

    def _redacted(self) -> str:
        """The prompt every redaction applied to: the first check's, then each later one that
        redacted judges the text so far, in order, as in block mode (a trip stops the run)."""
        redacts = [
            (index, verdict)
            for index, verdict in sorted(self._verdicts.items())
            if isinstance(verdict, Redact)
        ]
        text = redacts[0][1].text
        for index, _ in redacts[1:]:
            check = self._workers[index].check
            verdict = wait_for_check(self._ctx, check, self._view(text, CancelToken()))
            if isinstance(verdict, Trip):  # the run stops at it (leave), or at a cancel
                if self._claim.claim(self._trip(index, verdict), self._scope):
                    self._claim.wake(self._scope, self._token)
                raise CancelledError(f"guardrail: {check.name}")
            if isinstance(verdict, Redact):
                text = verdict.text
        return text

    def leave(self, exc: BaseException, cut: bool) -> Generator[AgentEvent, None, str | None]:
        """The model call raced against the checks ended by ``exc`` (``cut``: by a cancel):
        a redaction's text is returned (the call is made again with it); a model error waits
        for the checks first (a trip wins over it); at a trip the run stops here."""
        try:
            if isinstance(exc, InputRedacted):
                self._ctx.pass_prompt()  # as redacted: the call is made again with it
                return exc.text
            if not cut and not self._settled:
                try:
                    self._wait()
                except CancelledError:
                    pass  # a cancel: the run ends as cancelled, or at a trip that came first
            if self.trip is not None:
                yield guardrail_tripped(self.trip)
                self._ctx.stop_at_guardrail(self.trip, claimed=True)
            return None
        finally:
            self.close()

    def close(self) -> None:
        """The race is over: checks still running are told to stop, and abandoned."""
        self._unregister()
        self._unlink()
        self._token.cancel("input checks over")
        for worker in self._workers:
            worker.abandon()


def _nothing() -> None:
    pass


def _close(stream: Iterator[StreamEvent]) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()
