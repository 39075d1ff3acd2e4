"""A sliding-window agent's per-call cost at 10 / 1,000 / 10,000 stored messages.

    python bench/bench_context.py [--calls 300] [--sizes 10,1000,10000]

For each size, an agent on ``ScriptedModel`` (no network: the loop's own cost) with a
history of that many messages (prompts, tool rounds, answers) answers ``--calls`` prompts
(each ``invoke`` makes one model call and adds two messages), the sizes interleaved in
rounds after a warm-up so that the machine's load falls on all alike. Printed per size
and policy: the median and p90 of an ``invoke``, and of building the view alone (``view``,
the policy's share), in microseconds, and the ratio of the median to the first size's
(goal: flat, <= 1.5x). ``none`` (no policy: the whole history is sent) is shown for
comparison; it is not expected to be flat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.context import SlidingWindow  # noqa: E402
from agent_sync.messages import Message  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402


def history(size: int) -> list[Message]:
    """``size`` messages: prompt, a tool round, answer, and so on (a valid history)."""
    messages: list[Message] = []
    number = 0
    while len(messages) < size:
        number += 1
        tool_id = f"t{number}"
        messages += [
            {"role": "user", "content": [{"text": f"question {number} " + "q" * 200}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": tool_id, "name": "f", "input": {"n": 1}}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": tool_id,
                            "status": "success",
                            "content": [{"text": "r" * 300}],
                        }
                    }
                ],
            },
            {"role": "assistant", "content": [{"text": f"answer {number} " + "a" * 200}]},
        ]
    del messages[size:]
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    if messages and any("toolUse" in b for b in messages[-1]["content"]):
        messages.pop()  # never end on an unanswered call
        messages.pop()
    return messages


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class _ViewOnly:
    """What :meth:`ContextKeeper.view` reads of a run (no model call is made)."""

    def __init__(self, messages: list[Message], settings: Any) -> None:
        self.messages = messages
        self.settings = settings


class _Subject:
    """One agent with a stored history of ``size`` messages, and its measured times."""

    def __init__(self, size: int, policy: Any) -> None:
        self.size = size
        self.model = ScriptedModel(["ok"], repeat=True)
        self.agent = Agent(self.model, messages=history(size), context=policy)
        self.invokes: list[float] = []
        self.views: list[float] = []

    def call(self, number: int, *, record: bool) -> None:
        started = time.perf_counter()
        self.agent.invoke(f"prompt {number}")
        elapsed = time.perf_counter() - started
        self.model.calls.clear()  # keep the model's record from growing
        keeper = self.agent._settings.context
        if not record:
            return
        self.invokes.append(elapsed)
        if keeper is not None:
            run_like = _ViewOnly(self.agent._slot.messages, self.agent._settings)
            started = time.perf_counter()
            keeper.view(run_like)  # type: ignore[arg-type]
            self.views.append(time.perf_counter() - started)


def measure(sizes: list[int], policy: Any, calls: int, rounds: int = 10) -> list[_Subject]:
    """``calls`` invocations per size, interleaved in ``rounds`` (so that load on the
    machine falls on every size alike), after 20 warm-up calls each."""
    subjects = [_Subject(size, policy) for size in sizes]
    for subject in subjects:
        for number in range(20):
            subject.call(number, record=False)
    for _ in range(rounds):
        for subject in subjects:
            for number in range(max(1, calls // rounds)):
                subject.call(number, record=True)
    return subjects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--sizes", default="10,1000,10000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    policies: dict[str, Any] = {
        "window(40)": SlidingWindow(max_messages=40),
        "window(40, 2000 tok)": SlidingWindow(max_messages=40, max_tokens=2000),
        "none": None,
    }
    print(f"{'policy':<22}{'stored':>8}{'invoke p50':>12}{'p90':>9}{'view p50':>10}{'x10':>7}")
    for name, policy in policies.items():
        base: float | None = None
        for subject in measure(sizes, policy, args.calls):
            median = statistics.median(subject.invokes)
            base = base if base is not None else median
            views = subject.views
            view = f"{statistics.median(views) * 1e6:10.1f}" if views else f"{'-':>10}"
            p90 = _percentile(subject.invokes, 0.9)
            print(
                f"{name:<22}{subject.size:>8}{median * 1e6:12.1f}{p90 * 1e6:9.1f}"
                f"{view}{median / base:7.2f}"
            )


if __name__ == "__main__":
    main()
