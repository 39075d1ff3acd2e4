"""Stress: injects and cancels from several threads at random moments never lose or double
an input, and every history stays valid."""

from __future__ import annotations

import random
import re
import threading
import time

import pytest

from agent_sync import Agent, UsageError, tool, validate_history
from agent_sync.testing import ScriptedModel
from tests.fixtures.soak import rounds

RUNS = rounds(30)
INJECTORS = 3


@tool
def echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: Anything.
    """
    return text


SCRIPT = [
    {
        "text": "step one",
        "tool_calls": [{"name": "echo", "input": {"text": "a"}}],
        "chunk_delay": 0.0005,
    },
    {"text": "step two", "tool_calls": [{"name": "echo", "input": {"text": "b"}}] * 2},
    {"text": "all done, thanks for waiting", "chunk_size": 3, "chunk_delay": 0.0005},
]
MARKER = re.compile(r"\bm\d+-\d+\b")


def _markers(agent: Agent) -> list[str]:
    found: list[str] = []
    for message in agent.messages:
        for block in message["content"]:
            if "text" in block and message["role"] == "user":
                found.extend(MARKER.findall(block["text"]))
    return found


@pytest.mark.timeout(300)
def test_injects_and_cancels_at_random_moments_lose_nothing_and_double_nothing() -> None:
    agent = Agent(ScriptedModel(SCRIPT, repeat=True), tools=[echo], max_cycles=8)
    started = time.perf_counter()
    agent.invoke("measure an uncancelled run first")
    uncancelled_s = time.perf_counter() - started
    rng = random.Random(8)
    accepted: set[str] = set()
    rejected: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def inject(number: int) -> None:
        count = 0
        try:
            while not stop.is_set():
                run = agent.active_run
                if run is None:
                    stop.wait(0.0002)
                    continue
                count += 1
                marker = f"m{number}-{count}"
                try:
                    run.inject(f"note {marker}")
                except UsageError:
                    with lock:
                        rejected.add(marker)
                else:
                    with lock:
                        accepted.add(marker)
                stop.wait(rng.uniform(0, uncancelled_s * INJECTORS))  # ~1 inject per run
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=inject, args=(n,), daemon=True) for n in range(INJECTORS)]
    for thread in threads:
        thread.start()
    outcomes: dict[str, int] = {}
    try:
        for _ in range(RUNS):
            mode = rng.choice(["now", "after_turn", None])
            delay = rng.uniform(0, uncancelled_s * 1.5)
            cancel_at = threading.Timer(delay, agent.cancel, kwargs={"mode": mode or "now"})
            if mode is not None:
                cancel_at.start()
            result = agent.invoke("go on")
            if mode is not None:
                cancel_at.cancel()
                cancel_at.join(10)
            outcomes[result.stop_reason] = outcomes.get(result.stop_reason, 0) + 1
            problems = validate_history(agent.messages)
            assert problems == [], problems
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert errors == []
    found = _markers(agent)
    assert len(found) == len(set(found)), "an injected input was written twice"
    assert set(found) == accepted, "an accepted input was lost (or a rejected one written)"
    assert not (set(found) & rejected)
    assert accepted, "no inject landed: the test did not exercise anything"
    finished = outcomes.get("end_turn", 0) + outcomes.get("max_cycles", 0)
    assert outcomes.get("cancelled", 0) > 0 and finished > 0, outcomes
