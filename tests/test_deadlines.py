"""The process-wide deadline scheduler: order, cancel, races, errors, one thread, fork."""

from __future__ import annotations

import json
import logging
import os
import random
import select
import signal
import threading
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import pytest

from agent_sync import _deadlines
from agent_sync._deadlines import Deadline, pending_count, schedule, scheduler_thread
from tests.fixtures.logs import RootRecords

WAIT = 30.0  # generous bound for anything that should happen "at once"


def flush() -> None:
    """Return once every deadline already due has fired (or been cancelled).

    One thread runs callbacks in due order, so when a deadline scheduled now has fired,
    everything due before it has been dealt with.
    """
    fired = threading.Event()
    schedule(0, fired.set)
    assert fired.wait(WAIT), "the scheduler thread did not run a due deadline"


@contextmanager
def scheduler_held() -> Iterator[Deadline]:
    """Keep the scheduler thread inside a callback: deadlines due meanwhile pile up."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(WAIT)

    deadline = schedule(0, hold)
    assert entered.wait(WAIT)
    try:
        yield deadline
    finally:
        release.set()


def scheduler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _deadlines.THREAD_NAME]


@pytest.mark.timeout(60)
def test_deadlines_fire_in_due_order_whatever_the_scheduling_order() -> None:
    delays = [i * 0.001 for i in range(100)]
    random.Random(8).shuffle(delays)
    fired: list[Deadline] = []
    deadlines: list[Deadline] = []
    done = threading.Event()

    def record(index: int) -> None:
        fired.append(deadlines[index])
        if len(fired) == len(delays):
            done.set()

    with scheduler_held():  # none fires while we schedule, so scheduling order cannot help
        for index, delay in enumerate(delays):
            deadlines.append(schedule(delay, partial(record, index)))
    assert done.wait(WAIT)
    assert fired == sorted(deadlines, key=lambda d: d.when)
    assert all(d.fired and not d.cancelled for d in deadlines)


@pytest.mark.timeout(60)
def test_deadlines_due_at_once_fire_in_scheduling_order() -> None:
    order: list[int] = []
    with scheduler_held():
        for index in range(50):
            schedule(0, partial(order.append, index))
    flush()
    assert order == list(range(50))


@pytest.mark.timeout(60)
def test_a_deadline_cancelled_before_it_is_due_never_fires() -> None:
    ran: list[str] = []
    before = pending_count()
    far = schedule(3600, lambda: ran.append("far"))
    assert pending_count() == before + 1
    far.cancel()
    assert pending_count() == before
    with scheduler_held():  # due, but the thread is busy: cancel wins for sure
        near = schedule(0, lambda: ran.append("near"))
        near.cancel()
        near.cancel()  # idempotent
    flush()
    assert ran == []
    assert far.cancelled and near.cancelled and not near.fired
    assert 0 < far.remaining() <= 3600 and near.remaining() == 0.0


@pytest.mark.timeout(60)
def test_a_fired_deadline_can_be_cancelled_afterwards() -> None:
    fired = threading.Event()
    deadline = schedule(0.01, fired.set)
    assert fired.wait(WAIT)
    flush()
    deadline.cancel()
    assert deadline.fired and not deadline.cancelled
    assert "fired" in repr(deadline)


@pytest.mark.timeout(60)
def test_cancel_waits_for_a_callback_that_is_running() -> None:
    """The guarantee: when cancel() returns, the callback has finished or will never start."""
    entered, proceed, finished = threading.Event(), threading.Event(), threading.Event()

    def callback() -> None:
        entered.set()
        proceed.wait(WAIT)
        finished.set()

    deadline = schedule(0, callback)
    assert entered.wait(WAIT)
    calling, returned = threading.Event(), threading.Event()
    seen: list[bool] = []

    def cancel() -> None:
        calling.set()
        deadline.cancel()
        seen.append(finished.is_set())
        returned.set()

    canceller = threading.Thread(target=cancel, name="test-canceller")
    canceller.start()
    assert calling.wait(WAIT)
    # A negative check with a bound, not a synchronisation: a correct cancel() is still
    # blocked whatever the machine's speed.
    assert not returned.wait(0.05)
    proceed.set()
    canceller.join(WAIT)
    assert seen == [True]
    assert deadline.fired and not deadline.cancelled


@pytest.mark.timeout(120)
def test_cancel_racing_the_firing_runs_the_callback_at_most_once() -> None:
    rounds = 300
    verdicts: list[tuple[bool, int]] = []  # (finished when cancel returned, runs in the end)
    for _ in range(rounds):
        runs: list[int] = []
        finished = threading.Event()

        def callback(runs: list[int] = runs, finished: threading.Event = finished) -> None:
            runs.append(1)
            finished.set()

        barrier = threading.Barrier(2, timeout=WAIT)
        box: list[Deadline] = []
        results: list[bool] = []

        def cancel(
            box: list[Deadline] = box,
            barrier: threading.Barrier = barrier,
            results: list[bool] = results,
            finished: threading.Event = finished,
        ) -> None:
            barrier.wait()
            box[0].cancel()
            results.append(finished.is_set())

        canceller = threading.Thread(target=cancel, name="test-racer")
        canceller.start()
        box.append(schedule(0, callback))
        barrier.wait()
        canceller.join(WAIT)
        flush()  # from here on, a callback that was not cancelled has run
        verdicts.append((results[0], len(runs)))
    for finished_at_cancel, runs_in_the_end in verdicts:
        assert runs_in_the_end <= 1
        if not finished_at_cancel:  # cancel() returned before the callback ran: it never does
            assert runs_in_the_end == 0


@pytest.mark.timeout(60)
def test_cancel_from_inside_a_callback_does_not_deadlock() -> None:
    other_ran: list[bool] = []
    box: list[Deadline] = []
    done = threading.Event()

    def callback() -> None:
        box[0].cancel()  # itself, while firing: returns at once
        box[1].cancel()  # another, not yet due
        done.set()

    with scheduler_held():
        box.append(schedule(0, callback))
        box.append(schedule(0.01, lambda: other_ran.append(True)))
    assert done.wait(WAIT)
    flush()
    assert box[0].fired and box[1].cancelled and other_ran == []


@pytest.mark.timeout(60)
def test_a_failing_callback_is_logged_and_the_thread_carries_on(
    root_records: RootRecords,
) -> None:
    def boom() -> None:
        raise RuntimeError("callback broke")

    flush()
    thread = scheduler_thread()
    failed = schedule(0, boom)
    fired = threading.Event()
    schedule(0, fired.set)
    assert fired.wait(WAIT)
    assert failed.fired
    assert scheduler_thread() is thread and thread is not None and thread.is_alive()
    warnings_seen = [
        r
        for r in root_records.records
        if r.name == "agent_sync._deadlines" and r.levelno == logging.WARNING
    ]
    assert len(warnings_seen) == 1
    record = warnings_seen[0]
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert "boom" in record.getMessage()


@pytest.mark.timeout(60)
def test_a_thousand_deadlines_share_one_scheduler_thread() -> None:
    flush()  # the thread exists from here on
    thread = scheduler_thread()
    assert thread is not None and thread.daemon and thread.is_alive()
    threads_before = threading.active_count()
    before = pending_count()
    count, fired, all_fired = [0], threading.Lock(), threading.Event()

    def callback() -> None:
        with fired:
            count[0] += 1
            if count[0] == 1000:
                all_fired.set()

    with scheduler_held():
        deadlines = [schedule(0.001 * (i % 10), callback) for i in range(1000)]
        assert pending_count() == before + 1000
        assert threading.active_count() == threads_before
        assert scheduler_threads() == [thread]
    assert all_fired.wait(WAIT)
    assert all(d.fired for d in deadlines)
    assert scheduler_thread() is thread and scheduler_threads() == [thread]


@pytest.mark.timeout(120)
def test_schedule_cancel_churn_does_not_grow_the_heap() -> None:
    scheduler = _deadlines._SCHEDULER
    heap = scheduler._heap  # the thread's, rebuilt in place
    live = [schedule(3600, _nothing) for _ in range(1000)]
    flush()  # from here on the live entries are in the heap
    batch = 500
    # Live entries (a batch included) doubled, + slack, + one batch taken in before a rebuild:
    # without the rebuilds, the 40 rounds below would leave 20,000 dead entries.
    bound = 2 * (len(heap) + batch + 1) + _deadlines._COMPACT_MIN + batch
    largest = 0
    for _ in range(100_000):  # cancelled before the thread takes them in
        schedule(3600, _nothing).cancel()
        largest = max(largest, len(heap))
    for _ in range(40):  # taken into the heap, then cancelled: only a rebuild drops them
        churned = [schedule(3600, _nothing) for _ in range(batch)]
        flush()
        largest = max(largest, len(heap))
        for deadline in churned:
            deadline.cancel()
    flush()
    assert largest <= bound
    assert len(scheduler._incoming) == 0 and len(heap) <= bound
    for deadline in live:
        deadline.cancel()


def test_a_cancelled_deadline_lets_go_of_its_callback() -> None:
    class Run:
        def timed_out(self) -> None:
            raise AssertionError("cancelled deadline fired")

    run = Run()
    ref = weakref.ref(run)
    deadline = schedule(3600, run.timed_out)
    deadline.cancel()
    del run
    assert ref() is None  # the heap may keep the entry a while, never the callback


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_runs_its_own_scheduler_without_the_parents_deadlines() -> None:
    parent_ran = threading.Event()
    read_end, write_end = os.pipe()
    with scheduler_held() as held:
        inherited = schedule(0, parent_ran.set)  # due, queued behind the held callback
        with warnings.catch_warnings():
            # 3.12+ warns that forking a multi-threaded process is risky: that is the point.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: report over the pipe, and never return into pytest
            _child_report(write_end, inherited, held, parent_ran)
        os.close(write_end)
        report = _read_child_report(read_end, pid)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == {
        "thread_before": None,
        "pending_before": 0,
        "inherited_cancel_returned": True,
        "fired": True,
        "threads": 1,
        "inherited_ran": False,
    }
    assert parent_ran.wait(WAIT)  # the parent's own deadline still fires in the parent


def _read_child_report(read_end: int, pid: int) -> object:
    """The child's JSON report; a child that hangs is killed and the test fails."""
    chunks: list[bytes] = []
    with os.fdopen(read_end, "rb") as reader:
        while True:
            ready, _, _ = select.select([reader], [], [], WAIT)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung (its scheduler inherited the parent's state?)")
            chunk = os.read(reader.fileno(), 65536)
            if not chunk:
                return json.loads(b"".join(chunks) or b"{}")
            chunks.append(chunk)


def _child_report(
    write_end: int, inherited: Deadline, held: Deadline, inherited_ran: threading.Event
) -> None:
    code = 1
    try:
        signal.alarm(int(WAIT) * 2)  # never outlive the test, whatever happens here
        report: dict[str, object] = {
            "thread_before": scheduler_thread(),
            "pending_before": pending_count(),
        }
        held.cancel()  # firing in the parent; here it must not wait for a thread that is gone
        inherited.cancel()
        report["inherited_cancel_returned"] = True
        fired = threading.Event()
        schedule(0.01, fired.set)
        # The inherited deadline was due first: had the child kept it, it would have run.
        report["fired"] = fired.wait(WAIT)
        report["threads"] = len(scheduler_threads())
        report["inherited_ran"] = inherited_ran.is_set()
        with os.fdopen(write_end, "w") as writer:
            writer.write(json.dumps(report))
        code = 0
    finally:
        os._exit(code)


def _nothing() -> None:
    return None
