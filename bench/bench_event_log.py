"""Run event logs: what an event costs to append and to read back, for every store.

    python bench/bench_event_log.py [--events 1000] [--stores memory,sqlite,redis]

Per store, over ``--events`` events of a typical stream delta (about 150 bytes of JSON), the
p50 and p90 of:

* ``append (batch of 1)``: ``append_events(run, [event], after=n)``, one call per event, as a
  publisher that writes each delta as it comes;
* ``append (batch of 50), per event``: one call per 50 events, divided by 50;
* ``read one (after=n)``: ``read_events(run, after=n)`` returning the one event after ``n``,
  as a follower one event behind;
* ``read all, per event``: ``read_events(run)`` of the whole log, divided by its length (a
  replay);
* ``wake, same store``: a thread waits in ``read_events(run, after=n, timeout=5)``; the time
  from the start of the append that ends its wait (2 to 12 ms into it) to its return;
* ``wake, other store``: the same, the waiter on a second store object on the same data (how
  another process follows: SQLite polls for it, Redis blocks in ``XREAD``); not for memory.

``redis`` starts a throwaway ``redis-server`` unless given as ``redis:<port>``.
"""

from __future__ import annotations

import argparse
import queue
import random
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync.stores import RunStore  # noqa: E402
from bench._common import summarize  # noqa: E402
from bench._stores import kind, make_store, open_specs  # noqa: E402

BATCH = 50
WAKES = 100
SETTLE_S = (0.002, 0.012)  # the waiter blocks this long (random) before the append: a bench,
# not a test; random, so that the append falls anywhere in a polling store's interval


def delta(n: int) -> dict[str, Any]:
    """A stream delta as the web layer would log it."""
    return {
        "type": "text-delta",
        "id": "msg_0123456789abcdef",
        "delta": f"token {n} of the answer, with a few more words ",
        "index": n,
        "meta": {"cycle": 1, "block": 0},
    }


def run_id() -> str:
    return f"run_bench_{uuid.uuid4().hex}"


def append_one(store: RunStore, events: int) -> tuple[str, list[float]]:
    run, samples = run_id(), []
    for n in range(events):
        started = time.perf_counter()
        store.append_events(run, [delta(n)], after=n)
        samples.append(time.perf_counter() - started)
    return run, samples


def append_batches(store: RunStore, events: int) -> list[float]:
    run, samples = run_id(), []
    for n in range(0, events, BATCH):
        batch = [delta(k) for k in range(n, min(n + BATCH, events))]
        started = time.perf_counter()
        store.append_events(run, batch, after=n)
        samples.append((time.perf_counter() - started) / len(batch))
    return samples


def read_tail(store: RunStore, events: int) -> list[float]:
    """One event behind the end of a log of ``events``: ``read_events`` returns one."""
    run = run_id()
    store.append_events(run, [delta(n) for n in range(events)], after=0)
    samples = []
    for _ in range(WAKES):
        started = time.perf_counter()
        (event,) = store.read_events(run, after=events - 1)
        samples.append(time.perf_counter() - started)
        assert event.seq == events
    return samples


def read_all(store: RunStore, run: str, events: int) -> list[float]:
    samples = []
    for _ in range(20):
        started = time.perf_counter()
        read = store.read_events(run)
        samples.append((time.perf_counter() - started) / events)
        assert len(read) == events
    return samples


def wakes(writer: RunStore, reader: RunStore) -> list[float]:
    """From the start of each append to the return of the read it wakes."""
    run = run_id()
    woke: queue.Queue[float] = queue.Queue()
    turn = threading.Barrier(2)

    def follow() -> None:
        for n in range(WAKES):
            turn.wait(10)
            events = reader.read_events(run, after=n, timeout=5)
            woke.put(time.perf_counter() if [e.seq for e in events] == [n + 1] else -1.0)

    follower = threading.Thread(target=follow, name="bench-follower")
    follower.start()
    pause, samples, settle = threading.Event(), [], random.Random(7)
    for n in range(WAKES):
        turn.wait(10)
        pause.wait(settle.uniform(*SETTLE_S))
        started = time.perf_counter()
        writer.append_events(run, [delta(n)], after=n)
        returned = woke.get(timeout=10)
        assert returned > 0, "the follower did not read the event appended"
        samples.append(returned - started)
    follower.join(10)
    return samples


def row(label: str, samples: list[float]) -> None:
    figures = summarize(samples)
    print(
        f"  {label:<34} p50 {figures['median'] * 1e6:9.1f} us"
        f"   p90 {figures['p90'] * 1e6:9.1f} us   (n={len(samples)})"
    )


def bench(spec: str, events: int) -> None:
    print(f"{kind(spec)}:")
    store = make_store(spec)
    run, samples = append_one(store, events)
    row("append (batch of 1)", samples)
    row(f"append (batch of {BATCH}), per event", append_batches(store, events))
    row("read one (after=n, one behind)", read_tail(store, events))
    row("read all, per event", read_all(store, run, events))
    row("wake, same store", wakes(store, store))
    if kind(spec) != "memory":
        row("wake, other store", wakes(store, make_store(spec)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    args = parser.parse_args(argv)
    with open_specs(args.stores) as specs:
        for spec in specs:
            bench(spec, args.events)


if __name__ == "__main__":
    main()
