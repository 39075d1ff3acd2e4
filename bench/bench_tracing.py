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

"sdk floor" is what the same spans and metric records cost the OpenTelemetry SDK alone: one
invoke's spans (names, kinds, parents, attributes) and data points are captured once, then
replayed straight into the same providers, no agent involved; "ours" is on - off - floor, the
part of tracing's cost that is agent_sync's code. The ratio is quoted plain beside it: the
floor is the SDK's price, not a comparator for ours.

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

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
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


def sdk_replay(make: Callable[[], Agent], tracer: TracerProvider, meters: MeterProvider
               ) -> Callable[[], None]:  # fmt: skip
    """One invoke's spans and metric records, captured once, as a function that emits the
    same into ``tracer`` and ``meters`` through the SDK alone (the floor)."""
    exporter = InMemorySpanExporter()
    capture = TracerProvider()
    capture.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    capture_meters = MeterProvider(metric_readers=[reader])
    tracing(True, capture, capture_meters)
    make().invoke("go")
    tracing(False, tracer, meters)
    spans = sorted(exporter.get_finished_spans(), key=lambda span: span.start_time or 0)
    ends = sorted(range(len(spans)), key=lambda i: spans[i].end_time or 0)
    parents = [
        next(
            (j for j, other in enumerate(spans)
             if span.parent is not None and other.context.span_id == span.parent.span_id),
            None,
        )
        for span in spans
    ]  # fmt: skip
    points = []
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                instrument = meters.get_meter(scope.scope.name).create_histogram(
                    metric.name, unit=metric.unit
                )
                for point in metric.data.data_points:
                    value = point.sum / point.count  # type: ignore[union-attr]
                    points += [(instrument, value, dict(point.attributes))] * point.count  # type: ignore[union-attr]
    otel = tracer.get_tracer("agent_sync")

    def replay() -> None:
        started: list[Any] = []
        for span, parent in zip(spans, parents, strict=True):
            context = None if parent is None else trace.set_span_in_context(started[parent])
            started.append(
                otel.start_span(span.name, context, span.kind, dict(span.attributes or {}))
            )
        for index in ends:
            started[index].end()
        for instrument, value, attributes in points:
            instrument.record(value, attributes)

    return replay


def floor_per_invoke(replay: Callable[[], None], invokes: int) -> float:
    start = CLOCK()
    for _ in range(invokes):
        replay()
    return (CLOCK() - start) / invokes


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
        floors: list[float] = []
        replay = sdk_replay(make, tracer, meters)
        tracing(True, tracer, meters)
        per_invoke(make, 20)  # warm-up: imports, instruments, caches
        floor_per_invoke(replay, 20)
        for _ in range(args.rounds):
            for on in (False, True):
                tracing(on, tracer, meters)
                times[on].append(per_invoke(make, args.invokes))
            floors.append(floor_per_invoke(replay, args.invokes))
        tracing(False, tracer, meters)
        for label, pick in (("min", min), ("median", statistics.median)):
            off, on, floor = pick(times[False]), pick(times[True]), pick(floors)
            print(
                f"{name:22s} {label:6s} off {off * 1e6:7.1f} us   on {on * 1e6:7.1f} us   "
                f"ratio {on / off:.3f}   (+{(on - off) * 1e6:.1f} us: sdk floor "
                f"{floor * 1e6:.1f}, ours {(on - off - floor) * 1e6:.1f})"
            )
    print(f"({args.rounds} rounds x {args.invokes} invokes per mode)")
    tracer.shutdown()
    meters.shutdown()


if __name__ == "__main__":
    main()
