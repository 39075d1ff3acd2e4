"""Small helpers shared by the benchmark scripts: timing and printing figures."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def ms(seconds: float) -> str:
    """Format seconds as milliseconds."""
    return f"{seconds * 1000:8.2f} ms"


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, p90 and max of a list of durations in seconds."""
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return {"median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}


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
