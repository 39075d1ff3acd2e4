"""The harness shared by the provider benchmarks (bench_anthropic/bedrock/openai.py).

Each script describes its provider with a :class:`Provider` (the local fake, how to open
the model, how to iterate the same response with the raw SDK) and calls the measurements:

1. :func:`cancel_latency`: ``agent.cancel()`` call -> the invocation's return, per state
   (:data:`CANCEL_STATES`: chunks flowing, silent stream, before headers, retry back-off,
   cooperative tool).
2. :func:`loop_overhead`: ``agent.invoke`` on a one-turn 200-chunk stream vs the raw SDK
   iterating the same response, interleaved so drift hits both sides alike.
3. :func:`throughput`: N threads x M invokes (one agent each, one shared model) vs N
   threads iterating the raw SDK (one shared client); errors, leaked threads and sockets.

The ``*_section`` functions print a measurement in the ``== section ==`` layout of
bench_bedrock.py and bench_openai.py; bench_anthropic.py prints the results its own way.
The fake server runs in this process (Python threads), so both sides share the GIL with
it: ratios mean more than absolute times.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from agent_sync import Agent, RetryPolicy, ToolContext, tool
from agent_sync.cancel import CancelScope
from agent_sync.models import Model, ModelRequest
from agent_sync.testing._http_server import ScriptedServer
from bench._common import bare_wake, report, summarize

CHUNKS = 200
LONG_TEXT = "abcde" * CHUNKS  # 200 text deltas of 5 characters

# Opens the model under test on a server: (server, pool size or None for the default).
OpenModel = Callable[[ScriptedServer, int | None], AbstractContextManager[Model]]
# Opens a raw SDK client on a server and yields "stream the next response to the end".
OpenRaw = Callable[[ScriptedServer, int | None], AbstractContextManager[Callable[[], object]]]


@dataclass(frozen=True)
class Provider:
    """What differs per provider: the fake, the model, the raw-SDK baseline."""

    model_name: str  # "BedrockModel": names rows
    server: Callable[[], ScriptedServer]  # a fresh, unstarted fake
    model: OpenModel
    raw: OpenRaw


@dataclass(frozen=True)
class CancelState:
    label: str
    turn: dict[str, Any]
    trigger: str  # "text" / "retry": that event; "stall": the server says so; "tool": entered


CANCEL_STATES = (
    CancelState(
        "chunks flowing", {"text": LONG_TEXT * 5, "chunk_size": 5, "chunk_delay": 0.001}, "text"
    ),
    CancelState(
        "silent stream", {"text": "hello world", "chunk_size": 4, "stall_after": 3}, "stall"
    ),
    CancelState("before headers", {"stall_headers": True}, "stall"),
    CancelState("retry back-off (retry-after 30 s)", {"status": 429, "retry_after": 30}, "retry"),
    CancelState(
        "cooperative tool (context.wait)",
        {"tool_calls": [{"name": "slow_tool", "input": {}}]},
        "tool",
    ),
)


def _clear_turns(server: ScriptedServer) -> None:
    """Drop the turns a run did not consume."""
    server._turns.clear()  # noqa: SLF001 (bench bookkeeping)


def _stream_in_thread(
    agent: Agent, on_event: Callable[[Any], None]
) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``agent.stream`` in a thread; return (thread, box with 'ended_at' and 'error')."""
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


@dataclass
class CancelResult:
    samples: dict[str, list[float]]  # per CancelState.label, in CANCEL_STATES order
    floor: list[float]  # a bare thread wake after each cancel (bench._common.bare_wake)
    sockets_released: bool  # the server saw every connection closed after all the aborts


def cancel_latency(
    provider: Provider, runs: int, on_state: Callable[[str, list[float]], None] | None = None
) -> CancelResult:
    """``runs`` cancels per state; ``on_state(label, samples)`` as each state completes."""
    tool_started = threading.Event()

    @tool
    def slow_tool(context: ToolContext) -> str:
        """A cooperative tool that waits up to 30 s."""
        tool_started.set()
        context.wait(30)
        return "done"

    results: dict[str, list[float]] = {}
    floor: list[float] = []
    with provider.server() as server:
        with provider.model(server, None) as model:
            stalls = 0
            for state in CANCEL_STATES:
                samples: list[float] = []
                for _ in range(runs):
                    server.add_turns(state.turn)
                    tool_started.clear()
                    ready = threading.Event()
                    agent = Agent(
                        model, tools=[slow_tool], retry=RetryPolicy(max_attempts=3, max_delay=60)
                    )

                    def on_event(
                        event: Any, trigger: str = state.trigger, ready: threading.Event = ready
                    ) -> None:
                        if event.type == trigger:
                            ready.set()

                    thread, box = _stream_in_thread(agent, on_event)
                    if state.trigger == "stall":
                        stalls += 1
                        server.wait_for_stall(stalls)
                    elif state.trigger == "tool":
                        tool_started.wait(5)
                    else:
                        ready.wait(5)
                    t0 = time.perf_counter()
                    agent.cancel("bench")
                    thread.join(10)
                    samples.append(box["ended_at"] - t0)
                    floor.append(bare_wake())
                    if "error" in box:
                        print(f"  error in {state.label}: {box['error']!r}")
                    _clear_turns(server)
                results[state.label] = samples
                if on_state is not None:
                    on_state(state.label, samples)
        released = server.wait_for_idle(5)
    return CancelResult(results, floor, released)


def cancel_section(provider: Provider, runs: int, *, report_sockets: bool = False) -> None:
    """Print :func:`cancel_latency` as a section, with the verdict on the targets."""
    print(f"\n== cancel latency: cancel() -> invoke returns ({runs} runs per state) ==")
    result = cancel_latency(provider, runs, lambda label, s: report(f"  {label}", s))
    if report_sockets:
        print(f"  sockets released after all aborts: {result.sockets_released}")
    s = summarize([x for samples in result.samples.values() for x in samples])
    verdict = "OK" if s["max"] < 0.050 and s["median"] < 0.010 else "MISSED"
    print(
        f"  all states: median={s['median'] * 1000:.2f} ms max={s['max'] * 1000:.2f} ms "
        f"(targets: median < 10 ms, max < 50 ms) -> {verdict}"
    )


@dataclass
class OverheadResult:
    agent: list[float]  # agent.invoke
    raw: list[float]  # the raw SDK iterating the same response
    model_alone: list[float] | None  # model.stream with no agent, if asked for

    @property
    def ratio(self) -> float:
        """Median agent time / median raw time (target <= 1.10)."""
        return statistics.median(self.agent) / statistics.median(self.raw)


def loop_overhead(
    provider: Provider, runs: int, *, model_alone: bool = False, warm_up: int = 3
) -> OverheadResult:
    """Time a one-turn ``CHUNKS``-chunk response: invoke vs raw (and model.stream alone)."""
    turn = {"text": LONG_TEXT, "chunk_size": 5}
    with provider.server() as server, provider.model(server, None) as model:
        with provider.raw(server, None) as raw:
            agent = Agent(model)
            request = ModelRequest(messages=[{"role": "user", "content": [{"text": "go"}]}])

            def invoke() -> None:
                agent.messages.clear()  # keep the request the same size as the raw one
                assert agent.invoke("go").text == LONG_TEXT

            def stream_alone() -> None:
                for _ in model.stream(request, cancel=CancelScope()):
                    pass

            contenders: dict[str, Callable[[], object]] = {"agent": invoke}
            if model_alone:
                contenders["model_alone"] = stream_alone
            contenders["raw"] = raw
            times: dict[str, list[float]] = {name: [] for name in contenders}
            for index in range(runs + warm_up):
                for name, call in contenders.items():  # interleaved: same server conditions
                    server.add_turns(turn)
                    t0 = time.perf_counter()
                    call()
                    if index >= warm_up:
                        times[name].append(time.perf_counter() - t0)
    return OverheadResult(times["agent"], times["raw"], times.get("model_alone"))


def overhead_section(
    provider: Provider, runs: int, raw_label: str, *, model_alone: bool = False
) -> None:
    """Print :func:`loop_overhead` as a section, with the verdict on the target."""
    print(f"\n== loop overhead: one-turn {CHUNKS}-chunk stream, {runs} runs each ==")
    result = loop_overhead(provider, runs, model_alone=model_alone)
    report(f"  agent.invoke ({provider.model_name})", result.agent)
    if result.model_alone is not None:
        report(f"  {provider.model_name}.stream alone", result.model_alone)
    report(f"  {raw_label}", result.raw)
    verdict = "OK" if result.ratio <= 1.10 else "MISSED"
    line = (
        f"  overhead ratio (median agent / median raw) = {result.ratio:.3f} (target <= 1.10) "
        f"-> {verdict}"
    )
    if result.model_alone is not None:
        alone = statistics.median(result.model_alone) / statistics.median(result.raw)
        line += f"; provider alone = {alone:.3f}"
    print(line)


@dataclass
class ThroughputResult:
    total: int  # invokes (and raw streams) in each phase
    raw_elapsed: float
    raw_errors: int
    agent_elapsed: float
    agent_errors: int
    retries: int  # hidden by invoke() (the agent's retry policy): reported
    leaked_threads: int  # non-daemon threads (the fake's connection threads are daemons)
    sockets_released: bool
    open_connections: int  # on the server, after both phases
    leaked_fds: int  # file descriptors open after vs before (raw client included)

    @property
    def ratio(self) -> float:
        """Agent throughput / raw throughput."""
        return self.raw_elapsed / self.agent_elapsed


def _library_threads() -> int:
    """Non-daemon threads (the fake server's per-connection threads are daemons)."""
    return sum(1 for t in threading.enumerate() if not t.daemon)


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def throughput(
    provider: Provider, threads: int, per_thread: int, chunks: int = 80
) -> ThroughputResult:
    """``threads`` x ``per_thread``: raw SDK on one client, then one agent per thread."""
    turn = {"text": LONG_TEXT[: chunks * 5], "chunk_size": 5}
    total = threads * per_thread
    baseline_threads, baseline_fds = _library_threads(), _open_fds()
    with provider.server() as server:

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
            server.add_turns(*[turn] * total)
            barrier.wait(10)
            t0 = time.perf_counter()
            for thread in pool:
                thread.join(120)
            return time.perf_counter() - t0, errors[0]

        with provider.raw(server, threads) as raw:
            raw_elapsed, raw_errors = run(raw)

        local = threading.local()
        retries, retries_lock = [0], threading.Lock()
        with provider.model(server, threads) as model:

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
        idle = server.wait_for_idle(5)
        open_connections = server.open_connections
        leaked_threads = _library_threads() - baseline_threads
    return ThroughputResult(
        total, raw_elapsed, raw_errors, agent_elapsed, agent_errors, retries[0],
        leaked_threads, idle, open_connections, _open_fds() - baseline_fds,
    )  # fmt: skip


def throughput_section(
    provider: Provider,
    threads: int,
    per_thread: int,
    *,
    leaks: str = "  leaked threads={threads}  sockets released={idle} (open on server: {open})",
    retries_and_fds: bool = False,
) -> None:
    """Print :func:`throughput` as a section; ``leaks`` formats the leak line."""
    print(f"\n== throughput: {threads} threads x {per_thread} invokes ==")
    r = throughput(provider, threads, per_thread)
    retries = f"  retries={r.retries}" if retries_and_fds else ""
    print(f"  raw:   {r.total / r.raw_elapsed:8.1f} streams/s  errors={r.raw_errors}")
    print(f"  agent: {r.total / r.agent_elapsed:8.1f} invokes/s  errors={r.agent_errors}{retries}")
    print(f"  throughput ratio agent/raw = {r.ratio:.3f}")
    print(leaks.format(threads=r.leaked_threads, idle=r.sockets_released, open=r.open_connections))
    if retries_and_fds:
        # The raw client's pools may only be closed by garbage collection (urllib3 2).
        print(f"  fds open now vs before (raw client included) = {r.leaked_fds:+d}")
