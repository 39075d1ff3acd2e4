"""Cancel latency with injected input queued or being checked, on ScriptedModel (offline):
``cancel()`` -> ``invoke()`` returned, the tree under test against a baseline tree,
interleaved in one sitting (each sample in its own subprocess batch, alternating).

    python bench/bench_unchecked_input.py [--runs 200] [--rounds 5] --base /tmp/input_base

States: ``queued`` (an inject queued while a cooperative tool runs, input guardrails on:
the run hands it back instead of committing it), ``queued, no guards`` (the same without
guardrails: committed, as before), ``check pending`` (a cancel while an inject's block-mode
check, which ignores its cancel token, runs: abandoned; the baseline dropped the inject).
``bare wake``: an ``Event.set()`` -> waiter running, taken meanwhile (the machine's floor).
Goal (DESIGN 13): a cancel returns as fast with guardrails as without.
``--base``: ``git archive <base> | tar -x -C /tmp/input_base``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATES = ("queued", "queued, no guards", "check pending")


def _sample(state: str) -> float:
    from agent_sync import Agent, ToolContext, tool
    from agent_sync.guardrails import Guardrail, GuardView
    from agent_sync.testing import ScriptedModel

    entered, checking = threading.Event(), threading.Event()
    release, opened = threading.Event(), threading.Event()  # the check's, the tool's

    @tool
    def wait(context: ToolContext) -> str:
        """Runs until cancelled, or until released."""
        entered.set()
        while not opened.is_set() and not context.cancel_event.wait(0.001):
            pass
        return "done"

    def check(view: GuardView) -> None:
        if "slow" in view.text:
            checking.set()
            release.wait(30)  # ignores its cancel token
        return None

    guards = [] if state == "queued, no guards" else [Guardrail(check, stage="input", mode="block")]
    model = ScriptedModel([{"tool_calls": [{"name": "wait", "input": {}}]}, "never"])
    agent = Agent(model, tools=[wait], guardrails=guards, tool_grace_period=0.05)
    done = threading.Event()
    runner = threading.Thread(target=lambda: (agent.invoke("go"), done.set()))
    runner.start()
    assert entered.wait(30)
    if state == "check pending":
        agent.inject("a slow question")
        opened.set()  # the tool returns; the inject's check starts and blocks
        assert checking.wait(30)
    else:
        agent.inject("a question")
    started = time.perf_counter()
    agent.cancel()
    assert done.wait(30)
    elapsed = time.perf_counter() - started  # seconds
    assert model.calls and len(model.calls) == 1, "the run went on"
    release.set()
    runner.join(30)
    return elapsed


def _child(runs: int) -> None:
    from _common import bare_wake

    for state in STATES:  # warm up: lazy imports, first threads (not what is measured)
        _sample(state)
    out = {state: [_sample(state) for _ in range(runs)] for state in STATES}
    out["bare wake"] = [bare_wake() for _ in range(runs)]  # the machine's floor, meanwhile
    print(json.dumps(out))


def _batch(tree: Path, runs: int) -> dict[str, list[float]]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(runs)],
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    data: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child)
        return
    if args.base is None:
        parser.error("--base is required")
    trees = {"base": args.base, "this": ROOT}
    names = (*STATES, "bare wake")
    samples: dict[str, dict[str, list[float]]] = {t: {s: [] for s in names} for t in trees}
    for _ in range(args.rounds):  # interleaved: base, this, base, this, ...
        for name, tree in trees.items():
            for state, values in _batch(tree, args.runs // args.rounds).items():
                samples[name][state].extend(values)
    from _common import p99, report

    for state in (*STATES, "bare wake"):
        for name in trees:
            values = samples[name][state]
            report(f"{state} [{name}]", values)
            print(f"{'':<46} p99={p99(values) * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
