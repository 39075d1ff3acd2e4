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

The harness is bench/_provider_bench.py; this file says how to reach Anthropic and prints
the figures in its own layout. The server runs in this process (Python threads), so both
sides share the GIL with it; ratios are more meaningful than absolute times.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
from anthropic.types import MessageParam, RawContentBlockDeltaEvent
from anthropic.types import TextDelta as SDKTextDelta

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync.models import AnthropicModel  # noqa: E402
from agent_sync.testing._http_server import ScriptedServer  # noqa: E402
from agent_sync.testing.anthropic_server import AnthropicServer  # noqa: E402
from bench._common import report, summarize  # noqa: E402
from bench._provider_bench import (  # noqa: E402
    CHUNKS,
    Provider,
    cancel_latency,
    loop_overhead,
    throughput,
)

API_KEY = "bench-key"
PROMPT: list[MessageParam] = [{"role": "user", "content": "go"}]
# The harness's state labels, as this script has always printed them.
STATE_LABELS = {
    "chunks flowing": "chunks flowing",
    "silent stream": "silent stream",
    "before headers": "before headers",
    "retry back-off (retry-after 30 s)": "429 back-off",
    "cooperative tool (context.wait)": "cooperative tool",
}


@contextmanager
def open_model(server: ScriptedServer, pool: int | None) -> Iterator[AnthropicModel]:
    """The SDK's default connection pool, whatever ``pool`` (it holds 16 threads)."""
    model = AnthropicModel(
        "claude-bench", client_args={"base_url": server.base_url, "api_key": API_KEY}
    )
    try:
        yield model
    finally:
        model.close()


@contextmanager
def open_raw(server: ScriptedServer, pool: int | None) -> Iterator[Callable[[], object]]:
    """The plain SDK client; yields "stream one message, collecting its text"."""
    client = anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY, max_retries=0)

    def iterate() -> str:
        text = []
        stream = client.messages.create(
            model="claude-bench", max_tokens=4096, messages=PROMPT, stream=True
        )
        for event in stream:
            if isinstance(event, RawContentBlockDeltaEvent) and isinstance(
                event.delta, SDKTextDelta
            ):
                text.append(event.delta.text)
        return "".join(text)

    try:
        yield iterate
    finally:
        client.close()


ANTHROPIC = Provider("AnthropicModel", AnthropicServer, open_model, open_raw)


def bench_cancel(runs: int) -> None:
    result = cancel_latency(
        ANTHROPIC, runs, lambda label, s: report(f"cancel latency: {STATE_LABELS[label]}", s)
    )
    worst = max(summarize(samples)["max"] for samples in result.samples.values())
    medians = max(summarize(samples)["median"] for samples in result.samples.values())
    print(f"{'cancel: worst max / worst median':<42} {worst * 1000:.2f} ms / "
          f"{medians * 1000:.2f} ms")  # fmt: skip


def bench_overhead(runs: int) -> None:
    result = loop_overhead(ANTHROPIC, runs)
    report(f"one turn, {CHUNKS} chunks: agent.invoke", result.agent)
    report(f"one turn, {CHUNKS} chunks: raw SDK stream", result.raw)
    print(f"{'loop overhead ratio (target <= 1.10)':<42} {result.ratio:.3f}")


def bench_throughput(threads: int, per_thread: int) -> None:
    r = throughput(ANTHROPIC, threads, per_thread, chunks=CHUNKS)
    print(f"{'throughput: agents (invokes/s)':<42} {r.total / r.agent_elapsed:8.1f}  "
          f"errors={r.agent_errors}")  # fmt: skip
    print(f"{'throughput: raw SDK (streams/s)':<42} {r.total / r.raw_elapsed:8.1f}  "
          f"errors={r.raw_errors}")  # fmt: skip
    print(f"{'throughput ratio agent/raw':<42} {r.ratio:.3f}")
    print(f"{'leaked threads / fds / server idle':<42} {r.leaked_threads} / {r.leaked_fds} / "
          f"{r.sockets_released}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per measurement")
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller load")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    print(f"AnthropicModel benchmarks (runs={runs}, anthropic {anthropic.__version__})")
    bench_cancel(runs)
    bench_overhead(max(runs, 30))
    bench_throughput(4 if args.quick else 16, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
