"""Benchmarks for OpenAIResponsesModel against the local Responses API fake (prints figures).

Run: ``python bench/bench_responses.py [--runs 30] [--quick]``

1. Cancel latency, ``agent.cancel()`` call -> the run's return, per I/O state: chunks
   flowing, silent stream, before headers, retry back-off, cooperative tool; and while
   connecting (a listener whose accept queue is full). Goal: p99 < 5 ms in each state.
2. Loop overhead: median time of ``agent.invoke`` on a one-turn 200-chunk answer divided by
   the median time the official ``openai`` SDK takes to stream the same response
   (``client.responses.create(..., stream=True)``, every event iterated), interleaved.
   Goal <= 1.05.
3. Throughput: 16 threads x 20 invokes (one agent each, one shared model) vs 16 threads
   streaming with the SDK (one shared client).

The harness is bench/_provider_bench.py (this file says how to reach the Responses API).
The server runs in this process (Python threads), so both sides share the GIL with it;
ratios mean more than absolute times.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import openai
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.models import OpenAIResponsesModel  # noqa: E402
from agent_sync.testing._http_server import ScriptedServer  # noqa: E402
from agent_sync.testing.responses_server import ResponsesServer  # noqa: E402
from bench._common import ms, p99  # noqa: E402
from bench._provider_bench import (  # noqa: E402
    Provider,
    cancel_latency,
    overhead_section,
    throughput_section,
)
from bench.bench_openai import OPENAI  # noqa: E402

KEY = "sk-bench-responses"


def _url(server: ScriptedServer) -> str:
    return f"{server.base_url}/v1"  # ResponsesServer.url


def _session(pool: int | None) -> requests.Session:
    session = requests.Session()
    if pool is not None:
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=pool))
    return session


@contextmanager
def open_model(server: ScriptedServer, pool: int | None) -> Iterator[OpenAIResponsesModel]:
    """With ``pool``, the model runs on a shared session sized for that many threads."""
    shared = None if pool is None else _session(pool)
    model = OpenAIResponsesModel(
        "bench", base_url=_url(server), api_key=KEY, session=shared, timeout=(5, 60)
    )
    try:
        yield model
    finally:
        model.close()  # closes only a session the model created
        if shared is not None:
            shared.close()


@contextmanager
def open_raw(server: ScriptedServer, pool: int | None) -> Iterator[Callable[[], object]]:
    """The official SDK; yields "stream one response to its end"."""
    limits = httpx2.Limits(max_connections=pool or 10, max_keepalive_connections=pool or 10)
    client = openai.OpenAI(
        base_url=_url(server),
        api_key=KEY,
        max_retries=0,
        http_client=openai.DefaultHttpx2Client(limits=limits, timeout=60),
    )

    def iterate() -> int:
        count = 0
        with client.responses.create(model="bench", input="go", stream=True) as stream:
            for _event in stream:
                count += 1
        return count

    try:
        yield iterate
    finally:
        client.close()


RESPONSES = Provider("OpenAIResponsesModel", ResponsesServer, open_model, open_raw)


def _row(label: str, samples: list[float]) -> None:
    verdict = "OK" if p99(samples) < 0.005 else "MISSED"
    print(
        f"  {label:<40} n={len(samples):<4} median={ms(statistics.median(samples))} "
        f"p99={ms(p99(samples))} max={ms(max(samples))}  (goal p99 < 5 ms) -> {verdict}"
    )


def connect_latency(runs: int) -> list[float]:
    """Cancel while the TCP connect gets no answer (a listener with a full accept queue)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    host, port = listener.getsockname()
    samples = []
    original = socket.socket.connect_ex
    connecting = threading.Event()

    def observed(sock: socket.socket, target: object) -> int:
        code = original(sock, target)  # type: ignore[arg-type]
        connecting.set()
        return code

    socket.socket.connect_ex = observed  # type: ignore[method-assign]
    try:
        model = OpenAIResponsesModel(
            "bench", base_url=f"http://{host}:{port}/v1", api_key=KEY, timeout=(30, 30)
        )
        for _ in range(runs):
            connecting.clear()
            agent = Agent(model)
            ended: list[float] = []

            def run(agent: Agent = agent, ended: list[float] = ended) -> None:
                agent.invoke("go")
                ended.append(time.perf_counter())

            thread = threading.Thread(target=run, name="bench-connect")
            thread.start()
            connecting.wait(10)
            t0 = time.perf_counter()
            agent.cancel("bench")
            thread.join(10)
            samples.append(ended[0] - t0)
        model.close()
    finally:
        socket.socket.connect_ex = original  # type: ignore[method-assign]
        for filler in fillers:
            filler.close()
        listener.close()
    return samples


def cancel_section(runs: int, *, rounds: int = 1, with_chat: bool = False) -> None:
    """Cancel latency per state; with ``with_chat``, OpenAIModel (Chat Completions) in the
    same sitting, the two alternating round by round, so a busy machine's outliers show
    on both wires alike."""
    contenders = {"OpenAIResponsesModel": RESPONSES}
    if with_chat:
        contenders["OpenAIModel (chat)"] = OPENAI
    print(f"\n== cancel latency: cancel() -> the run returns ({runs * rounds} runs per state) ==")
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in contenders}
    floor: list[float] = []
    released = True
    for _ in range(rounds):
        for name, provider in contenders.items():
            result = cancel_latency(provider, runs)
            released = released and result.sockets_released
            floor.extend(result.floor)
            for label, values in result.samples.items():
                samples[name].setdefault(label, []).extend(values)
        samples["OpenAIResponsesModel"].setdefault("connecting (SYN unanswered)", []).extend(
            connect_latency(runs)
        )
    for name, states in samples.items():
        print(f"  {name}")
        for label, values in states.items():
            _row(label, values)
    print("  the machine's floor, interleaved (no agent_sync in it)")
    _row("a bare thread wake (Event.set -> waiter runs)", floor)
    print(f"  sockets released after all aborts: {released}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller load")
    parser.add_argument("--only", choices=["cancel", "overhead", "throughput"])
    parser.add_argument("--rounds", type=int, default=1, help="cancel rounds, interleaved")
    parser.add_argument("--with-chat", action="store_true", help="cancel: OpenAIModel too")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    if args.only in (None, "cancel"):
        cancel_section(runs, rounds=args.rounds, with_chat=args.with_chat)
    if args.only in (None, "overhead"):
        overhead_section(
            RESPONSES, 5 if args.quick else max(runs, 50), "openai SDK responses stream",
            model_alone=True,
        )  # fmt: skip
    if args.only in (None, "throughput"):
        throughput_section(RESPONSES, 16, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
