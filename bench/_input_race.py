"""bench_guardrails.py's race-mode input figures (issue 30): the first released token
against max(check end, the model's first token), and a randomized race count (tool starts
before the pass of an input check or after its trip; text released before the checks
passed). Offline, on ScriptedModel with random delays."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any


class _TimedModel:
    """A ScriptedModel that waits ``ttft`` seconds before its answer and stamps the moment
    its first content event is handed to the run (``first``)."""

    def __init__(self, turns: list[Any], ttft: float) -> None:
        from agent_sync.testing import ScriptedModel

        self.inner = ScriptedModel(turns)
        self.ttft = ttft
        self.first: float | None = None

    def stream(self, request: Any, *, cancel: Any) -> Iterator[Any]:
        events = self.inner.stream(request, cancel=cancel)
        if self.first is not None:  # a later call (after tools): no delay
            return events
        return self._delayed(events, cancel)

    def _delayed(self, events: Iterator[Any], cancel: Any) -> Iterator[Any]:
        cancel.event.wait(self.ttft)  # a slow first token (ends on abort)
        for event in events:
            if self.first is None and "contentBlockDelta" in event:
                self.first = time.perf_counter()
            yield event


def release_delays(runs: int, seed: int = 30) -> tuple[list[float], list[float]]:
    """Seconds from max(check end, the model's first token) to the first TextDelta the
    caller gets, with the check's delay and the time to first token drawn at random
    (0-20 ms each) and 5 ms between chunks; and, interleaved, a bare cross-thread wake
    (``_common.bare_wake``: the floor of any release a check's thread causes, the machine's
    own noise)."""
    from _common import bare_wake

    from agent_sync import Agent
    from agent_sync.events import TextDelta
    from agent_sync.guardrails import Guardrail, GuardView

    rng = random.Random(seed)
    delays: list[float] = []
    wakes: list[float] = []
    turn = {"text": "a released answer", "chunk_size": 4, "chunk_delay": 0.005}
    for _ in range(runs):
        check_delay, ttft = rng.uniform(0, 0.02), rng.uniform(0, 0.02)
        ended: list[float] = []

        def check(view: GuardView, wait: float = check_delay, ended: list[float] = ended) -> None:
            threading.Event().wait(wait)
            ended.append(time.perf_counter())

        model = _TimedModel([turn], ttft)
        for event in Agent(model, guardrails=[Guardrail(check, stage="input")]).stream("go"):
            if isinstance(event, TextDelta):
                got = time.perf_counter()
                assert model.first is not None
                delays.append(got - max(ended[0], model.first))
                break
        wakes.append(bare_wake())
    return delays, wakes


def race_count(runs: int, seed: int = 30) -> dict[str, int]:
    """``runs`` races of a random input check (0-5 ms; trip, pass or redact, a third each)
    against a model that streams text (random time to first token, 0-5 ms) then asks for a
    tool: counts of tool starts before the check's pass or after its trip or redaction (the
    call a redaction discards asks for the tool, the next one does not), and of text released
    before the check passed or of the discarded call (goal: 0 and 0)."""
    from agent_sync import Agent, tool
    from agent_sync.events import TextDelta
    from agent_sync.guardrails import Guardrail, GuardView, Redact, Trip

    rng = random.Random(seed)
    counts = {"runs": runs, "trips": 0, "redactions": 0, "early tool starts": 0, "early text": 0}
    for _ in range(runs):
        check_delay, ttft = rng.uniform(0, 0.005), rng.uniform(0, 0.005)
        verdict = rng.choice(["trip", "pass", "redact"])
        passed: list[float] = []
        started: list[float] = []

        @tool
        def lookup() -> str:
            """Look it up."""
            started.append(time.perf_counter())  # noqa: B023 (each run's own agent)
            return "found"

        def check(view: GuardView, wait: float = check_delay, verdict: str = verdict) -> Any:
            threading.Event().wait(wait)
            if verdict == "trip":
                return Trip("no")
            if verdict == "redact":
                return Redact("go, redacted") if view.text == "go" else None
            passed.append(time.perf_counter())  # noqa: B023 (the last thing before the pass)
            return None

        turns = [
            {"text": "let me look", "chunk_size": 3, "tool_calls": [{"name": "lookup"}]},
            "done",
        ]
        model = _TimedModel(turns, ttft)
        agent = Agent(model, tools=[lookup], guardrails=[Guardrail(check, stage="input")])
        events = [(time.perf_counter(), e) for e in agent.stream("go")]
        texts = [at for at, e in events if isinstance(e, TextDelta)]
        counts["trips"] += verdict == "trip"
        counts["redactions"] += verdict == "redact"
        if verdict == "trip":
            counts["early tool starts"] += len(started)
            counts["early text"] += len(texts)
        elif verdict == "redact":  # only the second call's answer, "done", is released
            counts["early tool starts"] += len(started)
            counts["early text"] += sum(
                1 for _, e in events if isinstance(e, TextDelta) and e.text not in "done"
            )
        else:
            counts["early tool starts"] += sum(1 for at in started if at < passed[0])
            counts["early text"] += sum(1 for at in texts if at < passed[0])
    return counts
