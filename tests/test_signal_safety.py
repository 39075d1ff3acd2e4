"""Ctrl-C at any point of the code a caller runs against shared state leaves no lock held.

The rule (agent_sync/_signal_safe.py): a caller's thread takes no lock shared beyond its own
run through Python-level code, because a signal handler's ``KeyboardInterrupt`` can land
between any two bytecodes there. Each test runs one caller-side operation over and over,
raising ``KeyboardInterrupt`` at its 1st, 2nd, ... n-th interruption point
(tests/fixtures/interrupt_points.py: a hook in the calling thread, so the point is exact and
the test deterministic), then checks from another thread that everything the operation
shares still works and that the process-wide objects' locks can still be taken. Every
bytecode (``BYTECODE``) for the deadline scheduler, which takes no lock at all; every point
where CPython runs signal handlers (``SIGNAL``) for code that may take plain locks with
``with``, which a signal cannot split.

A test in a child process does the same through ``agent.invoke(timeout=...)``, the call the
issue saw deadlock, and checks that a timed call in another thread still completes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_sync._deadlines import Deadline, _Scheduler
from agent_sync._signal_safe import Event
from agent_sync.cancel import CancelScope, CancelToken
from agent_sync.errors import AgentSyncError, UsageError
from agent_sync.run import RunState
from agent_sync.run._durable import StoreLink
from agent_sync.stores import MemoryRunStore
from agent_sync.tools import _abandoned
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.interrupt_points import (
    BYTECODE,
    SIGNAL,
    WAIT,
    assert_no_lock_held,
    in_another_thread,
    sweep,
)

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def private_scheduler() -> Iterator[_Scheduler]:
    """A scheduler of the test's own: the process-wide one is never put at risk."""
    scheduler = _Scheduler()
    try:
        yield scheduler
    finally:
        if hasattr(scheduler, "stop"):
            scheduler.stop()


def flush(scheduler: _Scheduler) -> None:
    """In another thread: schedule now, see it fire, schedule and cancel one far away."""

    def check() -> None:
        fired = threading.Event()
        scheduler.schedule(0, fired.set)
        assert fired.wait(WAIT), "a due deadline never fired"
        far = scheduler.schedule(3600, _nothing)
        far.cancel()
        assert far.cancelled

    in_another_thread(check, "the scheduler after the interrupt")


# -- the deadline scheduler: no lock at all, so every bytecode ---------------------------


@pytest.mark.timeout(120)
def test_ctrl_c_anywhere_in_the_first_schedule_leaves_the_scheduler_working() -> None:
    """The first schedule starts the thread: interrupted anywhere, the next one still works."""
    schedulers: list[_Scheduler] = []
    fired: list[int] = []

    def setup() -> Callable[[], object]:
        schedulers.append(_Scheduler())
        return lambda: schedulers[-1].schedule(0, lambda: fired.append(1))

    def check() -> None:
        scheduler = schedulers[-1]
        try:
            flush(scheduler)
            assert_no_lock_held("the first schedule", scheduler)
            assert scheduler.pending_count() == 0  # fired, or never scheduled
        finally:
            if hasattr(scheduler, "stop"):
                scheduler.stop()

    sweep(BYTECODE, setup, check)


@pytest.mark.timeout(120)
def test_ctrl_c_anywhere_in_schedule_leaves_the_scheduler_working() -> None:
    """The issue's case: today a KeyboardInterrupt inside ``Condition.__enter__`` (after the
    lock is taken) leaves the scheduler's lock held, and every later schedule hangs."""
    with private_scheduler() as scheduler:
        flush(scheduler)  # the thread runs

        def check() -> None:
            flush(scheduler)
            assert_no_lock_held("schedule", scheduler)
            assert scheduler.pending_count() == 0

        sweep(BYTECODE, lambda: lambda: scheduler.schedule(0, _nothing), check)


@pytest.mark.timeout(120)
def test_ctrl_c_anywhere_in_cancel_leaves_the_scheduler_working() -> None:
    with private_scheduler() as scheduler:
        flush(scheduler)
        box: list[Deadline] = []

        def setup() -> Callable[[], object]:
            box[:] = [scheduler.schedule(3600, _nothing)]
            return box[0].cancel

        def check() -> None:
            flush(scheduler)
            assert_no_lock_held("cancel", scheduler)
            assert scheduler.pending_count() in (0, 1)  # cancelled, or not yet
            box[0].cancel()  # the interrupted cancel can be done again
            assert box[0].cancelled and scheduler.pending_count() == 0

        sweep(BYTECODE, setup, check)


@pytest.mark.timeout(120)
def test_ctrl_c_anywhere_in_a_cancel_that_waits_for_the_callback() -> None:
    """cancel() while the callback runs waits for it; interrupted anywhere on the way (the
    callback is let go when cancel is about to block), nothing stays held."""
    with private_scheduler() as scheduler:
        flush(scheduler)
        state: dict[str, Any] = {}

        def setup() -> Callable[[], object]:
            entered, release = threading.Event(), threading.Event()

            def callback() -> None:
                entered.set()
                release.wait(WAIT)

            state.update(release=release, deadline=scheduler.schedule(0, callback))
            assert entered.wait(WAIT)
            deadline: Deadline = state["deadline"]
            return deadline.cancel

        def check() -> None:
            state["release"].set()
            flush(scheduler)  # the callback has returned: the thread is past it
            assert state["deadline"].fired and not state["deadline"].cancelled
            assert_no_lock_held("cancel while firing", scheduler)

        sweep(BYTECODE, setup, check, on_block=lambda: state["release"].set())


# -- cancel scopes and tokens: the deadline thread sets their events ---------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("operation", ["wait", "cancel", "register_abort"])
def test_ctrl_c_in_a_scope_never_wedges_the_deadline_that_cancels_it(operation: str) -> None:
    """A run's thread waits on its scope (retry back-off, tools); its ``timeout=`` cancels
    the scope from the deadline thread. Today a Ctrl-C inside ``threading.Event.wait`` can
    leave the event's lock held, and the deadline thread's ``set()`` then hangs for ever."""
    box: list[CancelScope] = []

    def setup() -> Callable[[], object]:
        scope = CancelScope("run_test")
        box[:] = [scope]
        if operation == "wait":
            return lambda: scope.wait(0)
        if operation == "cancel":
            return lambda: scope.cancel("Ctrl-C")
        return lambda: scope.register_abort(_nothing)()

    with private_scheduler() as scheduler:

        def check() -> None:
            scope = box[0]
            cancelled = threading.Event()

            def timeout() -> None:
                scope.cancel("timeout")
                cancelled.set()

            def waits() -> None:
                scheduler.schedule(0, timeout)
                assert cancelled.wait(WAIT), "the deadline thread hangs in the scope's cancel"
                assert scope.wait(WAIT) and scope.event.is_set()

            in_another_thread(waits, "a deadline cancelling the scope")
            flush(scheduler)
            assert_no_lock_held(f"scope.{operation}", scope, scope.event)

        sweep(SIGNAL, setup, check)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("operation", ["link", "unlink", "cancel"])
def test_ctrl_c_in_a_shared_token_leaves_it_usable_by_other_runs(operation: str) -> None:
    """A CancelToken serves several runs (a web request's agents): Ctrl-C in one run's
    link, unlink or cancel must not stop another thread's link or cancel."""
    box: list[CancelToken] = []

    def setup() -> Callable[[], object]:
        token = CancelToken()
        box[:] = [token]
        if operation == "link":
            return lambda: token._link(CancelScope())
        if operation == "unlink":
            unlink = token._link(CancelScope())
            return unlink
        return lambda: token.cancel("Ctrl-C")

    def check() -> None:
        token = box[0]

        def other_run() -> None:
            scope = CancelScope("other")
            unlink = token._link(scope)
            token.cancel("stop")
            assert scope.wait(WAIT)
            unlink()

        in_another_thread(other_run, "another run on the token")
        assert_no_lock_held(f"token.{operation}", token, token.event)

    sweep(SIGNAL, setup, check)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("operation", ["reserve", "release", "set_max"])
def test_ctrl_c_in_the_abandoned_thread_cap_never_leaves_it_locked(operation: str) -> None:
    """The process-wide cap on abandoned tool threads: a plain lock around arithmetic."""
    limit = _abandoned.max_abandoned_tool_threads()

    def setup() -> Callable[[], object]:
        if operation == "reserve":
            return _reserve_and_release
        if operation == "release":
            assert _abandoned.reserve(1)
            return _abandoned.release
        return lambda: _abandoned.set_max_abandoned_tool_threads(limit)

    def check() -> None:
        assert_no_lock_held("the abandoned cap", _abandoned)

        def other_run() -> None:
            assert _abandoned.reserve(1)
            _abandoned.release()

        in_another_thread(other_run, "another run reserving")

    try:
        sweep(SIGNAL, setup, check)
    finally:
        _abandoned.set_max_abandoned_tool_threads(limit)


def test_a_ctrl_c_that_did_not_end_a_main_thread_wait_ends_it_within_a_slice() -> None:
    """The rule of waits in the main thread: a SIGINT that does not interrupt the blocking
    call (it arrived just before the call blocked, or in another thread: here) still ends a
    wait with no timeout at once, not when the wait would have ended."""
    import signal

    assert threading.current_thread() is threading.main_thread()
    event = Event()
    main = threading.main_thread().ident or 0

    def interrupt_from_here() -> None:
        while True:  # until the main thread is inside the event's wait
            frame = sys._current_frames().get(main)
            if frame is not None and frame.f_code is Event.wait.__code__:
                break
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    helper = threading.Thread(target=interrupt_from_here)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            event.wait()
    finally:
        helper.join(HANG_BOUND)
        event.set()


def test_the_signal_safe_event_keeps_the_event_contract() -> None:
    event = Event()
    assert isinstance(event, threading.Event) and not event.is_set()
    assert event.wait(0) is False and event.wait(-1) is False
    woke = threading.Event()
    waiting = threading.Barrier(2, timeout=WAIT)

    def waiter() -> None:
        waiting.wait()
        if event.wait(WAIT):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait()
    event.set()
    thread.join(WAIT)
    assert woke.is_set() and event.wait() and event.wait(0)
    event.clear()
    assert not event.is_set() and event.wait(0) is False
    assert not event._waiters  # timed-out waits do not pile up
    assert repr(event) == "<Event unset>"


# -- through invoke(timeout=...), in a child process: the symptom ------------------

CHILD = r"""
import json, signal, sys, threading
from agent_sync import Agent
from agent_sync._deadlines import _Scheduler
from agent_sync.testing import ScriptedModel
sys.path.insert(0, sys.argv[1])
from tests.fixtures.interrupt_points import BYTECODE, Interrupter, run_interrupted

WAIT = 20.0
schedule_code = _Scheduler.schedule.__code__
report = {"points": 0, "interrupted": 0, "hung_at": None, "timed_out_ok": 0}

def timed_invoke(answer):
    agent = Agent(ScriptedModel([answer], repeat=True))
    return agent.invoke("question", timeout=30)

def timed_call_in_another_thread():
    done = []
    stalled = {"text": "...", "stall_after": 1}
    def work():
        done.append(timed_invoke("fine").text)
        # Due at once: schedule() still hands it to the scheduler thread, which must end
        # it; a longer timeout only made each of the ~80 points wait it out.
        stuck = Agent(ScriptedModel([stalled])).invoke("question", timeout=0.001)
        done.append(f"{stuck.stop_reason}: {stuck.cancel_reason}")
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(WAIT)
    return done

class InsideSchedule(Interrupter):
    # Counts only the points inside _Scheduler.schedule (and what it calls).
    depth = 0
    def trace(self, frame, event, arg):
        if event == "call" and frame.f_code is schedule_code:
            self.depth += 1
        if self.depth == 0:
            return self.trace if event == "call" else None
        if event == "return" and frame.f_code is schedule_code:
            self.depth -= 1
        return super().trace(frame, event, arg)
    def profile(self, frame, event, arg):
        pass
    def interrupt(self, frame):
        if sys.argv[2] == "raise":
            super().interrupt(frame)
        # A real Ctrl-C: SIGINT to this (the main) thread; Python's own handler raises
        # KeyboardInterrupt at the next point it checks, at once (in this hook).
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

timed_invoke("warm-up")  # the scheduler thread runs from here on
counter = InsideSchedule(BYTECODE)
run_interrupted(counter, lambda: timed_invoke("counted"))
report["points"] = counter.points
for at in range(1, counter.points + 1):
    interrupter = InsideSchedule(BYTECODE, at)
    if run_interrupted(interrupter, lambda: timed_invoke("interrupted")):
        report["interrupted"] += 1
    done = timed_call_in_another_thread()
    if done != ["fine", "cancelled: timeout"]:
        report["hung_at"] = interrupter.where
        report["seen"] = done
        break
    report["timed_out_ok"] += 1
print(json.dumps(report))
sys.stdout.flush()
import os
os._exit(0)
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["raise", "sigint"])
def test_ctrl_c_in_a_timed_invoke_never_deadlocks_later_timed_calls(how: str) -> None:
    """The issue, end to end: Ctrl-C inside the scheduler's ``schedule`` during
    ``invoke(timeout=...)`` (raised by the hook, or a real SIGINT the hook sends to the main
    thread); afterwards a timed invoke in another thread answers, and a stalled one still
    times out. In a child process: today the child hangs for good."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), how],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["hung_at"] is None, report
    # The points differ a little from run to run (whether schedule wakes the thread).
    assert report["points"] > 5 and report["interrupted"] >= report["points"] // 2, report
    assert report["timed_out_ok"] == report["points"], report


@pytest.mark.timeout(120)
def test_ctrl_c_in_a_durable_runs_final_commit_never_wedges_the_store_watcher() -> None:
    """A durable run's final commit (its thread) and the store's watcher thread, which
    serves every run of the store in the process, share the run's inject lock; a Ctrl-C in
    the commit must not leave the watcher stuck when it hands that run an inject."""
    store = MemoryRunStore()
    box: list[StoreLink] = []
    ended = RunState(
        run_id="run_ctrl_c", status="done", next_step=None, cycle=0, messages=(), history_start=0
    )

    def setup() -> Callable[[], object]:
        box[:] = [StoreLink(store, "conversation_ctrl_c", lease_s=30)]
        return lambda: _ignore_store_errors(box[0].commit_end, ended)

    def check() -> None:
        def watcher_hands_an_inject() -> None:
            with pytest.raises(UsageError):  # no run: refused, after taking the lock
                box[0].inject("late input")

        in_another_thread(watcher_hands_an_inject, "the store watcher")

    sweep(SIGNAL, setup, check)


def _ignore_store_errors(commit_end: Callable[[RunState], object], state: RunState) -> None:
    try:
        commit_end(state)
    except AgentSyncError:  # no such run in the store: the commit fails, after the lock
        pass


# -- stores: one store object serves every run of the process -----------------------------

STORE_CHILD = r"""
import os, sys, tempfile
from agent_sync.stores import MemoryRunStore, SQLiteRunStore
sys.path.insert(0, sys.argv[1])
from tests.fixtures.interrupt_points import SIGNAL, in_another_thread, sweep

kind, operation = sys.argv[2], sys.argv[3]
if kind == "sqlite":
    store = SQLiteRunStore(os.path.join(tempfile.mkdtemp(), "runs.db"), busy_timeout_s=5)
else:
    store = MemoryRunStore()
state = {"after": 0}

def setup():
    if operation == "append":
        def append():
            state["after"] = store.append_events("run_a", [{"n": 1}], after=state["after"])
        return append
    return lambda: store.read_events("run_a")

def check():
    def other_run():  # another thread: reads the log, then appends to it
        events = store.read_events("run_a")
        state["after"] = events[-1].seq if events else 0
        state["after"] = store.append_events("run_a", [{"n": 2}], after=state["after"])
    in_another_thread(other_run, "another thread on the store", wait=10)

try:
    print("ok", sweep(SIGNAL, setup, check))
except AssertionError as exc:
    print("FAIL", str(exc)[:500])
sys.stdout.flush()
os._exit(0)  # a wedged store's threads (and its at-fork hooks) must not outlive the child
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "kind",
    ["memory", "sqlite"],
)
@pytest.mark.parametrize("operation", ["append", "read"])
def test_ctrl_c_in_a_store_call_leaves_the_store_usable_by_other_threads(
    kind: str, operation: str
) -> None:
    """A run's thread appends to and reads from a store that every run of the process
    shares; a Ctrl-C anywhere in the call must not stop another thread's calls. In a child
    process: a wedged SQLite pool would also hang every later ``os.fork()`` (its at-fork
    hook waits for the threads inside SQLite)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-c", STORE_CHILD, str(ROOT), kind, operation],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = done.stdout.strip().splitlines()[-1]
    assert report.startswith("ok "), report


def _reserve_and_release() -> None:
    if _abandoned.reserve(1):
        _abandoned.release()


def _nothing() -> None:
    return None
