"""Small helpers shared by the benchmark scripts: timing and printing figures."""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any


def ms(seconds: float) -> str:
    """Format seconds as milliseconds."""
    return f"{seconds * 1000:8.2f} ms"


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, p90 and max of a list of durations in seconds."""
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return {"median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}


def p99(samples: Sequence[float]) -> float:
    """The 99th percentile, nearest rank (of 100 samples: the 99th smallest)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * 0.99) - 1)]


def bare_wake() -> float:
    """Seconds from ``Event.set()`` to the thread blocked on it running again: the least any
    cross-thread cancel can take on this machine at this moment (its floor, not a cost of
    ours). Taken interleaved with cancel samples, its tail shows what the machine adds."""
    event = threading.Event()
    box: list[float] = []

    def waiter() -> None:
        event.wait()
        box.append(time.perf_counter())

    thread = threading.Thread(target=waiter, name="bench-bare-wake")
    thread.start()
    while not _blocked(thread):
        time.sleep(0.0005)  # bench only: the waiter reaches its wait
    start = time.perf_counter()
    event.set()
    thread.join(10)
    return box[0] - start


def _blocked(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)  # noqa: SLF001 (bench probe)
    return frame is not None and frame.f_code.co_name == "wait"


def report(label: str, samples: Sequence[float]) -> None:
    """Print one row: label, n, median, p90, max (milliseconds)."""
    s = summarize(samples)
    figures = f"median={ms(s['median'])}  p90={ms(s['p90'])}  max={ms(s['max'])}"
    print(f"{label:<46} n={len(samples):<4} {figures}")


def time_call(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def loop_overhead(
    chunks: int, repeats: int, drive: Callable[[Any], object] | None = None
) -> tuple[float, float, int]:
    """The run loop's overhead on a one-turn stream of ``chunks`` text deltas: the median
    seconds of iterating the scripted events bare and of driving an agent on the same
    events (``drive(agent)``, ``agent.invoke("go")`` by default), interleaved, and the number
    of events. ``agent_sync`` is imported from ``sys.path`` as it is when this is called (a
    benchmark may compare two trees)."""
    from agent_sync import Agent
    from agent_sync.cancel import CancelScope
    from agent_sync.models.base import ModelRequest
    from agent_sync.testing import ScriptedModel

    turn = {"text": "x" * chunks, "chunk_size": 1}
    request = ModelRequest(messages=({"role": "user", "content": [{"text": "go"}]},))
    events = sum(1 for _ in ScriptedModel([turn]).stream(request, cancel=CancelScope()))
    raw_times, loop_times = [], []
    for _ in range(repeats):
        model = ScriptedModel([turn])
        start = time.perf_counter()
        for _event in model.stream(request, cancel=CancelScope()):
            pass
        raw_times.append(time.perf_counter() - start)
        agent = Agent(ScriptedModel([turn]))
        start = time.perf_counter()
        if drive is None:
            agent.invoke("go")
        else:
            drive(agent)
        loop_times.append(time.perf_counter() - start)
    return statistics.median(raw_times), statistics.median(loop_times), events
