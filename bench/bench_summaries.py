"""A summary covering 1,000 / 2,000 / 5,000 / 10,000 messages: made in pieces, each call
within the model's window, its cost linear in the messages summarized.

    python bench/bench_summaries.py [--sizes 1000,2000,5000,10000] [--rounds 3]
                                    [--trigger-tokens 8000] [--store memory|sqlite]

For each size, an agent on ``ScriptedModel`` (no network: the policy's own cost) whose
history holds that many messages (prompts, tool rounds, answers) is asked one more
question under ``Summarizing(keep_last=10, trigger_tokens=...)``: the older messages are
summarized before the model call. Printed per size (the least of ``--rounds``, the sizes
interleaved so that the machine's load falls on all alike): the summary calls, the largest
call in characters (system prompt included) against the window (``trigger_tokens`` at 4
characters a token), how many of the replaced messages the summarizer was told (each
question/answer is numbered), the CPU time of the whole ``invoke`` (this process's CPU
seconds: a machine shared with other work does not blur it as wall time would), that time
per message relative to the first size's (goal: flat, about 1x), and the CPU time of the
next question asked by a new agent of the same conversation (``--store sqlite``: a new
agent per request on a process-wide store, reusing the stored summary).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.context import CHARS_PER_TOKEN, Summarizing  # noqa: E402
from agent_sync.messages import Message  # noqa: E402
from agent_sync.stores import SQLiteRunStore  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402

_SUMMARY = "The user asked numbered questions; tools were called; all were answered. " * 4


def history(size: int) -> list[Message]:
    """``size`` messages (rounded down to whole rounds): prompt, a tool round, answer."""
    messages: list[Message] = []
    number = 0
    while len(messages) + 4 <= size:
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
        number += 1
    return messages


class _Sample:
    def __init__(
        self, calls: int, largest: int, told: int, replaced: int, seconds: float, next_s: float
    ) -> None:
        self.calls, self.largest, self.told = calls, largest, told
        self.replaced, self.seconds, self.next_s = replaced, seconds, next_s


def once(size: int, trigger_tokens: int, store: str, folder: Path) -> _Sample:
    """One agent, one question over a history of ``size`` messages."""
    summarizer = ScriptedModel([_SUMMARY], repeat=True)
    policy = Summarizing(summarizer, keep_last=10, trigger_tokens=trigger_tokens)
    messages = history(size)
    next_s = 0.0
    if store == "sqlite":
        shared = SQLiteRunStore(folder / f"s{size}-{time.monotonic_ns()}.db")
        Agent(ScriptedModel([]), store=shared, conversation_id="c").messages = messages
        agent = Agent(ScriptedModel(["ok"]), store=shared, conversation_id="c", context=policy)
    else:
        agent = Agent(ScriptedModel(["ok"]), messages=messages, context=policy)
    gc.collect()  # as timeit does: a collection of earlier rounds' garbage is not timed
    gc.disable()
    try:
        started = time.process_time()
        agent.invoke(f"question {size}")
        seconds = time.process_time() - started
    finally:
        gc.enable()
    if store == "sqlite":
        calls = len(summarizer.calls)
        following = Agent(ScriptedModel(["ok"]), store=shared, conversation_id="c", context=policy)
        gc.collect()
        gc.disable()
        try:
            started = time.process_time()
            following.invoke(f"question {size + 1}")
            next_s = time.process_time() - started
        finally:
            gc.enable()
        assert len(summarizer.calls) == calls  # the stored summary was reused
    sizes: list[int] = []
    told: set[str] = set()
    for call in summarizer.calls:
        text: Any = call.messages[0]["content"][0]["text"]
        sizes.append(len(text) + len(call.system_prompt or ""))
        told.update(re.findall(r"(?:question|answer) \d+", text))
    # the messages before the kept ones that carry a number: prompts and answers
    kept_from = len(messages) + 1 - 10
    replaced = sum(
        1
        for message in messages[:kept_from]
        if "text" in message["content"][0]
        and re.match(r"(?:question|answer) \d+", str(message["content"][0]["text"]))
    )
    return _Sample(
        len(summarizer.calls), max(sizes, default=0), len(told), replaced, seconds, next_s
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,2000,5000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trigger-tokens", type=int, default=8_000)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    samples: dict[int, list[_Sample]] = {size: [] for size in sizes}
    with tempfile.TemporaryDirectory() as folder:
        once(sizes[0], args.trigger_tokens, args.store, Path(folder))  # warm-up
        for _ in range(args.rounds):
            for size in sizes:
                samples[size].append(once(size, args.trigger_tokens, args.store, Path(folder)))
    window = args.trigger_tokens * CHARS_PER_TOKEN
    print(f"store={args.store} trigger_tokens={args.trigger_tokens} window={window} chars")
    print(
        f"{'messages':>9}{'calls':>7}{'largest call':>14}{'told/replaced':>15}"
        f"{'invoke s':>10}{'us/message':>12}{'x first':>9}{'next s':>8}"
    )
    base: float | None = None
    for size in sizes:
        runs = samples[size]
        seconds = min(run.seconds for run in runs)  # the least disturbed, as timeit advises
        last = runs[-1]
        per_message = seconds / size
        base = base if base is not None else per_message
        print(
            f"{size:>9}{last.calls:>7}{last.largest:>14}{f'{last.told}/{last.replaced}':>15}"
            f"{seconds:>10.3f}{per_message * 1e6:>12.1f}{per_message / base:>9.2f}"
            f"{min(run.next_s for run in runs):>8.3f}"
        )


if __name__ == "__main__":
    main()
