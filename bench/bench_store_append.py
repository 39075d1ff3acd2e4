"""Append cost vs conversation length (10, 100, 1,000 messages), for every store.

    python bench/bench_store_append.py [--turns 200] [--stores memory,sqlite,redis]
                                       [--lengths 10,100,1000] [--conversations 20]

The goal (issue 9): appending a turn writes only the new messages, so a 1,000-message
conversation appends as fast as a 10-message one (ratio <= 1.5x). Per store and length, the
median of ``--turns`` turns, spread over ``--conversations`` conversations seeded at that
length (so a conversation grows by at most ``2 * turns / conversations`` messages while it is
measured), the lengths interleaved:

* ``store turn``: ending a turn through the store API as a kept agent does it: ``load`` of
  what it does not hold (``since`` its last message), ``begin``, the running checkpoint after
  the model step, the final commit of the turn's two messages (``history_start`` = length);
* ``invoke (blind model)``: a kept ``Agent(..., store=, conversation_id=)``'s ``invoke()`` end
  to end, with a model that answers at once without reading the history: the library's cost;
* ``invoke (ScriptedModel)``: the same with ``ScriptedModel``, which deep-copies every
  request's history into ``model.calls`` (a provider serialises it too; the double's cost);
* ``whole load``: ``store.load(conversation_id)``, the whole log: what building an agent reads;
* ``new agent + invoke``: ``Agent(...)`` built for the turn, then ``invoke()`` (a web handler
  that builds its agent per request; issue 18 item 8), in a process that has served the
  conversation before (one untimed request per conversation first): a new agent starts from
  the log this process last synced (``agent_sync/run/_log_cache.py``) and reads only the
  tail. The first request of a conversation in a process still reads the whole log.

The goal applies to the marked figures; then a count of what agents read from the store.
``redis`` starts a throwaway ``redis-server`` unless given as ``redis:<port>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.messages import Message  # noqa: E402
from agent_sync.run import RunState  # noqa: E402
from agent_sync.stores import RunStore  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from bench._stores import kind, make_store, open_specs  # noqa: E402

TEXT = "x" * 400  # a message of a few hundred characters, as chat turns are
GOAL = 1.5


class BlindModel:
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


def seed(store: RunStore, conversation_id: str, length: int) -> None:
    """Write ``length`` messages (``length // 2`` turns) to a new conversation, in one run."""
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


@dataclass
class Conversation:
    """One seeded conversation, with the kept agent of a figure that needs one."""

    store: RunStore
    conversation_id: str
    length: int
    turns: int = 0
    warmed: bool = False
    agent: Agent | None = None
    model: ScriptedModel | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def store_turn(conv: Conversation) -> float:
    store, cid = conv.store, conv.conversation_id
    user, answer = _turn(conv.turns)
    started = time.perf_counter()
    length = conv.length  # what the agent holds; it reads from its last message on
    record = store.load(cid, since=length - 1)
    length = record.log_length
    state = RunState(
        run_id=f"run_{uuid.uuid4().hex}",
        status="running",
        next_step="model",
        cycle=0,
        messages=(user,),
        history_start=length,
    )
    version = store.begin(cid, state, owner="bench", lease_s=30, expected_length=length)
    state = replace(state, next_step="tools", messages=(user, answer))
    version = store.commit(state, owner="bench", version=version)
    store.commit(replace(state, status="done", next_step=None), owner="bench", version=version)
    elapsed = time.perf_counter() - started
    conv.length = length + 2
    return elapsed


def invoke_blind(conv: Conversation) -> float:
    if conv.agent is None:
        conv.agent = Agent(BlindModel(), store=conv.store, conversation_id=conv.conversation_id)
    started = time.perf_counter()
    conv.agent.invoke(f"{conv.turns} {TEXT}")
    return time.perf_counter() - started


def invoke_scripted(conv: Conversation) -> float:
    if conv.agent is None:
        conv.model = ScriptedModel([TEXT], repeat=True)
        conv.agent = Agent(conv.model, store=conv.store, conversation_id=conv.conversation_id)
    assert conv.model is not None
    started = time.perf_counter()
    conv.agent.invoke(f"{conv.turns} {TEXT}")
    elapsed = time.perf_counter() - started
    conv.model.calls.clear()  # bounded memory; the copy itself was timed
    return elapsed


def whole_load(conv: Conversation) -> float:
    started = time.perf_counter()
    conv.store.load(conv.conversation_id)
    return time.perf_counter() - started


def new_agent_invoke(conv: Conversation) -> float:
    if not conv.warmed:  # this process serves the conversation for the first time: untimed
        Agent(BlindModel(), store=conv.store, conversation_id=conv.conversation_id)
        conv.warmed = True
    started = time.perf_counter()
    agent = Agent(BlindModel(), store=conv.store, conversation_id=conv.conversation_id)
    agent.invoke(f"{conv.turns} {TEXT}")
    return time.perf_counter() - started


FIGURES: list[tuple[str, Callable[[Conversation], float], bool]] = [
    ("store turn", store_turn, True),
    ("invoke (blind model)", invoke_blind, True),
    ("invoke (ScriptedModel)", invoke_scripted, False),
    ("whole load", whole_load, False),
    ("new agent + invoke", new_agent_invoke, True),
]


def measure(
    store: RunStore,
    figure: Callable[[Conversation], float],
    lengths: list[int],
    turns: int,
    conversations: int,
) -> tuple[dict[int, float], dict[int, int]]:
    """Median ms per length, and the longest log measured per length."""
    tag = uuid.uuid4().hex[:8]
    convs: dict[int, list[Conversation]] = {}
    for length in lengths:
        convs[length] = []
        for k in range(conversations):
            conv = Conversation(store, f"append-{tag}-{length}-{k}", length)
            seed(store, conv.conversation_id, length)
            convs[length].append(conv)
    times: dict[int, list[float]] = {length: [] for length in lengths}
    for n in range(turns):
        for length in lengths:  # interleaved: a drift hits every length alike
            conv = convs[length][n % conversations]
            times[length].append(figure(conv))
            conv.turns += 1
    medians = {length: statistics.median(times[length]) * 1000 for length in lengths}
    longest = {
        length: max(len(store.load(c.conversation_id).messages) for c in convs[length])
        for length in lengths
    }
    return medians, longest


class CountingStore:
    """Forwards to a store and records what ``load`` returned (a count, not a timing)."""

    def __init__(self, inner: RunStore) -> None:
        self._inner = inner
        self.loads: list[tuple[int, int]] = []  # (since, messages read)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load(self, conversation_id: str, *, since: int = 0) -> Any:
        record = self._inner.load(conversation_id, since=since)
        self.loads.append((since, len(record.messages)))
        return record


def count_reads(spec: str, store: RunStore, length: int) -> None:
    """Print what agents read from the store on a ``length``-message conversation."""
    cid = f"count-{uuid.uuid4().hex[:8]}"
    seed(store, cid, length)
    counting = CountingStore(store)
    agent = Agent(BlindModel(), store=counting, conversation_id=cid)
    built = sum(read for _, read in counting.loads)
    counting.loads.clear()
    Agent(BlindModel(), store=counting, conversation_id=cid)  # the next request's agent
    rebuilt = sum(read for _, read in counting.loads)
    reads = []
    for n in range(3):
        counting.loads.clear()
        agent.invoke(f"{n} {TEXT}")
        reads.append(", ".join(f"load(since={s}) -> {r}" for s, r in counting.loads))
    print(
        f"{kind(spec):7} messages read on a {length}-message conversation: building the first "
        f"agent {built}, the next one {rebuilt}; each of 3 invokes of the kept agent: "
        f"{' | '.join(reads)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200, help="samples per figure and length")
    parser.add_argument("--stores", default="memory,sqlite,redis")
    parser.add_argument("--lengths", default="10,100,1000")
    parser.add_argument("--conversations", type=int, default=20, help="per figure and length")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    conversations = max(1, min(args.conversations, args.turns))
    header = "".join(f"{f'{n} msgs':>12}" for n in lengths)
    with open_specs(args.stores) as specs:
        title = f"ratio {lengths[-1]}/{lengths[0]}"
        print(f"{'store':7} {'figure (median per turn)':24}{header}   {title}")
        for spec in specs:
            store = make_store(spec, prefix=f"append-{uuid.uuid4().hex[:8]}:")
            for label, figure, goal in FIGURES:
                medians, longest = measure(store, figure, lengths, args.turns, conversations)
                figures = "".join(f"{medians[n]:9.3f} ms" for n in lengths)
                ratio = medians[lengths[-1]] / medians[lengths[0]]
                verdict = ("ok" if ratio <= GOAL else "OVER") + f" (goal <= {GOAL}x)"
                print(
                    f"{kind(spec):7} {label:24}{figures}   {ratio:5.2f}x "
                    f"{verdict if goal else '':16}"
                    f"  logs up to {'/'.join(str(longest[n]) for n in lengths)} msgs"
                )
            count_reads(spec, store, lengths[-1])


if __name__ == "__main__":
    main()
