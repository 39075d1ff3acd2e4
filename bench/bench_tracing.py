"""Per-invoke cost of tracing: the same ScriptedModel runs with tracing off and on,
interleaved in one process.

    python bench/bench_tracing.py [--rounds 25] [--invokes 10] [--deltas 200] [--clock cpu]

"off": no tracer or meter provider (the API's defaults: a run asks once and gets no hooks).
"on": an SDK ``TracerProvider`` whose ``BatchSpanProcessor`` exports to a discarding
exporter, and an SDK ``MeterProvider`` with an in-memory reader (spans and the GenAI
metrics recorded). Two runs: bench_core's per-invoke turn (one model call streaming
``--deltas`` text deltas: 200 and 2000 are bench_core's) and a tool cycle (model -> tool ->
model, three spans more). Each round times ``--invokes`` invokes per mode, the modes
alternating; the figures are the minimum (the least disturbed round, as ``timeit`` reports)
and the median over rounds of the per-invoke mean. ``--clock cpu``
(the default) times the process's CPU time, which a machine loaded by other work inflates
far less than wall time; ``wall`` times ``perf_counter``. Goal (issue 32): on <= 1.05x off;
off unchanged.

Runs against an older checkout too (it then records spans only, if that checkout has no
metrics), to compare "off" before and after in one sitting.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from agent_sync import Agent, _tracing, tool  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@tool
def noop() -> str:
    """Does nothing."""
    return "ok"


DELTAS = 200


def one_turn() -> Agent:
    return Agent(ScriptedModel([{"text": "x" * DELTAS, "chunk_size": 1}]))


def tool_cycle() -> Agent:
    turns = [{"tool_calls": [{"name": "noop", "input": {}}]}, "done"]
    return Agent(ScriptedModel(turns), tools=[noop])


CLOCK: Callable[[], float] = time.process_time


def per_invoke(make: Callable[[], Agent], invokes: int) -> float:
    agents = [make() for _ in range(invokes)]  # built outside the timing
    start = CLOCK()
    for agent in agents:
        agent.invoke("go")
    return (CLOCK() - start) / invokes


def tracing(on: bool, tracer: TracerProvider, meters: MeterProvider | None) -> None:
    _tracing.use_provider(tracer if on else None)
    use_meters: Any = getattr(_tracing, "use_meter_provider", None)  # older checkouts
    if use_meters is not None:
        use_meters(meters if on else None)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--invokes", type=int, default=10)
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    global DELTAS, CLOCK
    DELTAS = args.deltas
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(_Discard()))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    print(f"clock: {args.clock}")
    for name, make in ((f"one turn, {DELTAS} deltas", one_turn), ("tool cycle", tool_cycle)):
        times: dict[bool, list[float]] = {False: [], True: []}
        tracing(True, tracer, meters)
        per_invoke(make, 20)  # warm-up: imports, instruments, caches
        for _ in range(args.rounds):
            for on in (False, True):
                tracing(on, tracer, meters)
                times[on].append(per_invoke(make, args.invokes))
        tracing(False, tracer, meters)
        for label, pick in (("min", min), ("median", statistics.median)):
            off, on = pick(times[False]), pick(times[True])
            print(
                f"{name:22s} {label:6s} off {off * 1e6:8.1f} us   on {on * 1e6:8.1f} us   "
                f"ratio {on / off:.3f}   (+{(on - off) * 1e6:.1f} us per invoke)"
            )
    print(f"({args.rounds} rounds x {args.invokes} invokes per mode)")
    tracer.shutdown()
    meters.shutdown()


if __name__ == "__main__":
    main()
