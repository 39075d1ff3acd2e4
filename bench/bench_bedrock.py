"""Benchmarks for BedrockModel (real boto3) against the local event-stream fake (prints figures).

Run: ``.venv/bin/python bench/bench_bedrock.py [--runs 20] [--quick]``

1. Cancel latency, ``agent.cancel()`` call -> ``invoke``/``stream`` return, per state:
   chunks flowing, silent stream, before headers, retry back-off, cooperative tool.
   Targets: max < 50 ms, median < 10 ms.
2. Loop overhead: median time of ``agent.invoke`` on a one-turn 200-chunk stream divided
   by the median time to iterate the same ``converse_stream`` response with the raw boto3
   client. Target <= 1.10.
3. Throughput: 16 threads x 20 invokes (one agent each, one shared BedrockModel) vs 16
   threads iterating raw ``converse_stream`` on one shared client; ratio, errors, leaked
   threads and file descriptors.

The fake server runs in this process, so both sides share the GIL with it: ratios mean
more than absolute times, and a loaded machine inflates the maxima.
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

import boto3
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, RetryPolicy, ToolContext, tool  # noqa: E402
from agent_sync.models import BedrockModel  # noqa: E402
from agent_sync.testing.bedrock_server import BedrockServer  # noqa: E402
from bench._common import report, summarize  # noqa: E402

CHUNKS = 200
LONG_TEXT = "abcde" * CHUNKS  # 200 text deltas of 5 characters
SESSION = boto3.Session(
    aws_access_key_id="AKIDBENCH", aws_secret_access_key="bench-secret", region_name="us-east-1"
)


def _model(server: BedrockServer, **kwargs: Any) -> BedrockModel:
    return BedrockModel("bench", endpoint_url=server.base_url, boto_session=SESSION, **kwargs)


def _stream_in_thread(agent: Agent, on_event: Callable[[Any], None]) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            for event in agent.stream("go"):
                on_event(event)
        except Exception as exc:  # noqa: BLE001 (reported)
            box["error"] = exc
        box["ended_at"] = time.perf_counter()

    thread = threading.Thread(target=run, name="bench-invoke")
    thread.start()
    return thread, box


def cancel_latency(runs: int) -> None:
    print(f"\n== cancel latency: cancel() -> invoke returns ({runs} runs per state) ==")
    tool_started = threading.Event()

    @tool
    def slow_tool(context: ToolContext) -> str:
        """A cooperative tool that waits up to 30 s."""
        tool_started.set()
        context.wait(30)
        return "done"

    states: dict[str, tuple[dict[str, Any], str]] = {
        "chunks flowing": ({"text": LONG_TEXT * 5, "chunk_size": 5, "chunk_delay": 0.001}, "text"),
        "silent stream": ({"text": "hello world", "chunk_size": 4, "stall_after": 3}, "stall"),
        "before headers": ({"stall_headers": True}, "stall"),
        "retry back-off (retry-after 30 s)": ({"status": 429, "retry_after": 30}, "retry"),
        "cooperative tool (context.wait)": (
            {"tool_calls": [{"name": "slow_tool", "input": {}}]},
            "tool",
        ),
    }
    everything: list[float] = []
    with BedrockServer() as server:
        model = _model(server, read_timeout=60)
        stalls = 0
        for label, (turn, trigger) in states.items():
            samples: list[float] = []
            for _ in range(runs):
                server.add_turns(turn)
                tool_started.clear()
                ready = threading.Event()
                agent = Agent(
                    model, tools=[slow_tool], retry=RetryPolicy(max_attempts=3, max_delay=60)
                )

                def on_event(
                    event: Any, trigger: str = trigger, ready: threading.Event = ready
                ) -> None:
                    if event.type == {"text": "text", "retry": "retry"}.get(trigger):
                        ready.set()

                thread, box = _stream_in_thread(agent, on_event)
                if trigger == "stall":
                    stalls += 1
                    server.wait_for_stall(stalls)
                elif trigger == "tool":
                    tool_started.wait(5)
                else:
                    ready.wait(5)
                t0 = time.perf_counter()
                agent.cancel("bench")
                thread.join(10)
                samples.append(box["ended_at"] - t0)
                if "error" in box:
                    print(f"  error in {label}: {box['error']!r}")
                while server.turns_left:  # drop what this run did not consume
                    server._turns.popleft()  # noqa: SLF001 (bench bookkeeping)
            report(f"  {label}", samples)
            everything.extend(samples)
        model.close()
        print(f"  sockets released after all aborts: {server.wait_for_idle(5)}")
    s = summarize(everything)
    verdict = "OK" if s["max"] < 0.050 and s["median"] < 0.010 else "MISSED"
    print(
        f"  all states: median={s['median'] * 1000:.2f} ms max={s['max'] * 1000:.2f} ms "
        f"(targets: median < 10 ms, max < 50 ms) -> {verdict}"
    )


def _raw_client(server: BedrockServer, pool: int = 10) -> Any:
    config = Config(retries={"total_max_attempts": 1}, max_pool_connections=pool)
    return SESSION.client("bedrock-runtime", endpoint_url=server.base_url, config=config)


def _raw_iterate(client: Any) -> int:
    response = client.converse_stream(
        modelId="bench", messages=[{"role": "user", "content": [{"text": "go"}]}]
    )
    return sum(1 for _ in response["stream"])


def loop_overhead(runs: int) -> None:
    print(f"\n== loop overhead: one-turn {CHUNKS}-chunk stream, {runs} runs each ==")
    turn = {"text": LONG_TEXT, "chunk_size": 5}
    with BedrockServer() as server:
        model = _model(server)
        agent = Agent(model)
        raw = _raw_client(server)
        agent_times: list[float] = []
        raw_times: list[float] = []
        for index in range(runs + 3):
            server.add_turns(turn, turn)
            t0 = time.perf_counter()
            result = agent.invoke("go")
            t1 = time.perf_counter()
            _raw_iterate(raw)
            t2 = time.perf_counter()
            assert result.text == LONG_TEXT
            if index >= 3:  # warm-up
                agent_times.append(t1 - t0)
                raw_times.append(t2 - t1)
            agent.messages.clear()  # keep the request the same size as the raw one
        report("  agent.invoke (BedrockModel)", agent_times)
        report("  raw boto3 converse_stream iteration", raw_times)
        ratio = statistics.median(agent_times) / statistics.median(raw_times)
        verdict = "OK" if ratio <= 1.10 else "MISSED"
        print(f"  overhead ratio (median agent / median raw) = {ratio:.3f} (target <= 1.10) "
              f"-> {verdict}")  # fmt: skip
        raw.close()
        model.close()


def throughput(threads: int, per_thread: int) -> None:
    print(f"\n== throughput: {threads} threads x {per_thread} invokes ==")
    turn = {"text": LONG_TEXT[:400], "chunk_size": 5}  # 80 text deltas
    with BedrockServer() as server:

        def run(work: Callable[[], object]) -> tuple[float, int]:
            errors = [0]
            barrier = threading.Barrier(threads + 1)

            def worker() -> None:
                barrier.wait(10)
                for _ in range(per_thread):
                    try:
                        work()
                    except Exception as exc:  # noqa: BLE001 (counted)
                        errors[0] += 1
                        if errors[0] <= 3:
                            print(f"  error: {exc!r}")

            pool = [threading.Thread(target=worker, name=f"bench-{i}") for i in range(threads)]
            for thread in pool:
                thread.start()
            server.add_turns(*[turn] * (threads * per_thread))
            barrier.wait(10)
            t0 = time.perf_counter()
            for thread in pool:
                thread.join(120)
            return time.perf_counter() - t0, errors[0]

        baseline_threads, baseline_fds = _library_threads(), _open_fds()
        raw = _raw_client(server, pool=threads)
        raw_elapsed, raw_errors = run(lambda: _raw_iterate(raw))
        raw.close()

        model = _model(server, max_pool_connections=threads)
        local = threading.local()
        retries, retries_lock = [0], threading.Lock()  # hidden by invoke(): report them

        def invoke() -> None:
            agent = getattr(local, "agent", None)
            if agent is None:
                agent = local.agent = Agent(model)
            agent.messages.clear()
            result = agent.invoke("go")
            if result.stop_reason != "end_turn":
                raise RuntimeError("unexpected stop reason")
            if result.metrics.retries:
                with retries_lock:
                    retries[0] += result.metrics.retries

        agent_elapsed, agent_errors = run(invoke)
        model.close()
        total = threads * per_thread
        idle = server.wait_for_idle(5)
        print(f"  raw:   {total / raw_elapsed:8.1f} streams/s  errors={raw_errors}")
        print(f"  agent: {total / agent_elapsed:8.1f} invokes/s  errors={agent_errors}  "
              f"retries={retries[0]}")  # fmt: skip
        print(f"  throughput ratio agent/raw = {raw_elapsed / agent_elapsed:.3f}")
        print(f"  leaked threads={_library_threads() - baseline_threads}  "
              f"sockets released on server={idle} (open: {server.open_connections})")  # fmt: skip
    # The raw client's pools are only closed by garbage collection (urllib3 2).
    print(f"  fds open now vs before (raw client included) = {_open_fds() - baseline_fds:+d}")


def _library_threads() -> int:
    """Non-daemon threads (the fake server's per-connection threads are daemons)."""
    return sum(1 for t in threading.enumerate() if not t.daemon)


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller load")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    cancel_latency(runs)
    loop_overhead(5 if args.quick else max(runs, 20))
    throughput(16, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
