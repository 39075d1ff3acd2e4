"""A contended store: 8 processes x 50 conversations x 10 turns each, on one SQLite file and
on one Redis server.

    python bench/bench_store_contended.py [--processes 8] [--conversations 50] [--turns 10]
                                          [--stores sqlite,redis] [--agents fresh,kept]
                                          [--model-ms 0]

Every process (``multiprocessing``, spawn) takes its turns on *every* conversation, in its own
random order (its turn 0 on each, then its turn 1...), through ``Agent(ScriptedModel(...),
store=, conversation_id=).invoke()``, offline, so processes keep colliding on the same
conversation. ``--agents fresh`` builds an agent per turn (a web handler per request);
``kept`` keeps one agent per conversation in each process, whose history others move on.
``--model-ms`` makes each answer stream for that long (one character at a time), so runs
overlap and the owners' watchers keep looking for signals meanwhile.

A collision is an expected outcome, retried: ``ConcurrentInvocationError`` (another process
runs that conversation) or ``RunConflictError`` (it moved on between load and begin).
Anything else that surfaces (``StoreUnavailableError``, "database is locked", ...) is counted
and printed, and so is every warning the library logs (a watcher or a commit that failed
quietly).

Printed: turns/s, retries, per-turn time (retries included), what surfaced, and the check of
every log: valid (``validate_history``), no run left, each turn's prompt (a unique marker)
present exactly once and answered by its own answer. The goal: 0 lost, 0 duplicated, 0
surfacing.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import random
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.errors import ConcurrentInvocationError, RunConflictError  # noqa: E402
from agent_sync.messages import Message, validate_history  # noqa: E402
from agent_sync.stores import RunStore  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from bench._stores import kind, make_store, open_specs  # noqa: E402

GIVE_UP = 50  # surfacing errors on one turn before the process gives that turn up (lost)


class _Warnings(logging.Handler):
    """Counts the library's warnings (and keeps the first few)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.first) < 3:
            cause = record.exc_info[1] if record.exc_info else None
            text = record.getMessage() + (f" ({type(cause).__name__}: {cause})" if cause else "")
            self.first.append(text)


def _marker(tag: str, process: int, conversation: int, turn: int) -> str:
    return f"{tag}/p{process}/c{conversation}/t{turn}"


def _answer(marker: str, model_ms: float) -> dict[str, Any]:
    """The scripted answer to ``marker``: ``re <marker>``, streamed over ``model_ms``."""
    text = f"re {marker}"
    if not model_ms:
        return {"text": text}
    return {"text": text, "chunk_size": 1, "chunk_delay": model_ms / 1000 / len(text)}


def worker(
    spec: str,
    prefix: str,
    tag: str,
    number: int,
    sizes: tuple[int, int, float],
    agents: str,
    ready: Any,
    out: Any,
) -> None:
    conversations, turns, model_ms = sizes
    warnings = _Warnings()
    logging.getLogger("agent_sync").addHandler(warnings)
    store = make_store(spec, prefix=prefix)
    plan = [(c, t) for t in range(turns) for c in range(conversations)]
    random.Random(number).shuffle(plan)
    plan.sort(key=lambda item: item[1])  # turn 0 of everything, then turn 1...: keeps order
    kept: dict[int, Agent] = {}
    collisions: Counter[str] = Counter()
    surfaced: Counter[str] = Counter()
    samples: list[str] = []
    wrong = given_up = 0
    per_turn: list[float] = []
    pause = threading.Event()  # never set: a bounded wait between tries
    ready.wait(120)  # every process built and connected: the clock starts
    started = time.perf_counter()
    for conversation, turn in plan:
        marker = _marker(tag, number, conversation, turn)
        cid = f"{tag}-c{conversation}"
        errors = 0
        turn_started = time.perf_counter()
        while True:
            try:
                if agents == "kept":
                    if conversation not in kept:  # its answers, in the order it asks
                        model = ScriptedModel(
                            [
                                _answer(_marker(tag, number, conversation, t), model_ms)
                                for t in range(turns)
                            ]
                        )
                        kept[conversation] = Agent(model, store=store, conversation_id=cid)
                    agent = kept[conversation]
                else:
                    model = ScriptedModel([_answer(marker, model_ms)])
                    agent = Agent(model, store=store, conversation_id=cid)
                result = agent.invoke(marker)
                if result.stop_reason != "end_turn" or result.text != f"re {marker}":
                    wrong += 1
                break
            except (ConcurrentInvocationError, RunConflictError) as exc:
                collisions[type(exc).__name__] += 1
                pause.wait(random.uniform(0, 0.001))  # another process holds it: try again
            except Exception as exc:  # surfacing: counted, printed
                errors += 1
                name = type(exc).__name__
                if "database is locked" in str(exc):
                    name += ' ("database is locked")'
                surfaced[name] += 1
                if len(samples) < 3:
                    samples.append(f"process {number} {cid}: {name}: {exc}")
                if errors >= GIVE_UP:
                    given_up += 1
                    break
                pause.wait(0.01)
        per_turn.append(time.perf_counter() - turn_started)
    out.put(
        {
            "elapsed": time.perf_counter() - started,
            "collisions": collisions,
            "surfaced": surfaced,
            "samples": samples,
            "wrong": wrong,
            "given_up": given_up,
            "per_turn": per_turn,
            "warnings": warnings.count,
            "warning_samples": warnings.first,
        }
    )


def _texts(message: Message) -> list[str]:
    return [block["text"] for block in message["content"] if "text" in block]


def check(
    store: RunStore, tag: str, processes: int, conversations: int, turns: int
) -> Counter[str]:
    """Count what is wrong in the final logs (an empty counter: all is well)."""
    problems: Counter[str] = Counter()
    for conversation in range(conversations):
        record = store.load(f"{tag}-c{conversation}")
        log = list(record.messages)
        if record.run is not None:
            problems["run left in the store"] += 1
        if validate_history(log):
            problems["invalid history"] += 1
        prompts: Counter[str] = Counter()
        for index, message in enumerate(log):
            if message["role"] != "user":
                continue
            markers = _texts(message)
            prompts.update(markers)
            if len(markers) != 1:
                problems["user message holding several prompts"] += 1
            answer = log[index + 1] if index + 1 < len(log) else None
            if not markers or answer is None or _texts(answer) != [f"re {markers[-1]}"]:
                problems["prompt without its own answer"] += 1
        expected = {
            _marker(tag, p, conversation, t) for p in range(processes) for t in range(turns)
        }
        problems["lost"] += len(expected - set(prompts))
        problems["duplicated"] += sum(count - 1 for count in prompts.values() if count > 1)
        problems["unknown prompt"] += len(set(prompts) - expected)
    return problems


def measure(
    spec: str, agents: str, processes: int, conversations: int, turns: int, model_ms: float
) -> None:
    context = multiprocessing.get_context("spawn")
    ready, out = context.Barrier(processes + 1), context.Queue()
    prefix, tag = f"contended-{uuid.uuid4().hex[:8]}:", f"{agents}-{uuid.uuid4().hex[:6]}"
    sizes = (conversations, turns, model_ms)
    children = [
        context.Process(target=worker, args=(spec, prefix, tag, n, sizes, agents, ready, out))
        for n in range(processes)
    ]
    for child in children:
        child.start()
    ready.wait(300)
    started = time.perf_counter()
    reports = [out.get(timeout=3600) for _ in children]
    elapsed = time.perf_counter() - started
    for child in children:
        child.join(60)
    collisions: Counter[str] = sum((r["collisions"] for r in reports), Counter())
    surfaced: Counter[str] = sum((r["surfaced"] for r in reports), Counter())
    per_turn = sorted(s for r in reports for s in r["per_turn"])
    total = processes * conversations * turns
    problems = check(make_store(spec, prefix=prefix), tag, processes, conversations, turns)
    p99 = per_turn[min(len(per_turn) - 1, int(len(per_turn) * 0.99))]
    print(
        f"{kind(spec):7} {agents:5} agents: {processes} processes x {conversations} "
        f"conversations x {turns} turns = {total} turns in {elapsed:6.1f} s: "
        f"{total / elapsed:7.1f} turns/s; per turn (retries included) "
        f"p50 {statistics.median(per_turn) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, "
        f"max {per_turn[-1] * 1000:.2f} ms"
    )
    retries = ", ".join(f"{n} {name}" for name, n in sorted(collisions.items())) or "none"
    print(f"        retries: {sum(collisions.values())} ({retries})")
    print(
        f"        surfacing: {sum(surfaced.values())} "
        f"({', '.join(f'{n} {name}' for name, n in sorted(surfaced.items())) or 'none'}); "
        f"wrong answers {sum(r['wrong'] for r in reports)}, "
        f"turns given up {sum(r['given_up'] for r in reports)}; "
        f"library warnings logged {sum(r['warnings'] for r in reports)}"
    )
    for line in [s for r in reports for s in r["samples"] + r["warning_samples"]][:5]:
        print(f"          e.g. {line}")
    main_counts = ("lost", "duplicated", "invalid history")
    others = [f"{n} {p}" for p, n in sorted(problems.items()) if n and p not in main_counts]
    print(
        f"        logs: {problems['lost']} lost, {problems['duplicated']} duplicated, "
        f"{problems['invalid history']} invalid, {', '.join(others) or 'nothing else wrong'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10, help="per process and conversation")
    parser.add_argument("--stores", default="sqlite,redis", help="sqlite[:path], redis[:port]")
    parser.add_argument("--agents", default="fresh,kept", help="fresh (per turn) and/or kept")
    parser.add_argument("--model-ms", type=float, default=0, help="each answer streams this long")
    args = parser.parse_args()
    modes = args.agents.split(",")
    if set(modes) - {"fresh", "kept"}:
        raise SystemExit("--agents: fresh, kept or both")
    with open_specs(args.stores, allowed=("sqlite", "redis")) as specs:
        for spec in specs:
            for agents in modes:
                measure(spec, agents, args.processes, args.conversations, args.turns, args.model_ms)


if __name__ == "__main__":
    main()
