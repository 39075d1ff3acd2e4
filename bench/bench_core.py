"""Core benchmarks on ScriptedModel (offline): cancel latency per state, loop overhead.

    python bench/bench_core.py [--runs 30]

Cancel latency is measured from the moment ``cancel()`` is called (in another thread, once
the run is known to be in the state) to the moment ``invoke()`` returns. Loop overhead
compares ``agent.invoke()`` on a scripted turn with iterating the same model's events bare.
Targets (issue 2): median < 5 ms and max < 20 ms for every state but the non-cooperative
tool (bounded by the grace period); < 10 us loop overhead per streamed event.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import loop_overhead, report  # noqa: E402

from agent_sync import Agent, AgentResult, RetryPolicy, ToolContext, tool  # noqa: E402
from agent_sync.cancel import CancelScope  # noqa: E402
from agent_sync.errors import ModelThrottledError  # noqa: E402
from agent_sync.messages import StreamEvent  # noqa: E402
from agent_sync.models.base import ModelRequest  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402


class _Signal:
    """Wraps a model: sets ``ready`` once ``after`` raw events went to the loop."""

    def __init__(self, inner: ScriptedModel, after: int) -> None:
        self.inner, self.after, self.ready = inner, after, threading.Event()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        if self.after == 0:
            self.ready.set()
        for seen, event in enumerate(self.inner.stream(request, cancel=cancel), start=1):
            yield event
            if seen == self.after:
                self.ready.set()


Runner = Callable[[Agent, threading.Event], AgentResult]


def measure(
    make: Callable[[], tuple[Agent, threading.Event]], runs: int, run: Runner | None = None
) -> list[float]:
    """Cancel latency samples: cancel once ``ready`` is set, time until the run returns."""
    run = run or invoke
    samples = []
    for _ in range(runs):
        agent, ready = make()
        cancelled_at: list[float] = []

        def canceller(
            agent: Agent = agent, ready: threading.Event = ready, stamps: list[float] = cancelled_at
        ) -> None:
            if ready.wait(10):
                stamps.append(time.perf_counter())
                agent.cancel("bench")

        thread = threading.Thread(target=canceller, name="bench-canceller")
        thread.start()
        result = run(agent, ready)
        returned = time.perf_counter()
        thread.join()
        assert result.stop_reason == "cancelled", result.stop_reason
        samples.append(returned - cancelled_at[0])
    return samples


def streaming() -> tuple[Agent, threading.Event]:
    model = _Signal(
        ScriptedModel([{"text": "x" * 4000, "chunk_size": 4, "chunk_delay": 0.0005}]), 50
    )
    return Agent(model), model.ready


def silent_stream() -> tuple[Agent, threading.Event]:
    model = _Signal(ScriptedModel([{"text": "x" * 100, "chunk_size": 4, "stall_after": 5}]), 6)
    return Agent(model), model.ready


def before_first_byte() -> tuple[Agent, threading.Event]:
    model = _Signal(ScriptedModel([{"text": "never", "stall_after": 0}]), 0)
    return Agent(model), model.ready


def back_off() -> tuple[Agent, threading.Event]:
    model = ScriptedModel([{"error": ModelThrottledError("slow down")}, "unused"])
    return Agent(
        model, retry=RetryPolicy(initial_delay=30, jitter=0, max_delay=30)
    ), threading.Event()


def run_until_retry(agent: Agent, ready: threading.Event) -> AgentResult:
    """Stream the run, signalling when the back-off starts (the retry event)."""
    stream = agent.stream("go", timeout=30)
    for event in stream:
        if event.type == "retry":
            ready.set()
    assert stream.result is not None
    return stream.result


def invoke(agent: Agent, ready: threading.Event) -> AgentResult:
    return agent.invoke("go", timeout=30)


def _tool_turn(*names: str) -> dict[str, object]:
    return {"tool_calls": [{"name": n, "input": {}} for n in names]}


def cooperative_tool() -> tuple[Agent, threading.Event]:
    ready = threading.Event()

    @tool
    def work(context: ToolContext) -> str:
        """Cooperative long task."""
        ready.set()
        context.wait(30)
        return "stopped"

    return Agent(ScriptedModel([_tool_turn("work")]), tools=[work]), ready


def sequential_tools() -> tuple[Agent, threading.Event]:
    ready = threading.Event()

    @tool
    def step(context: ToolContext) -> str:
        """Cooperative step."""
        ready.set()
        context.wait(30)
        return "done"

    agent = Agent(
        ScriptedModel([_tool_turn("step", "step", "step")]),
        tools=[step],
        tool_executor="sequential",
    )
    return agent, ready


def stubborn_tool(grace: float) -> Callable[[], tuple[Agent, threading.Event]]:
    def make() -> tuple[Agent, threading.Event]:
        ready, release = threading.Event(), threading.Event()

        @tool
        def stuck() -> str:
            """Ignores cancel."""
            ready.set()
            release.wait(grace * 4)
            return "late"

        agent = Agent(ScriptedModel([_tool_turn("stuck")]), tools=[stuck], tool_grace_period=grace)
        return agent, ready

    return make


def overhead(chunks: int, repeats: int) -> None:
    """Loop overhead per event: invoke() vs iterating the same scripted events bare."""
    raw, loop, events_per_call = loop_overhead(chunks, repeats)
    per_event_us = (loop - raw) / events_per_call * 1e6
    print(
        f"one-turn stream of {chunks} text deltas ({events_per_call} events), median of {repeats}:"
    )
    print(f"  bare iteration      {raw * 1000:8.3f} ms")
    print(f"  agent.invoke()      {loop * 1000:8.3f} ms   ratio {loop / raw:.2f}")
    print(f"  loop overhead       {per_event_us:8.2f} us per event")


def cycle_overhead(repeats: int) -> None:
    """Fixed cost of one model -> tool -> model cycle beyond the events themselves."""

    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    one, two = [], []
    for _ in range(repeats):
        agent = Agent(ScriptedModel(["done"]))
        start = time.perf_counter()
        agent.invoke("go")
        one.append(time.perf_counter() - start)
        agent = Agent(ScriptedModel([_tool_turn("noop"), "done"]), tools=[noop])
        start = time.perf_counter()
        agent.invoke("go")
        two.append(time.perf_counter() - start)
    print(
        f"invoke with 1 cycle: {statistics.median(one) * 1e6:8.1f} us;"
        f" with a tool cycle added: {statistics.median(two) * 1e6:8.1f} us"
        f" (cycle + tool thread: {(statistics.median(two) - statistics.median(one)) * 1e6:.1f} us)"
    )


def _stream_to_the_end(agent: Agent) -> None:
    for _event in agent.stream("go"):
        pass


def stream_overhead(chunks: int, repeats: int) -> None:
    """The same turn through agent.stream(): the per-event cost of the public iterator
    (run ids on events, the run handle's guard), which snapshot() and steps must not raise."""
    raw, loop, _events = loop_overhead(chunks, repeats, drive=_stream_to_the_end)
    print(
        f"agent.stream() of {chunks} text deltas, median of {repeats}: "
        f"{loop * 1000:.3f} ms vs bare {raw * 1000:.3f} ms, "
        f"{(loop - raw) / chunks * 1e6:.2f} us per delta"
    )


def throughput(threads: int, invokes: int) -> None:
    """``threads`` threads x ``invokes`` invokes, each thread on its own agent (one tool
    cycle per invoke): total invokes per second."""

    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    barrier = threading.Barrier(threads + 1)

    def work() -> None:
        agent = Agent(ScriptedModel([_tool_turn("noop"), "done"], repeat=True), tools=[noop])
        barrier.wait()
        for _ in range(invokes):
            agent.invoke("go")

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    total = threads * invokes
    print(
        f"throughput: {threads} threads x {invokes} invokes (tool cycle each) in "
        f"{elapsed:.3f} s = {total / elapsed:,.0f} invokes/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    print("== cancel latency: cancel() call -> invoke() return (ScriptedModel)")
    report("streaming (chunks flowing)", measure(streaming, args.runs))
    report("silent stream (mid-response)", measure(silent_stream, args.runs))
    report("before the first byte", measure(before_first_byte, args.runs))
    report("retry back-off (30 s wait)", measure(back_off, args.runs, run_until_retry))
    report("cooperative tool", measure(cooperative_tool, args.runs))
    report("between sequential tools (1st of 3 running)", measure(sequential_tools, args.runs))
    report("non-cooperative tool, grace 0.1 s", measure(stubborn_tool(0.1), max(5, args.runs // 3)))
    print()
    print("== loop overhead")
    overhead(200, 200)
    overhead(2000, 30)
    cycle_overhead(300)
    stream_overhead(200, 200)
    throughput(16, 20)


if __name__ == "__main__":
    main()
