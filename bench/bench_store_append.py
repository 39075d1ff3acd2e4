"""Append cost vs conversation length (10, 100, 1,000 messages), for every store.

    python bench/bench_store_append.py [--turns 200] [--stores memory,sqlite,redis]

Two figures per store and length, medians per turn:

* ``store``: what ending a turn costs the store, as an agent drives it: ``load`` of what
  the agent does not hold (``since``), ``begin``, one running checkpoint, the final
  commit of the turn's two messages;
* ``agent``: ``agent.invoke()`` end to end, with a model that answers at once and ignores
  the history (a real provider sends the whole history with every request; that cost is
  the provider's, not the store's).

The goal (issue 9): the 1,000-message conversation appends at most 1.5x as slow as the
10-message one. ``redis`` starts a throwaway ``redis-server`` (Debian's package).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.messages import Message  # noqa: E402
from agent_sync.run._state import RunState  # noqa: E402
from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore  # noqa: E402

LENGTHS = (10, 100, 1000)
TEXT = "x" * 400  # a message of a few hundred characters, as chat turns are


class AnswerAtOnce:
    """A model that answers every request with one short text, reading nothing."""

    def stream(self, request: Any, *, cancel: Any) -> Iterator[Any]:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": TEXT}}}
        yield {"contentBlockStop": {"contentBlockIndex": 0}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def _turn(n: int) -> tuple[Message, Message]:
    return (
        {"role": "user", "content": [{"text": f"{n} {TEXT}"}]},
        {"role": "assistant", "content": [{"text": TEXT}]},
    )


def _seed(store: RunStore, conversation_id: str, length: int) -> None:
    messages = tuple(m for n in range(length // 2) for m in _turn(n))
    state = RunState(
        run_id=f"run_seed_{conversation_id}",
        status="running",
        next_step="model",
        cycle=0,
        messages=messages,
        history_start=0,
    )
    store.begin(conversation_id, state, owner="seed", lease_s=30, expected_length=0)
    store.commit(replace(state, status="done", next_step=None), owner="seed", version=1)


def store_turns(store: RunStore, conversation_id: str, turns: int) -> list[float]:
    times = []
    for n in range(turns):
        started = time.perf_counter()
        length = store.load(conversation_id, since=10**9).log_length
        store.load(conversation_id, since=length - 1)  # what an agent re-reads
        user, answer = _turn(n)
        state = RunState(
            run_id=f"run_{conversation_id}_{n}",
            status="running",
            next_step="model",
            cycle=0,
            messages=(user,),
            history_start=length,
        )
        version = store.begin(
            conversation_id, state, owner="bench", lease_s=30, expected_length=length
        )
        version = store.commit(replace(state, next_step="model"), owner="bench", version=version)
        done = replace(state, status="done", next_step=None, messages=(user, answer))
        store.commit(done, owner="bench", version=version)
        times.append(time.perf_counter() - started)
    return times


def agent_turns(store: RunStore, conversation_id: str, turns: int) -> list[float]:
    agent = Agent(AnswerAtOnce(), store=store, conversation_id=conversation_id)
    times = []
    for n in range(turns):
        started = time.perf_counter()
        agent.invoke(f"{n} {TEXT}")
        times.append(time.perf_counter() - started)
    return times


def open_stores(names: list[str], stack: ExitStack) -> dict[str, Any]:
    folder = stack.enter_context(tempfile.TemporaryDirectory())
    made: dict[str, Any] = {}
    for name in names:
        if name == "memory":
            made[name] = lambda tag: MemoryRunStore()
        elif name == "sqlite":
            made[name] = lambda tag: SQLiteRunStore(f"{folder}/{tag}.db")
        elif name == "redis":
            import redis

            from agent_sync.stores import RedisRunStore
            from agent_sync.testing.redis_server import RedisServer

            server = stack.enter_context(RedisServer.start(f"{folder}/redis"))
            client = redis.Redis(port=server.port)
            made[name] = lambda tag, client=client: RedisRunStore(client, prefix=f"{tag}:")
        else:
            raise SystemExit(f"unknown store {name!r}")
    return made


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    args = parser.parse_args()
    with ExitStack() as stack:
        for name, make in open_stores(args.stores.split(","), stack).items():
            for kind, measure in (("store", store_turns), ("agent", agent_turns)):
                medians = {}
                for length in LENGTHS:
                    tag = f"{kind}{length}"
                    store = make(tag)
                    _seed(store, tag, length)
                    times = measure(store, tag, args.turns)
                    medians[length] = statistics.median(times) * 1000
                figures = "  ".join(f"{n:>5} msgs {medians[n]:6.3f} ms" for n in LENGTHS)
                ratio = medians[LENGTHS[-1]] / medians[LENGTHS[0]]
                print(f"{name:7} {kind:6} {figures}   ratio 1000/10 {ratio:4.2f}")


if __name__ == "__main__":
    main()
