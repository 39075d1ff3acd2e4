"""Benchmarks for OpenAIModel against the local Chat Completions fake (prints figures).

Run: ``.venv/bin/python bench/bench_openai.py [--runs 20] [--quick]``

1. Cancel latency, ``agent.cancel()`` call -> ``invoke`` return, per state: chunks
   flowing, silent stream, before headers, retry back-off, cooperative tool.
   Targets: max < 50 ms, median < 10 ms.
2. Loop overhead: median time of ``agent.invoke`` on a one-turn 200-chunk stream divided by
   the median time to iterate the same response with plain requests + the SSE parser +
   ``json.loads``. Target <= 1.10.
3. Throughput: 16 threads x 20 invokes (one agent each, one shared model) vs 16 threads
   iterating raw; ratio, errors, leaked threads and sockets.

The server runs in this process (Python threads), so both sides share the GIL with it;
ratios are more meaningful than absolute times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, RetryPolicy, ToolContext, tool  # noqa: E402
from agent_sync.cancel import CancelScope  # noqa: E402
from agent_sync.models import ModelRequest, OpenAIModel  # noqa: E402
from agent_sync.models._sse import iter_sse  # noqa: E402
from agent_sync.testing.openai_server import OpenAIServer  # noqa: E402
from bench._common import report, summarize  # noqa: E402

CHUNKS = 200
LONG_TEXT = "abcde" * CHUNKS  # 200 content chunks of 5 characters


def _stream_in_thread(agent: Agent, prompt: str, on_event: Callable[[Any], None]) -> Any:
    """Run ``agent.stream`` in a thread; return (thread, box with 'ended_at')."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            for event in agent.stream(prompt):
                on_event(event)
        except Exception as exc:  # noqa: BLE001 (reported)
            box["error"] = exc
        box["ended_at"] = time.perf_counter()

    thread = threading.Thread(target=run, name="bench-invoke")
    thread.start()
    return thread, box


def cancel_latency(runs: int) -> None:
    print(f"\n== cancel latency: cancel() -> invoke returns ({runs} runs per state) ==")
    started = threading.Event()

    @tool
    def slow_tool(context: ToolContext) -> str:
        """A cooperative tool that waits up to 30 s."""
        started.set()
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
    all_samples: list[float] = []
    with OpenAIServer() as server:
        model = OpenAIModel("bench", base_url=server.url, timeout=(5, 60))
        for label, (turn, trigger) in states.items():
            samples: list[float] = []
            for _ in range(runs):
                server.add_turns(turn)
                started.clear()
                ready = threading.Event()
                stalls_before = server._stalls  # noqa: SLF001 (bench bookkeeping)
                agent = Agent(
                    model, tools=[slow_tool], retry=RetryPolicy(max_attempts=3, max_delay=60)
                )

                def on_event(
                    event: Any, trigger: str = trigger, ready: threading.Event = ready
                ) -> None:
                    if trigger == "text" and event.type == "text":
                        ready.set()
                    if trigger == "retry" and event.type == "retry":
                        ready.set()

                thread, box = _stream_in_thread(agent, "go", on_event)
                if trigger == "stall":
                    server.wait_for_stall(stalls_before + 1)
                elif trigger == "tool":
                    started.wait(5)
                else:
                    ready.wait(5)
                t0 = time.perf_counter()
                agent.cancel("bench")
                thread.join(10)
                samples.append(box["ended_at"] - t0)
                if "error" in box:
                    print(f"  error in {label}: {box['error']!r}")
                server._turns.clear()  # noqa: SLF001 (drop unused turns of this run)
            report(f"  {label}", samples)
            all_samples.extend(samples)
        model.close()
        server.wait_for_idle()
    s = summarize(all_samples)
    verdict = "OK" if s["max"] < 0.050 and s["median"] < 0.010 else "MISSED"
    print(
        f"  all states: median={s['median'] * 1000:.2f} ms max={s['max'] * 1000:.2f} ms "
        f"(targets: median < 10 ms, max < 50 ms) -> {verdict}"
    )


def _raw_iterate(session: requests.Session, url: str) -> int:
    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    count = 0
    with session.post(url, json=body, stream=True, timeout=(5, 60)) as response:
        chunks = response.iter_content(chunk_size=None)
        for event in iter_sse(chunks):
            if event.data == "[DONE]":
                break
            json.loads(event.data)
            count += 1
        for _ in chunks:
            pass  # let the connection return to the pool, as the model does
    return count


def loop_overhead(runs: int) -> None:
    print(f"\n== loop overhead: one-turn {CHUNKS}-chunk stream, {runs} runs each ==")
    turn = {"text": LONG_TEXT, "chunk_size": 5}
    with OpenAIServer() as server:
        model = OpenAIModel("bench", base_url=server.url, timeout=(5, 60))
        agent = Agent(model)
        session = requests.Session()
        url = f"{server.url}/chat/completions"
        request = ModelRequest(messages=[{"role": "user", "content": [{"text": "go"}]}])

        def invoke() -> None:
            agent.messages.clear()  # keep the request the same size as the raw one
            assert agent.invoke("go").text == LONG_TEXT

        def model_stream() -> None:
            for _ in model.stream(request, cancel=CancelScope()):
                pass

        contenders: dict[str, Callable[[], object]] = {
            "agent.invoke (OpenAIModel)": invoke,
            "OpenAIModel.stream alone": model_stream,
            "raw requests + SSE parser + json": lambda: _raw_iterate(session, url),
        }
        times: dict[str, list[float]] = {label: [] for label in contenders}
        for index in range(runs + 3):
            for label, call in contenders.items():  # interleaved: same server conditions
                server.add_turns(turn)
                t0 = time.perf_counter()
                call()
                if index >= 3:  # warm-up
                    times[label].append(time.perf_counter() - t0)
        for label, samples in times.items():
            report(f"  {label}", samples)
        raw = statistics.median(times["raw requests + SSE parser + json"])
        ratio = statistics.median(times["agent.invoke (OpenAIModel)"]) / raw
        provider = statistics.median(times["OpenAIModel.stream alone"]) / raw
        verdict = "OK" if ratio <= 1.10 else "MISSED"
        print(f"  overhead ratio (median agent / median raw) = {ratio:.3f} (target <= 1.10) "
              f"-> {verdict}; provider alone = {provider:.3f}")  # fmt: skip
        session.close()
        model.close()


def throughput(threads: int, per_thread: int) -> None:
    print(f"\n== throughput: {threads} threads x {per_thread} invokes ==")
    turn = {"text": LONG_TEXT[:400], "chunk_size": 5}  # 80 chunks
    with OpenAIServer() as server:
        url = f"{server.url}/chat/completions"

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

        baseline_threads = _library_threads()
        raw_session = requests.Session()
        raw_session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=threads))
        raw_elapsed, raw_errors = run(lambda: _raw_iterate(raw_session, url))
        raw_session.close()

        shared = requests.Session()
        shared.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=threads))
        model = OpenAIModel("bench", base_url=server.url, session=shared, timeout=(5, 60))
        local = threading.local()

        def invoke() -> None:
            agent = getattr(local, "agent", None)
            if agent is None:
                agent = local.agent = Agent(model)
            agent.messages.clear()
            if agent.invoke("go").stop_reason != "end_turn":
                raise RuntimeError("unexpected stop reason")

        agent_elapsed, agent_errors = run(invoke)
        shared.close()
        total = threads * per_thread
        idle = server.wait_for_idle(5)
        leaked_threads = _library_threads() - baseline_threads
        print(f"  raw:   {total / raw_elapsed:8.1f} streams/s  errors={raw_errors}")
        print(f"  agent: {total / agent_elapsed:8.1f} invokes/s  errors={agent_errors}")
        print(f"  throughput ratio agent/raw = {raw_elapsed / agent_elapsed:.3f}")
        print(f"  leaked threads={leaked_threads}  sockets released={idle} "
              f"(open on server: {server.open_connections})")  # fmt: skip


def _library_threads() -> int:
    """Non-daemon threads (the fake server's per-connection threads are daemons)."""
    return sum(1 for t in threading.enumerate() if not t.daemon)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller load")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    cancel_latency(runs)
    loop_overhead(max(runs, 50) if not args.quick else 5)
    throughput(16, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
