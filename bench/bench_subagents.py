"""Cancel latency of a 3-level sub-agent tree vs a single run, in one process.

    python bench/bench_subagents.py [--runs 200] [--states single,child,single_tool,tool,grandchild]

Each run starts ``invoke()`` in a thread, waits (on an event, not a sleep) until the run is
in its state, then calls ``cancel()`` on the lead and measures the time until ``invoke()``
returned (``time.perf_counter``). The states take turns (one run of each, then again), so
a load that comes and goes on the machine weighs on every state alike. States:

* ``single``: one agent whose model stalls mid-answer (a silent socket: ``ScriptedModel``
  ``stall_after``): the baseline of ``child`` and ``grandchild``;
* ``child``: lead -> research (child streaming, stalled);
* ``single_tool``: one agent in a cooperative tool waiting on its context: the baseline of
  ``tool`` (the same cancel point: a tool's thread wakes, then its run ends);
* ``tool``: lead -> research -> a cooperative tool of the child waiting on its context;
* ``grandchild``: lead -> research -> deep (the grandchild streaming, stalled).

Every level has a 60 s grace period, so a cancel that did not reach a child shows as a
minute. Goal: every tree state within 2x its single-run baseline, p99 < 10 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, ToolContext, tool  # noqa: E402
from agent_sync.cancel import CancelScope  # noqa: E402
from agent_sync.messages import StreamEvent  # noqa: E402
from agent_sync.models.base import ModelRequest  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402

GRACE = 60.0
SILENT = {"text": "thinking", "chunk_size": 1, "stall_after": 1}
STATES = ("single", "child", "single_tool", "tool", "grandchild")
BASELINE = {"child": "single", "tool": "single_tool", "grandchild": "single"}


class _Flagged:
    """A scripted model that sets ``reached`` once its call streamed its first content."""

    def __init__(self, turn: Any, reached: threading.Event) -> None:
        self._turn, self._reached = turn, reached

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        for event in ScriptedModel([self._turn]).stream(request, cancel=cancel):
            yield event
            if "contentBlockDelta" in event:
                self._reached.set()


_HOLD = {"tool_calls": [{"name": "hold", "input": {}}]}


def _call(name: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": {"prompt": "go"}}]}


def build(state: str, reached: threading.Event) -> Agent:
    """A fresh lead agent for one run, in ``state`` once ``reached`` is set."""
    if state == "single":
        return Agent(_Flagged(SILENT, reached), tool_grace_period=GRACE)

    @tool
    def hold(context: ToolContext) -> str:
        """Wait for a cancel."""
        reached.set()
        context.wait(GRACE * 2)
        return "stopped"

    if state == "single_tool":
        return Agent(_Flagged(_HOLD, threading.Event()), tools=[hold], tool_grace_period=GRACE)

    digger = Agent(
        _Flagged(SILENT if state == "grandchild" else "dug", reached), tool_grace_period=GRACE
    )
    child_turn = {
        "child": SILENT,
        "tool": _HOLD,
        "grandchild": _call("deep"),
    }[state]
    # Only the model or tool of the state's own level flags it (a model streaming a tool
    # call has deltas too: flagging there would cancel before the state is reached).
    researcher = Agent(
        _Flagged(child_turn, reached if state == "child" else threading.Event()),
        tools=[hold, digger.as_tool(name="deep", description="Dig")],
        tool_grace_period=GRACE,
    )
    return Agent(
        _Flagged(_call("research"), threading.Event()),
        tools=[researcher.as_tool(name="research", description="Research")],
        tool_grace_period=GRACE,
    )


def once(state: str) -> float:
    """One cancel's latency in seconds: ``cancel()`` called -> ``invoke()`` returned."""
    reached = threading.Event()
    lead = build(state, reached)
    returned: list[float] = []

    def run() -> None:
        result = lead.invoke("go")
        returned.append(time.perf_counter())
        assert result.stop_reason == "cancelled", result.stop_reason

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not reached.wait(30):
        raise RuntimeError(f"state {state} never reached")
    started = time.perf_counter()
    lead.cancel("bench")
    thread.join(GRACE * 2)
    if not returned:
        raise RuntimeError("invoke() did not return")
    return returned[0] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--states", default=",".join(STATES))
    args = parser.parse_args()
    states = [s for s in args.states.split(",") if s]
    for state in states:
        once(state)  # warm up (imports, first threads)
    print(f"cancel -> invoke() returned, {args.runs} runs per state (ms)")
    print(f"{'state':<13}{'p50':>7}{'p99':>7}{'max':>7}  p50 vs its baseline")
    runs: dict[str, list[float]] = {state: [] for state in states}
    for _ in range(args.runs):  # round-robin: a load that comes and goes hits every state
        for state in states:
            runs[state].append(once(state) * 1000)
    p50s: dict[str, float] = {}
    for state in states:
        times = sorted(runs[state])
        p50 = p50s[state] = statistics.median(times)
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        base = BASELINE.get(state)
        ratio = f"{p50 / p50s[base]:.2f}x {base}" if base in p50s else "-"
        print(f"{state:<13}{p50:>7.2f}{p99:>7.2f}{times[-1]:>7.2f}  {ratio}")


if __name__ == "__main__":
    main()
