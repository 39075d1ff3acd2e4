"""Deadlines (``timeout=``) on one scheduler thread: threads per live timed run, and cost.

    python bench/bench_deadlines.py [--runs 1000] [--pairs 100000] [--timed 200]

(a) Opens ``--runs`` ``agent.stream(prompt, timeout=60)`` on as many agents, each on a
    ScriptedModel that sends one delta and then stalls like a silent socket, and advances
    every stream to its first event in this one thread, so all the runs are live at once
    without a thread per run. Prints ``threading.active_count()`` before and during (goal:
    +1, the scheduler thread; a ``threading.Timer`` per run would be +``--runs``), then
    closes them all and checks that no deadline is left pending. For reference, the same
    count with a ``threading.Timer`` per run.
(b) ``schedule`` + ``Deadline.cancel`` cost per pair, for ``--pairs`` pairs, with an empty
    heap and with ``--runs`` live deadlines due earlier (so cancelled entries pile up behind
    them until a compaction), and the largest heap seen (lazy deletion must keep it
    bounded); a ``threading.Timer`` start + cancel pair for comparison. The entries held are
    the heap plus the backlog the thread has not taken in yet (``_incoming``, if any).
(c) Firing lateness: 2,000 deadlines due at random in the next 0-50 ms, from 4 threads;
    how long after its due time each callback ran (p50, p99, max).
(d) Timeout latency: ``--timed`` runs ``agent.invoke(prompt, timeout=0.02)`` on a model that
    stalls like a silent socket; how long after the timeout each run returned (p50, p99,
    max), and that every one ended ``cancelled`` with reason ``timeout``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agent_sync._deadlines as _deadlines  # noqa: E402
from agent_sync import Agent, AgentStream  # noqa: E402
from agent_sync._deadlines import pending_count, schedule, scheduler_thread  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402


def _nothing() -> None:
    return None


def live_timed_runs(runs: int) -> None:
    """(a): threads alive while ``runs`` timed runs are live at once."""
    agents = [Agent(ScriptedModel([{"text": "x", "stall_after": 1}])) for _ in range(runs)]
    before = threading.active_count()
    pending_before = pending_count()
    streams: list[AgentStream] = []
    start = time.perf_counter()
    try:
        for agent in agents:
            stream = agent.stream("go", timeout=60)
            streams.append(stream)
            next(iter(stream))  # the run is live: its deadline is armed, its model stalled
        opened = time.perf_counter() - start
        during = threading.active_count()
        pending = pending_count() - pending_before
        running = sum(agent.is_running for agent in agents)
    finally:
        start = time.perf_counter()
        for stream in streams:
            stream.close()
        closed = time.perf_counter() - start
    after = threading.active_count()
    thread = scheduler_thread()
    print(f"(a) {runs} live runs with timeout=60, one bench thread")
    print(f"    threading.active_count(): before={before}  during={during}  after={after}")
    print(f"    delta during={during - before:+d}  (scheduler thread: {thread and thread.name})")
    print(f"    runs live during={running}  deadlines pending during={pending}")
    print(f"    pending after close={pending_count() - pending_before}")
    print(
        f"    open + first event: {opened * 1e6 / runs:.1f} us/run  "
        f"close: {closed * 1e6 / runs:.1f} us/run"
    )

    timers = [threading.Timer(60, _nothing) for _ in range(runs)]
    before = threading.active_count()
    for timer in timers:
        timer.start()
    during = threading.active_count()
    for timer in timers:
        timer.cancel()
    for timer in timers:
        timer.join(30)
    print(f"    for reference, a threading.Timer per run: delta during={during - before:+d}")


def _held() -> int:
    """Entries the scheduler holds: its heap, and its backlog (this tree's, if any)."""
    scheduler = _deadlines._SCHEDULER
    return len(scheduler._heap) + len(getattr(scheduler, "_incoming", ()))


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50={statistics.median(ordered) * 1e3:.3f} ms  p99={p99 * 1e3:.3f} ms  "
        f"max={ordered[-1] * 1e3:.3f} ms"
    )


def schedule_cancel_cost(pairs: int, live: int) -> None:
    """(b): schedule + cancel cost per pair, and the largest heap seen meanwhile."""
    print(f"(b) schedule(60, f) + cancel(), {pairs} pairs")
    for background in (0, live):
        # Due before the churned ones: a cancelled entry is then never at the top of the
        # heap, and only the periodic compaction removes it (the worst case for memory).
        kept = [schedule(30, _nothing) for _ in range(background)]
        largest = 0
        start = time.perf_counter()
        for i in range(pairs):
            schedule(60, _nothing).cancel()
            if i % 64 == 0:
                largest = max(largest, _held())
        elapsed = time.perf_counter() - start
        for deadline in kept:
            deadline.cancel()
        per_pair = elapsed * 1e6 / pairs
        print(
            f"    with {background:>5} live deadlines: {per_pair:6.2f} us/pair  "
            f"largest held={largest}  held after={_held()}"
        )
    timer_pairs = min(pairs, 2000)
    start = time.perf_counter()
    for _ in range(timer_pairs):
        timer = threading.Timer(60, _nothing)
        timer.start()
        timer.cancel()
        timer.join(30)
    per_pair = (time.perf_counter() - start) * 1e6 / timer_pairs
    print(f"    for reference, threading.Timer start+cancel+join: {per_pair:6.2f} us/pair")


def firing_lateness(count: int = 2000, threads: int = 4) -> None:
    """(c): how late callbacks run after their due time."""
    late: list[float] = []
    done = threading.Event()

    def fire(deadline_box: list[float]) -> None:
        late.append(time.monotonic() - deadline_box[0])
        if len(late) == count:
            done.set()

    def scheduler(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(count // threads):
            box: list[float] = []
            box.append(schedule(rng.uniform(0, 0.05), lambda box=box: fire(box)).when)

    workers = [threading.Thread(target=scheduler, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert done.wait(60), f"only {len(late)} of {count} deadlines fired"
    print(f"(c) {count} deadlines due within 50 ms, from {threads} threads: lateness")
    print(f"    {_spread(late)}")


def timeout_latency(runs: int, timeout: float = 0.02) -> None:
    """(d): how long after ``timeout`` a run on a stalled model returns."""
    stalled = {"text": "x", "stall_after": 1}
    over: list[float] = []
    reasons: set[str] = set()
    for _ in range(runs):
        agent = Agent(ScriptedModel([stalled]))
        start = time.perf_counter()
        result = agent.invoke("go", timeout=timeout)
        over.append(time.perf_counter() - start - timeout)
        reasons.add(f"{result.stop_reason}/{result.cancel_reason}")
    print(f"(d) {runs} invoke(timeout={timeout}) on a stalled model: returned after the timeout")
    print(f"    {_spread(over)}  outcomes={sorted(reasons)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--timed", type=int, default=200)
    args = parser.parse_args()
    live_timed_runs(args.runs)
    schedule_cancel_cost(args.pairs, args.runs)
    firing_lateness()
    timeout_latency(args.timed)


if __name__ == "__main__":
    main()
