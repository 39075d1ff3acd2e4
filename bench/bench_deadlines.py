"""Deadlines (``timeout=``) on one scheduler thread: threads per live timed run, and cost.

    python bench/bench_deadlines.py [--runs 1000] [--pairs 100000]

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
    bounded); a ``threading.Timer`` start + cancel pair for comparison.
"""

from __future__ import annotations

import argparse
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


def schedule_cancel_cost(pairs: int, live: int) -> None:
    """(b): schedule + cancel cost per pair, and the largest heap seen meanwhile."""
    heap = _deadlines._SCHEDULER._heap
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
                largest = max(largest, len(heap))
        elapsed = time.perf_counter() - start
        for deadline in kept:
            deadline.cancel()
        per_pair = elapsed * 1e6 / pairs
        print(
            f"    with {background:>5} live deadlines: {per_pair:6.2f} us/pair  "
            f"largest heap={largest}  heap after={len(heap)}"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=100_000)
    args = parser.parse_args()
    live_timed_runs(args.runs)
    schedule_cancel_cost(args.pairs, args.runs)


if __name__ == "__main__":
    main()
