"""Soak: random Ctrl-C during invoke() and random close() from other threads.

Not a CI test (it runs for a while and sends real SIGINTs to itself). Part 1 runs ``--n``
invokes, each with a SIGINT at a random moment (``threading.Timer(uniform(0, 2 ms),
os.kill, (pid, SIGINT))``), half of them with ``timeout=``; part 2 runs ``--n`` streams
iterated by the main thread and closed by another thread at a random moment; part 3 runs
``--n`` rounds of timed work with a SIGINT at a random moment: ``invoke(timeout=...)`` whose
timeout fires (a model that stalls, timeouts of 0.5-2 ms) or does not (30 s), or
``schedule``/``cancel`` on the deadline scheduler until the SIGINT lands; after each round,
another thread checks that a timed invoke still completes and a due deadline still fires (a
*deadlock* otherwise: the soak stops there, since the process is wedged). After each run:
is the agent stuck (still running), is its history invalid, does the next invoke work, and
did any thread raise where it should not. Prints the counts; all must be 0.

    python bench/soak_interrupts.py            # 5,000 + 5,000 + 5,000
    python bench/soak_interrupts.py --n 500
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import (  # noqa: E402
    Agent,
    ConcurrentInvocationError,
    ToolContext,
    tool,
    validate_history,
)
from agent_sync._deadlines import schedule  # noqa: E402
from agent_sync.messages import CANCELLED_TEXT, Message  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402

PROBE_WAIT = 20.0  # a healthy probe answers in milliseconds; past this the process is wedged


@tool
def lookup(q: str, context: ToolContext) -> str:
    """Cooperative lookup.

    Args:
        q: What to look up.
    """
    context.wait(0.0005)
    return f"result for {q}"


def quick_agent() -> Agent:
    return Agent(ScriptedModel(["quick answer"], repeat=True))


def tool_agent() -> Agent:
    script: list[Any] = [
        {"text": "Let me look. " * 4, "chunk_size": 3, "tool_calls": [{"name": "lookup"}]},
        {"text": "Here is the answer. " * 6, "chunk_size": 3},
    ]
    return Agent(ScriptedModel(script, repeat=True), tools=[lookup], tool_grace_period=0.05)


def closing_messages(messages: list[Message]) -> int:
    return sum(
        1 for m in messages if m["role"] == "assistant" and {"text": CANCELLED_TEXT} in m["content"]
    )


class SigintCounter:
    """Counts handled SIGINTs; ``wait_for(n)`` blocks (on the wakeup fd) until n handled."""

    def __init__(self) -> None:
        self.handled = 0
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        # agent_sync's handler (it defers a Ctrl-C in a run's release): chained, as an
        # application's own handler should be (agent_sync._signal_safe).
        self.previous_handler = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.handled += 1
        handler = self.previous_handler
        if callable(handler):
            handler(signum, frame)
        else:
            raise KeyboardInterrupt

    def wait_for(self, count: int) -> None:
        while self.handled < count:  # the signal may land after invoke() returned
            try:
                os.read(self._read, 1)  # returns once the C-level handler has run
            except KeyboardInterrupt:
                pass


def check(agent: Agent, seen: Counter[str]) -> Agent:
    """Count a stuck agent or an invalid history; return the agent to use next."""
    if agent.is_running:
        seen["stuck agents"] += 1
        return quick_agent()
    if validate_history(agent.messages):
        seen["invalid histories"] += 1
        return quick_agent()
    try:
        agent.invoke("next")
    except ConcurrentInvocationError:
        seen["next invoke refused"] += 1
    if agent.is_running or validate_history(agent.messages):
        seen["invalid histories"] += 1
    return agent if len(agent.messages) < 200 else quick_agent()


def soak_sigints(n: int, rng: random.Random, seen: Counter[str]) -> None:
    counter = SigintCounter()
    pid = os.getpid()
    agent = quick_agent()
    for number in range(1, n + 1):
        timeout = 30.0 if number % 2 else None
        timer = threading.Timer(rng.uniform(0, 0.002), os.kill, (pid, signal.SIGINT))
        try:
            timer.start()
            agent.invoke("question", timeout=timeout)
            seen["sigint: invoke returned"] += 1
        except KeyboardInterrupt:
            seen["sigint: KeyboardInterrupt propagated"] += 1
        counter.wait_for(number)
        timer.join(5)
        agent = check(agent, seen)
    signal.signal(signal.SIGINT, counter.previous_handler)
    signal.set_wakeup_fd(-1)


def soak_closes(n: int, rng: random.Random, seen: Counter[str]) -> None:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for _ in range(n):
            agent = tool_agent() if rng.random() < 0.5 else quick_agent()
            stream = agent.stream("question")
            starting = threading.Event()
            spin = rng.randrange(3000)  # spread the close over the run by work, not time

            def close(
                stream: Any = stream, starting: threading.Event = starting, spin: int = spin
            ) -> None:
                try:
                    starting.wait(10)
                    for _ in range(spin):
                        pass
                    stream.close()
                except BaseException as exc:  # counted: close() must never raise
                    seen[f"close(): exception in the closing thread: {exc!r}"] += 1

            closer = threading.Thread(target=close, name="soak-close")
            closer.start()
            try:
                starting.set()
                for _ in stream:
                    pass
            except BaseException as exc:  # counted: iterating must never raise either
                seen[f"close(): exception in the iterating thread: {exc!r}"] += 1
            closer.join(30)
            if closer.is_alive():
                seen["close(): closing thread hung"] += 1
            if closing_messages(agent.messages) > 1:
                seen["close(): more than one closing message"] += 1
            result = stream.result
            seen[f"close(): run ended {result.stop_reason if result else 'without result'}"] += 1
            check(agent, seen)
    finally:
        sys.setswitchinterval(previous)


def stalled_agent() -> Agent:
    return Agent(ScriptedModel([{"text": "x", "stall_after": 1}], repeat=True))


def _nothing() -> None:
    return None


def timed_work(
    kind: str, agent: Agent, rng: random.Random, seen: Counter[str], handled: Callable[[], bool]
) -> None:
    if kind == "churn":  # until the SIGINT lands, somewhere in the scheduler's code
        while not handled():
            schedule(rng.uniform(0, 60), _nothing).cancel()
        # The handler ran but its KeyboardInterrupt never reached this loop: CPython
        # swallows an exception raised in a finalizer or weakref callback ("Exception
        # ignored"), and the signal landed in one (the garbage collector ran there).
        seen["timed: KeyboardInterrupt swallowed by a finalizer (CPython)"] += 1
        return
    timeout = 30.0 if kind == "quick" else rng.uniform(0.0005, 0.002)
    result = agent.invoke("question", timeout=timeout)
    seen[f"timed: {kind} ended {result.stop_reason}/{result.cancel_reason}"] += 1


def probe_timed_calls() -> bool:
    """From another thread: a timed invoke answers and a due deadline fires."""
    ok: list[bool] = []

    def probe() -> None:
        fired = threading.Event()
        schedule(0, fired.set)
        answered = quick_agent().invoke("ping", timeout=PROBE_WAIT).stop_reason == "end_turn"
        stuck = stalled_agent().invoke("ping", timeout=0.001).cancel_reason == "timeout"
        ok.append(fired.wait(PROBE_WAIT) and answered and stuck)

    thread = threading.Thread(target=probe, name="soak-probe", daemon=True)
    thread.start()
    thread.join(PROBE_WAIT * 2)
    return ok == [True]


def soak_timed(n: int, rng: random.Random, seen: Counter[str]) -> bool:
    """Part 3; ``False`` if a probe found the process wedged (the soak stops)."""
    counter = SigintCounter()
    pid = os.getpid()
    agents = {"quick": quick_agent(), "stalled": stalled_agent()}
    try:
        for number in range(1, n + 1):
            kind = rng.choice(["quick", "stalled", "churn"])
            timer = threading.Timer(rng.uniform(0, 0.002), os.kill, (pid, signal.SIGINT))
            try:
                timer.start()
                timed_work(
                    kind,
                    agents.get(kind, agents["quick"]),
                    rng,
                    seen,
                    lambda: counter.handled >= number,  # noqa: B023 - read in this round
                )
            except KeyboardInterrupt:
                seen["timed: KeyboardInterrupt propagated"] += 1
            counter.wait_for(number)
            timer.join(5)
            if kind != "churn":
                agents[kind] = check_timed(agents[kind], kind, seen)
            if not probe_timed_calls():
                seen["deadlocks"] += 1
                return False
        return True
    finally:
        signal.signal(signal.SIGINT, counter.previous_handler)
        signal.set_wakeup_fd(-1)


def check_timed(agent: Agent, kind: str, seen: Counter[str]) -> Agent:
    """``check`` for timed runs: the next call has a timeout too (a stalled model)."""
    fresh = quick_agent if kind == "quick" else stalled_agent
    if agent.is_running:
        seen["stuck agents"] += 1
        return fresh()
    if validate_history(agent.messages):
        seen["invalid histories"] += 1
        return fresh()
    try:
        agent.invoke("next", timeout=0.05)
    except ConcurrentInvocationError:
        seen["next invoke refused"] += 1
    if agent.is_running or validate_history(agent.messages):
        seen["invalid histories"] += 1
    return agent if len(agent.messages) < 200 else fresh()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="runs per part (default 5000)")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seen: Counter[str] = Counter()
    wrong_thread: list[str] = []
    threading.excepthook = lambda hook: wrong_thread.append(repr(hook.exc_value))
    started = time.perf_counter()
    soak_sigints(args.n, rng, seen)
    soak_closes(args.n, rng, seen)
    if not soak_timed(args.n, rng, seen):
        print("a probe hung: the process is wedged, stopping here")
    totals = ("stuck agents", "invalid histories", "deadlocks")  # printed last, even if 0
    for key in sorted(seen):
        if key not in totals:
            print(f"{key}: {seen[key]}")
    print(f"exceptions in other threads: {len(wrong_thread)} {wrong_thread[:3]}")
    print(f"stuck agents: {seen['stuck agents']}")
    print(f"invalid histories: {seen['invalid histories']}")
    print(f"deadlocks: {seen['deadlocks']}")
    print(f"elapsed: {time.perf_counter() - started:.1f} s")
    sys.stdout.flush()
    os._exit(0)  # a wedged run's threads must not hold the exit up


if __name__ == "__main__":
    main()
