"""Guardrail benchmarks on ScriptedModel (offline): trip -> invoke() returned, per state;
a PatternGuard's CPU per chunk; the loop's per-event cost without guardrails against a
baseline tree, and a streamed answer's cost per chunk with one output PatternGuard against
it (interleaved, one sitting).

    python bench/bench_guardrails.py [--runs 100] [--races 500] [--base /tmp/base-guard]
        [--compare-only]

Trip latency is from the moment a check returns its ``Trip`` (stamped in the check) to the
moment ``invoke()`` returns. States: streaming (an output check trips mid-answer), tool
running (a tool_result trip while another, cooperative, tool still runs), input check
pending (an input check on its worker thread trips), judge pending (an ``every=N`` output
judge trips on its worker thread while the model's stream is silent: the loop must be
woken). Goals (issue 30): p99 <= 10 ms per state; PatternGuard <= 20 us CPU per chunk
(median), linear to 100 KB; no guardrails: <= 1.02x the baseline's per-event cost (printed
as bench_core's figure, which spreads an invoke's fixed cost over 2000 events, and as the
marginal cost of one more event);
race-mode input check: first released token at max(check end, model's first token) + <= 1
ms; in ``--races`` randomized races, 0 tool starts before an input check's pass (or after
its trip) and 0 text released before it passed (bench/_input_race.py). ``--base`` is an
unpacked tree of the baseline
commit (``git -C /work/main archive 0cb07e8 | tar -x -C /tmp/base-guard``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _trip_samples(runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        "streaming": [], "tool running": [], "input pending": [], "judge pending": [],
    }  # fmt: skip
    for _ in range(runs):
        samples["streaming"].append(_streaming_trip())
        samples["tool running"].append(_tool_running_trip())
        samples["input pending"].append(_input_trip())
        samples["judge pending"].append(_judge_trip())
    return samples


def _streaming_trip() -> float:
    from agent_sync import Agent
    from agent_sync.guardrails import Guardrail, GuardView, Trip
    from agent_sync.testing import ScriptedModel

    stamp: list[float] = []

    def at_400(view: GuardView) -> Trip | None:
        if len(view.text) >= 400:
            stamp.append(time.perf_counter())
            return Trip("enough")
        return None

    agent = Agent(
        ScriptedModel([{"text": "x" * 2000, "chunk_size": 8}]),
        guardrails=[Guardrail(at_400, stage="output")],
    )
    result = agent.invoke("go")
    returned = time.perf_counter()
    assert result.stop_reason == "guardrail"
    return returned - stamp[0]


def _tool_running_trip() -> float:
    from agent_sync import Agent, ToolContext, tool
    from agent_sync.guardrails import PatternGuard
    from agent_sync.testing import ScriptedModel

    stamp: list[float] = []
    started = threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """Runs until cancelled."""
        started.set()
        context.cancelled.wait(30)
        return "late"

    @tool
    def fast() -> str:
        """Returns a key once the slow tool runs."""
        started.wait(30)
        return "sk-" + "A" * 24

    class Stamped(PatternGuard):
        __slots__ = ()

        def scan(self, text: str) -> str | None:
            scanned = super().scan(text)
            if scanned is None:
                stamp.append(time.perf_counter())
            return scanned

    calls = [{"name": "slow", "input": {}}, {"name": "fast", "input": {}}]
    agent = Agent(
        ScriptedModel([{"tool_calls": calls}]),
        tools=[slow, fast],
        guardrails=[Stamped(r"sk-[A-Za-z0-9]{20,}", stage="tool_result")],
    )
    result = agent.invoke("go")
    returned = time.perf_counter()
    assert result.stop_reason == "guardrail", result.stop_reason
    return returned - stamp[0]


def _input_trip() -> float:
    from agent_sync import Agent
    from agent_sync.guardrails import Guardrail, GuardView, Trip
    from agent_sync.testing import ScriptedModel

    stamp: list[float] = []

    def judge(view: GuardView) -> Trip:
        stamp.append(time.perf_counter())
        return Trip("no")

    agent = Agent(ScriptedModel(["ok"]), guardrails=[Guardrail(judge, stage="input")])
    result = agent.invoke("go")
    returned = time.perf_counter()
    assert result.stop_reason == "guardrail"
    return returned - stamp[0]


def _judge_trip() -> float:
    from collections.abc import Iterator

    from agent_sync import Agent
    from agent_sync.cancel import CancelScope
    from agent_sync.guardrails import Guardrail, GuardView, Trip
    from agent_sync.messages import StreamEvent
    from agent_sync.models.base import ModelRequest
    from agent_sync.testing import ScriptedModel

    stamp: list[float] = []
    silent = threading.Event()

    class Silent:
        """Streams its first chunk, then falls silent until the run's scope is aborted."""

        inner = ScriptedModel([{"text": "x" * 2000, "chunk_size": 64}])

        def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
            woken = threading.Event()
            for event in self.inner.stream(request, cancel=cancel):
                yield event
                if "contentBlockDelta" in event:
                    unregister = cancel.register_abort(woken.set)
                    silent.set()
                    woken.wait(30)
                    unregister()
                    return

    def judge(view: GuardView) -> Trip:
        silent.wait(30)
        stamp.append(time.perf_counter())
        return Trip("no")

    agent = Agent(Silent(), guardrails=[Guardrail(judge, stage="output", every=32)])
    result = agent.invoke("go")
    returned = time.perf_counter()
    assert result.stop_reason == "guardrail", result.stop_reason
    return returned - stamp[0]


def _pattern_cpu(size: int, chunk: int = 8) -> float:
    """Median CPU seconds per chunk of one PatternGuard over a ``size``-character answer."""
    from agent_sync._guardrails._release import OutputGate
    from agent_sync.guardrails import PatternGuard

    guard = PatternGuard(r"sk-[A-Za-z0-9]{20,}", max_match=64)
    text = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    gate = OutputGate([guard])
    times = []
    clock = time.thread_time_ns
    for at in range(0, size, chunk):
        piece = text[at : at + chunk]
        start = clock()
        gate.feed(piece)
        times.append(clock() - start)
    gate.finish()
    return statistics.median(times) / 1e9


def per_event_us(chunks: int = 2000, repeats: int = 30) -> tuple[float, float]:
    """The loop's overhead per event (no guardrails), of the tree on sys.path: bench_core's
    figure (``chunks`` events: the invoke's fixed cost spread over them is in it), and the
    marginal cost of an event (the overhead's growth from ``chunks`` to 10x as many events,
    per added event: the fixed cost cancels out)."""
    from _common import loop_overhead

    raw, loop, events = loop_overhead(chunks, repeats)
    raw_10x, loop_10x, events_10x = loop_overhead(chunks * 10, max(3, repeats // 3))
    marginal = ((loop_10x - raw_10x) - (loop - raw)) / (events_10x - events)
    return (loop - raw) / events * 1e6, marginal * 1e6


def guarded_per_chunk_us(chunks: int = 2000, repeats: int = 15) -> float:
    """A streamed answer's cost per chunk with one output PatternGuard (the run, its gate,
    its release order), of the tree on sys.path: the median over ``repeats`` runs."""
    from agent_sync import Agent
    from agent_sync.guardrails import PatternGuard
    from agent_sync.testing import ScriptedModel

    text = ("lorem ipsum dolor sit amet " * (chunks * 8 // 27 + 1))[: chunks * 8]
    guard = PatternGuard(r"sk-[A-Za-z0-9]{20,}", max_match=64)
    model = ScriptedModel([{"text": text, "chunk_size": 8}], repeat=True)
    agent = Agent(model, guardrails=[guard])
    times = []
    for _ in range(repeats):
        agent.messages = []
        start = time.perf_counter()
        for _event in agent.stream("go"):
            pass
        times.append(time.perf_counter() - start)
    return statistics.median(times) / chunks * 1e6


def _per_event_in(tree: Path, measure: str = "per_event_us") -> tuple[float, ...]:
    """``measure`` run in a fresh process on ``tree``: its figure, or figures."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        f"import bench_guardrails as b; r = b.{measure}();"
        "print(*(r if isinstance(r, tuple) else (r,)))"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tree), str(ROOT / "bench")],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return tuple(float(x) for x in done.stdout.strip().splitlines()[-1].split())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--base", type=Path, default=None, help="the baseline tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--races", type=int, default=500, help="randomized input races")
    parser.add_argument(
        "--compare-only", action="store_true", help="only the comparisons with --base"
    )
    args = parser.parse_args()
    if not args.compare_only:
        _measure(args.runs, args.races)
    if args.base is not None:
        _compare(args.base, args.rounds)


def _measure(runs: int, races: int) -> None:
    from _common import p99

    print(f"== trip -> invoke() returned ({runs} runs per state)")
    for state, values in _trip_samples(runs).items():
        print(
            f"  {state:16s} p50 {statistics.median(values) * 1000:7.3f} ms"
            f"   p99 {p99(values) * 1000:7.3f} ms   max {max(values) * 1000:7.3f} ms"
        )
    from _input_race import race_count, release_delays

    delays, wakes = release_delays(runs)
    print("== race-mode input check: first released token - max(check end, model's first token)")
    for label, values in (("race check", delays), ("bare thread wake", wakes)):
        print(
            f"  {label:16s} p50 {statistics.median(values) * 1000:7.3f} ms"
            f"   p99 {p99(values) * 1000:7.3f} ms   max {max(values) * 1000:7.3f} ms"
        )
    counts = race_count(races)
    print(f"== randomized input races: {counts}")
    print("== PatternGuard CPU per 8-character chunk (median)")
    for size in (10_000, 100_000):
        print(f"  {size:>7} characters: {_pattern_cpu(size) * 1e6:7.2f} us")


def _compare(tree: Path, rounds: int) -> None:
    """This tree against the baseline ``tree``, interleaved rounds in one sitting."""
    for measure, label, figures, unit in (
        (
            "per_event_us",
            "loop per-event cost, no guardrails",
            ("2000 events (bench_core's)", "marginal, per added event"),
            "us/event",
        ),
        (
            "guarded_per_chunk_us",
            "streamed answer per chunk, one output PatternGuard",
            ("per chunk",),
            "us/chunk",
        ),
    ):
        print(f"== {label}: this tree vs {tree} (interleaved)")
        ours: list[tuple[float, ...]] = []
        base: list[tuple[float, ...]] = []
        for _ in range(rounds):
            base.append(_per_event_in(tree, measure))
            ours.append(_per_event_in(ROOT, measure))
        for i, figure in enumerate(figures):
            b = statistics.median(x[i] for x in base)
            o = statistics.median(x[i] for x in ours)
            print(f"  {figure}: baseline {b:6.3f} {unit}   this tree {o:6.3f} {unit}   "
                  f"ratio {o / b:.3f}")  # fmt: skip
            print(f"    rounds: baseline {[round(x[i], 3) for x in base]}")
            print(f"            this tree {[round(x[i], 3) for x in ours]}")


if __name__ == "__main__":
    main()
