"""Benchmarks for AnthropicModel against the local Anthropic SSE fake (prints figures).

Run: ``.venv/bin/python bench/bench_anthropic.py [--runs 20] [--quick]``

1. Cancel latency, ``agent.cancel()`` call -> the invocation's return, per state: chunks
   flowing, silent stream, before headers, 429 back-off, cooperative tool.
   Targets: max < 50 ms, median < 10 ms.
2. Loop overhead: median time of ``agent.invoke`` on a one-turn 200-chunk stream divided by
   the median time to iterate the same response with the raw SDK
   (``client.messages.create(..., stream=True)``). Target <= 1.10.
3. Throughput: 16 threads x 20 invokes (one agent each, one shared model) vs 16 threads
   iterating the raw SDK (one shared client); ratio, errors, leaked threads and sockets.

The server runs in this process (Python threads), so both sides share the GIL with it;
ratios are more meaningful than absolute times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
from anthropic.types import MessageParam, RawContentBlockDeltaEvent
from anthropic.types import TextDelta as SDKTextDelta

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, RetryPolicy, ToolContext, tool  # noqa: E402
from agent_sync.events import ModelRetry, TextDelta, ToolStart  # noqa: E402
from agent_sync.models import AnthropicModel  # noqa: E402
from agent_sync.testing.anthropic_server import AnthropicServer  # noqa: E402
from bench._common import report, summarize  # noqa: E402

CHUNKS = 200
LONG_TEXT = "abcde" * CHUNKS  # 200 text deltas of 5 characters
API_KEY = "bench-key"
PROMPT: list[MessageParam] = [{"role": "user", "content": "go"}]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def _model(server: AnthropicServer) -> AnthropicModel:
    return AnthropicModel(
        "claude-bench", client_args={"base_url": server.base_url, "api_key": API_KEY}
    )


def _cancel_latency(
    label: str,
    runs: int,
    turn: dict[str, Any],
    ready: Callable[[Any], bool],
    *,
    tools: list[Any] | None = None,
    retry: RetryPolicy | None = None,
) -> list[float]:
    """Start ``agent.stream`` in a thread, cancel once ``ready(event)``; time the return."""
    samples: list[float] = []
    with AnthropicServer([turn] * (runs * 3)) as server:
        model = _model(server)
        agent = Agent(model, tools=tools or [], retry=retry or RetryPolicy(max_attempts=1))
        for _ in range(runs):
            reached = threading.Event()
            box: dict[str, float] = {}

            def run(reached: threading.Event = reached, box: dict[str, float] = box) -> None:
                for event in agent.stream("go"):
                    if not reached.is_set() and ready(event):
                        reached.set()
                box["ended"] = time.perf_counter()

            thread = threading.Thread(target=run, name="bench-invoke")
            thread.start()
            if turn.get("stall_after") is not None or turn.get("stall_headers"):
                server.wait_for_stall(count=len(samples) + 1)
            else:
                reached.wait(10)
            started = time.perf_counter()
            agent.cancel("bench")
            thread.join(10)
            samples.append(box["ended"] - started)
        model.close()
    report(f"cancel latency: {label}", samples)
    return samples


def bench_cancel(runs: int) -> dict[str, list[float]]:
    entered = threading.Event()

    @tool
    def slow(query: str, context: ToolContext) -> str:
        """A cooperative slow tool.

        Args:
            query: Anything.
        """
        entered.set()
        context.wait(30)
        return "late"

    results = {
        "chunks flowing": _cancel_latency(
            "chunks flowing", runs, {"text": LONG_TEXT * 20, "chunk_size": 5, "chunk_delay": 0.001},
            lambda e: isinstance(e, TextDelta),
        ),
        "silent stream": _cancel_latency(
            "silent stream", runs, {"text": "partial text", "stall_after": 4}, lambda e: False
        ),
        "before headers": _cancel_latency(
            "before headers", runs, {"stall_headers": True}, lambda e: False
        ),
        "429 back-off": _cancel_latency(
            "429 back-off", runs, {"status": 429, "retry_after": 30},
            lambda e: isinstance(e, ModelRetry),
            retry=RetryPolicy(max_attempts=3, initial_delay=30, max_delay=30),
        ),
        "cooperative tool": _cancel_latency(
            "cooperative tool", runs,
            {"tool_calls": [{"name": "slow", "input": {"query": "q"}}]},
            lambda e: isinstance(e, ToolStart) and entered.wait(5),
            tools=[slow],
        ),
    }  # fmt: skip
    return results


def bench_overhead(runs: int) -> float:
    """Median invoke time / median raw SDK iteration time, same 200-chunk response."""
    turn = {"text": LONG_TEXT, "chunk_size": 5}
    with AnthropicServer([turn] * (runs * 2 + 10)) as server:
        model = _model(server)
        agent = Agent(model, retry=RetryPolicy(max_attempts=1))
        raw = anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0)

        def via_agent() -> None:
            agent.invoke("go")
            del agent.messages[:]  # keep the history (and the request body) one turn long

        def via_sdk() -> None:
            text = []
            stream = raw.messages.create(
                model="claude-bench", max_tokens=4096, messages=PROMPT, stream=True
            )
            for event in stream:
                if isinstance(event, RawContentBlockDeltaEvent) and isinstance(
                    event.delta, SDKTextDelta
                ):
                    text.append(event.delta.text)

        for warm in (via_agent, via_sdk, via_agent, via_sdk):
            warm()
        agent_times: list[float] = []
        sdk_times: list[float] = []
        for _ in range(runs):  # interleaved so drift hits both sides alike
            for fn, bucket in ((via_agent, agent_times), (via_sdk, sdk_times)):
                started = time.perf_counter()
                fn()
                bucket.append(time.perf_counter() - started)
        model.close()
        raw.close()
    report("one turn, 200 chunks: agent.invoke", agent_times)
    report("one turn, 200 chunks: raw SDK stream", sdk_times)
    ratio = statistics.median(agent_times) / statistics.median(sdk_times)
    print(f"{'loop overhead ratio (target <= 1.10)':<42} {ratio:.3f}")
    return ratio


def bench_throughput(threads: int, per_thread: int) -> None:
    """16 agents x 20 invokes on one shared model vs 16 threads on one raw SDK client."""
    turn = {"text": LONG_TEXT, "chunk_size": 5}
    total = threads * per_thread

    def run_threads(work: Callable[[], None]) -> tuple[float, int]:
        errors: list[BaseException] = []
        barrier = threading.Barrier(threads + 1)

        def worker() -> None:
            barrier.wait()
            for _ in range(per_thread):
                try:
                    work()
                except Exception as exc:  # noqa: BLE001 (counted and reported)
                    errors.append(exc)

        pool = [threading.Thread(target=worker, name=f"bench-{i}") for i in range(threads)]
        for thread in pool:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in pool:
            thread.join(120)
        for error in errors[:3]:
            print(f"  error: {type(error).__name__}: {error}")
        return time.perf_counter() - started, len(errors)

    threads_before = threading.active_count()
    fds_before = _open_fds()
    with AnthropicServer([turn] * (total * 2 + 10)) as server:
        model = _model(server)
        local = threading.local()

        def via_agent() -> None:
            agent = getattr(local, "agent", None)
            if agent is None:
                agent = local.agent = Agent(model, retry=RetryPolicy(max_attempts=1))
            agent.invoke("go")
            del agent.messages[:]

        raw = anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0)

        def via_sdk() -> None:
            for _ in raw.messages.create(
                model="claude-bench", max_tokens=4096, messages=PROMPT, stream=True
            ):
                pass

        agent_time, agent_errors = run_threads(via_agent)
        sdk_time, sdk_errors = run_threads(via_sdk)
        model.close()
        raw.close()
        idle = server.wait_for_idle(5)
    leaked_threads = threading.active_count() - threads_before
    leaked_fds = _open_fds() - fds_before
    print(f"{'throughput: agents (invokes/s)':<42} {total / agent_time:8.1f}  "
          f"errors={agent_errors}")  # fmt: skip
    print(f"{'throughput: raw SDK (streams/s)':<42} {total / sdk_time:8.1f}  errors={sdk_errors}")
    print(f"{'throughput ratio agent/raw':<42} {sdk_time / agent_time:.3f}")
    print(f"{'leaked threads / fds / server idle':<42} {leaked_threads} / {leaked_fds} / {idle}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per measurement")
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller load")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    print(f"AnthropicModel benchmarks (runs={runs}, anthropic {anthropic.__version__})")
    cancel = bench_cancel(runs)
    worst = max(summarize(samples)["max"] for samples in cancel.values())
    medians = max(summarize(samples)["median"] for samples in cancel.values())
    print(f"{'cancel: worst max / worst median':<42} {worst * 1000:.2f} ms / "
          f"{medians * 1000:.2f} ms")  # fmt: skip
    bench_overhead(max(runs, 30))
    bench_throughput(4 if args.quick else 16, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
