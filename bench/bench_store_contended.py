"""A contended store: 8 processes x 50 conversations x 10 turns each, on one SQLite file and
on one Redis server.

    python bench/bench_store_contended.py [--processes 8] [--conversations 50] [--turns 10]
                                          [--stores sqlite,redis]

Every process takes its turns on *every* conversation, in its own random order, through
``Agent(...).invoke()`` (a model that answers at once), so processes keep colliding on the
same conversation. A collision is an expected outcome, retried: ``ConcurrentInvocationError``
(another process is running that conversation) or ``RunConflictError`` (it moved on between
load and begin). Anything else surfacing (``StoreUnavailableError``, "database is locked")
is counted as an error.

Printed: turns/s, retries, errors, and the check of every log: valid, and each turn's
prompt (a unique marker) present exactly once, followed by its answer. The goal: 0 lost,
0 duplicated, 0 errors.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.errors import ConcurrentInvocationError, RunConflictError  # noqa: E402
from agent_sync.messages import validate_history  # noqa: E402
from agent_sync.stores import RunStore, SQLiteRunStore  # noqa: E402


class Echo:
    """A model that answers at once with the marker of the prompt it answers."""

    def stream(self, request: Any, *, cancel: Any) -> Any:
        marker = request.messages[-1]["content"][-1]["text"]
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": f"re {marker}"}}}
        yield {"contentBlockStop": {"contentBlockIndex": 0}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def open_store(spec: str) -> RunStore:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        return SQLiteRunStore(where)
    import redis

    from agent_sync.stores import RedisRunStore

    return RedisRunStore(redis.Redis(port=int(where)), prefix="contended:")


def worker(spec: str, number: int, conversations: int, turns: int, go: Any, out: Any) -> None:
    store = open_store(spec)
    plan = [(c, t) for t in range(turns) for c in range(conversations)]
    random.Random(number).shuffle(plan)
    plan.sort(key=lambda item: item[1])  # turn 0 of everything, then turn 1...: keeps order
    retries = errors = 0
    pause = threading.Event()
    go.wait(60)
    started = time.perf_counter()
    for conversation, turn in plan:
        marker = f"p{number}/c{conversation}/t{turn}"
        while True:
            try:
                Agent(Echo(), store=store, conversation_id=f"c{conversation}").invoke(marker)
                break
            except (ConcurrentInvocationError, RunConflictError):
                retries += 1
                pause.wait(0.0005)  # another process holds the conversation: try again
            except Exception as exc:  # surfacing: the bench counts it
                errors += 1
                print(f"process {number}: {type(exc).__name__}: {exc}", file=sys.stderr)
                pause.wait(0.01)
    out.put((retries, errors, time.perf_counter() - started))


def check(store: RunStore, processes: int, conversations: int, turns: int) -> tuple[int, int]:
    """(lost, duplicated) markers over every conversation; asserts each log is valid."""
    lost = duplicated = 0
    for conversation in range(conversations):
        log = list(store.load(f"c{conversation}").messages)
        assert validate_history(log) == [], f"c{conversation}: invalid history"
        prompts = Counter(m["content"][-1]["text"] for m in log if m["role"] == "user")
        for user, answer in zip(log[0::2], log[1::2], strict=True):
            assert answer["content"][0]["text"] == "re " + user["content"][-1]["text"]
        expected = {
            f"p{p}/c{conversation}/t{t}" for p in range(processes) for t in range(turns)
        }
        lost += len(expected - set(prompts))
        duplicated += sum(count - 1 for count in prompts.values() if count > 1)
    return lost, duplicated


def measure(spec: str, processes: int, conversations: int, turns: int) -> None:
    context = multiprocessing.get_context("spawn")
    go, out = context.Event(), context.Queue()
    children = [
        context.Process(target=worker, args=(spec, n, conversations, turns, go, out))
        for n in range(processes)
    ]
    for child in children:
        child.start()
    started = time.perf_counter()
    go.set()
    reports = [out.get(timeout=1800) for _ in children]
    elapsed = time.perf_counter() - started
    for child in children:
        child.join(60)
    retries = sum(r[0] for r in reports)
    errors = sum(r[1] for r in reports)
    total = processes * conversations * turns
    lost, duplicated = check(open_store(spec), processes, conversations, turns)
    print(
        f"{spec.split(':')[0]:7} {processes} processes x {conversations} conversations x "
        f"{turns} turns = {total} turns in {elapsed:6.1f} s: {total / elapsed:7.1f} turns/s, "
        f"{retries} retries, {errors} errors surfacing, {lost} lost, {duplicated} duplicated"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--stores", default="sqlite,redis")
    args = parser.parse_args()
    with ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        for name in args.stores.split(","):
            if name == "sqlite":
                spec = f"sqlite:{folder}/contended.db"
            elif name == "redis":
                from agent_sync.testing.redis_server import RedisServer

                server = stack.enter_context(RedisServer.start(f"{folder}/redis"))
                spec = f"redis:{server.port}"
            else:
                raise SystemExit(f"unknown store {name!r}")
            measure(spec, args.processes, args.conversations, args.turns)


if __name__ == "__main__":
    main()
