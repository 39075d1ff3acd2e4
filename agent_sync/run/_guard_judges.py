"""The output judges of one model call (DESIGN 13, ``every=N``): each judge's checkpoints run
on a worker thread of its own, in order, and their verdicts come back to the loop's thread.

Design. One *lane* per judge: a queue of checkpoints and at most one worker thread taking
them in order. A checkpoint that comes while the judge is still busy waits in its lane (no
thread per checkpoint); the loop's thread never waits for a judge while the model streams.
Verdicts that pass or redact go to an inbox the loop's thread drains (:meth:`take`); at the
message's end it waits for the last ones (:meth:`wait`), woken by each verdict and by the
run's cancel.

A trip is the exception: it must stop the run at once, though the loop's thread may be
blocked on a silent model stream. The judge's thread (or the deadline thread, for a
timeout) claims it (:class:`TripClaim`: the first of the loop's checks, the judges and a real
cancel wins), tells the other judges to stop (their ``cancel_token``) and cancels the run's
scope, whose abort callbacks wake the loop; the loop then stops the run at the claimed trip.

Timeouts: each check runs under a deadline of its ``timeout`` (the process's one deadline
thread). Past it, its verdict is ``Guardrail.failed("timeout")`` (a trip, or a pass with
``on_error="pass"``); its worker, stuck in the check, is abandoned then (it counts against the
abandoned-thread cap of tools until its check returns) and the loop's thread starts a fresh
worker for the lane's next checkpoints.

Close (the model call is over, however it ended): the judges' ``cancel_token`` is cancelled,
idle workers end, and a worker still inside a check is left to end by itself: never waited
for. One that is still running after the run's tool grace period is abandoned (counted
against the same cap, given back as its check returns).

Known races: a verdict that arrives after close is dropped; a timeout racing the check's
return is decided under the lanes' lock (the first wins, the other is dropped).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from .._deadlines import schedule
from .._guardrails._checks import Guardrail, GuardrailTrip, GuardView, Redact, Trip
from .._guardrails._judged import Checkpoint
from ..cancel import CancelScope, CancelToken
from ..tools._abandoned import Abandonable

__all__ = ["Job", "JudgeLanes", "TripClaim"]

logger = logging.getLogger(__name__)


class TripClaim:
    """The trip of one model call's output (or of one prompt's race checks), claimed once by
    whichever thread trips first."""

    __slots__ = ("_lock", "from_worker", "trip")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.trip: GuardrailTrip | None = None
        """The trip that won, if one did."""
        self.from_worker = False
        """Whether the trip came from a judge's (or the deadline) thread, which cancelled
        the scope to wake the loop (no real cancel came before it)."""

    def claim(self, trip: GuardrailTrip, scope: CancelScope | None = None) -> bool:
        """Claim ``trip``; from a worker (``scope`` given) only while the scope is not
        cancelled (a real cancel that came first wins). ``True``: it won."""
        with self._lock:
            if self.trip is not None or (scope is not None and scope.cancelled):
                return False
            self.trip = trip
            self.from_worker = scope is not None
            return True

    def wake(self, scope: CancelScope, token: CancelToken) -> None:
        """After a worker's claim won: the other checks are told to stop (``token``) and the
        run's scope is cancelled, whose abort callbacks wake the loop wherever it waits (a
        silent model stream, a wait for checks). Called outside any lock of the caller."""
        token.cancel("a guardrail tripped")
        scope.cancel(f"guardrail: {self.trip.name if self.trip is not None else 'tripped'}")


@dataclass(eq=False)
class Job:
    """One checkpoint of one of the message's texts, for its judge."""

    text: int  # which text: the answer or the reasoning (run._guard_output)
    checkpoint: Checkpoint
    view: GuardView


@dataclass(eq=False)
class _Worker:
    job: Job | None = None  # the checkpoint it is judging (None: idle)
    thread: Abandonable = field(default_factory=Abandonable)  # given up: left to end by itself


@dataclass(eq=False)
class _Lane:
    judge: Guardrail
    jobs: deque[Job] = field(default_factory=deque)
    worker: _Worker | None = None


Verdict = tuple[Job, "Redact | None"]


class JudgeLanes:
    """The judges of one model call, one lane each (see the module docstring).

    Args:
        judges: The output checks with ``every``, in order.
        scope: The run's cancel scope (a trip cancels it; a cancel wakes :meth:`wait`).
        claim: The call's trip claim, shared with the loop's checks.
        token: The judges' ``cancel_token``.
        run_id: The run's id (for the trip).
    """

    def __init__(
        self,
        judges: Sequence[Guardrail],
        scope: CancelScope,
        claim: TripClaim,
        token: CancelToken,
        run_id: str,
    ) -> None:
        self._lanes = [_Lane(judge) for judge in judges]
        self._scope = scope
        self._claim = claim
        self._token = token
        self._run_id = run_id
        self._cond = threading.Condition(threading.Lock())
        self._inbox: list[Verdict] = []
        self._outstanding = 0  # checkpoints submitted and not answered
        self._closed = False

    @property
    def outstanding(self) -> int:
        """Checkpoints submitted and not answered yet."""
        return self._outstanding

    def submit(self, job: Job) -> None:
        """Queue ``job`` in its judge's lane (the loop's thread)."""
        with self._cond:
            self._lanes[job.checkpoint.judge].jobs.append(job)
            self._outstanding += 1
            self._cond.notify_all()
        self._staff()

    def take(self) -> list[Verdict]:
        """The verdicts that passed or redacted since the last call, in arrival order."""
        if not self._inbox:  # a racy read: a verdict landing now is taken next time
            return []
        with self._cond:
            taken, self._inbox = self._inbox, []
        self._staff()  # a lane whose worker timed out gets a fresh one
        return taken

    def wait(self) -> None:
        """Block until a verdict is in, nothing is outstanding, or the run is cancelled (a
        trip cancels it too): the caller then raises at the cancel."""
        unregister = self._scope.register_abort(self._wake)
        try:
            with self._cond:
                while not (self._inbox or not self._outstanding or self._scope.cancelled):
                    self._cond.wait()
        finally:
            unregister()

    def close(self, grace_period: float) -> None:
        """The model call is over: the judges are told to stop, idle workers end, busy ones
        are left to end by themselves (abandoned after ``grace_period``). Never blocks."""
        self._token.cancel("model call over")
        with self._cond:
            self._closed = True
            self._inbox = []
            busy = [
                lane.worker for lane in self._lanes
                if lane.worker is not None and lane.worker.job is not None
            ]  # fmt: skip
            self._cond.notify_all()
        for worker in busy:
            schedule(grace_period, partial(self._abandon, worker))

    # -- worker and deadline threads --

    def _staff(self) -> None:
        """Start a worker for each lane with checkpoints and none (the loop's thread)."""
        starting: list[tuple[_Lane, _Worker]] = []
        with self._cond:
            if self._closed:
                return
            for lane in self._lanes:
                if lane.jobs and lane.worker is None:
                    lane.worker = _Worker()
                    starting.append((lane, lane.worker))
        for lane, worker in starting:
            threading.Thread(
                target=self._work, args=(lane, worker), daemon=True,
                name=f"guardrail-{lane.judge.name}",
            ).start()  # fmt: skip

    def _work(self, lane: _Lane, worker: _Worker) -> None:
        try:
            while (job := self._next(lane, worker)) is not None:
                judge = lane.judge
                deadline = schedule(judge.timeout, partial(self._timed_out, worker, job))
                verdict = judge.judge(job.view)
                with self._cond:
                    mine = worker.job is job  # else the timeout answered it
                    worker.job = None
                deadline.cancel()
                if not mine:
                    return
                self._answer(judge, job, verdict)
        finally:
            with self._cond:
                if lane.worker is worker:
                    lane.worker = None
            worker.thread.end()  # its slot of the cap given back, if it was given up

    def _next(self, lane: _Lane, worker: _Worker) -> Job | None:
        with self._cond:
            thread = worker.thread
            while not (lane.jobs or self._closed or thread.abandoned or self._claim.trip):
                self._cond.wait()
            if self._closed or thread.abandoned or self._claim.trip is not None:
                return None  # nothing is judged after a trip
            worker.job = lane.jobs.popleft()
            return worker.job

    def _timed_out(self, worker: _Worker, job: Job) -> None:
        """The deadline thread: ``job``'s check ran past its timeout."""
        with self._cond:
            if worker.job is not job:
                return  # it answered first
            worker.job = None
            lane = self._lanes[job.checkpoint.judge]
            if lane.worker is worker:
                lane.worker = None  # the loop's thread staffs the lane anew
        self._mark_abandoned(worker)
        judge = self._lanes[job.checkpoint.judge].judge
        self._answer(judge, job, judge.failed("timeout"))

    def _abandon(self, worker: _Worker) -> None:
        """The deadline thread: the run is over and its grace period too."""
        with self._cond:
            still = worker.job is not None
        if still:
            self._mark_abandoned(worker)

    def _mark_abandoned(self, worker: _Worker) -> None:
        """``worker`` is left to end by itself (:class:`Abandonable`: counted against the
        abandoned-thread cap until its thread ends, never waited for)."""
        if worker.thread.abandon():
            with self._cond:
                self._cond.notify_all()  # an idle worker ends

    def _answer(self, judge: Guardrail, job: Job, verdict: Trip | Redact | None) -> None:
        if self._closed:
            return  # the call is over: nobody waits for it
        if isinstance(verdict, Trip):  # claimed (and the scope cancelled) before it counts
            self._trip(judge, verdict)  # as answered: a waiting loop wakes to the cancel
        with self._cond:
            if self._closed:
                return
            self._outstanding -= 1
            if not isinstance(verdict, Trip):
                self._inbox.append((job, verdict))
            self._cond.notify_all()

    def _trip(self, judge: Guardrail, verdict: Trip) -> None:
        trip = GuardrailTrip(name=judge.name, stage="output", reason=verdict.reason,
                             run_id=self._run_id)  # fmt: skip
        if self._claim.claim(trip, self._scope):
            self._claim.wake(self._scope, self._token)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
