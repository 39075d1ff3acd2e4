"""Busy followers: what a process following many streaming runs pays, on each store.

    python bench/bench_busy_followers.py [--stores sqlite,redis] [--followers 100]
                                         [--rate 20] [--window 5] [--rounds 2]
                                         [--trees /path/to/other/tree,...]

A child process follows ``--followers`` runs' event logs, one thread each, each waiting in
``store.read_events(run, after=n, timeout=1)`` as a web follower does; this process appends
one record (about 100 bytes) to every log ``--rate`` times a second, from 4 threads. Figures
over ``--window`` seconds: the child's CPU as a share of one core, and the records it read a
second (all of them: ``followers x rate``, else it fell behind).

The counterpart of ``bench_idle.py``'s ``followers`` case: there nothing is appended, here
everything is. ``--trees``: other source trees to measure too (a worktree of an older
commit), interleaved round by round; each child imports the tree it is given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(HERE))

from bench._stores import kind, make_store, open_specs  # noqa: E402

WRITERS = 4


def _child(spec: str, prefix: str, followers: int) -> None:
    """The following process: reports its CPU and reads between two lines on stdin."""
    store = make_store(spec, prefix=prefix)
    counts = [0] * followers

    def follow(index: int) -> None:
        after = 0
        while True:
            events = store.read_events(f"{prefix}r{index}", after=after, timeout=1.0)
            if events:
                after = events[-1].seq
                counts[index] += len(events)

    for index in range(followers):
        threading.Thread(target=follow, args=(index,), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()
    start, read = resource.getrusage(resource.RUSAGE_SELF), sum(counts)
    sys.stdin.readline()
    end = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (end.ru_utime + end.ru_stime) - (start.ru_utime + start.ru_stime)
    print(json.dumps({"cpu": cpu, "read": sum(counts) - read}), flush=True)
    os._exit(0)  # the followers' threads wait on the store: no clean shutdown to wait for


def _append(spec: str, prefix: str, share: range, rate: float, stop: threading.Event) -> None:
    """One writer thread: appends to its share of the logs ``rate`` times a second."""
    store = make_store(spec, prefix=prefix)
    ends = dict.fromkeys(share, 0)
    due = time.monotonic()
    while not stop.is_set():
        for index in ends:
            ends[index] = store.append_events(
                f"{prefix}r{index}", [{"d": "x" * 100}], after=ends[index]
            )
        due += 1.0 / rate
        stop.wait(max(0.0, due - time.monotonic()))


def measure(tree: str, spec: str, args: argparse.Namespace) -> dict[str, float]:
    prefix = f"busy{time.time_ns()}:"  # the Redis keys' and the run ids' (one SQLite file)
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", spec, prefix, str(args.followers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "BENCH_TREE": tree, "PYTHONPATH": tree},
    )
    assert child.stdin is not None and child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise SystemExit("the following process did not start")
    stop = threading.Event()
    writers = [
        threading.Thread(
            target=_append,
            args=(spec, prefix, range(n, args.followers, WRITERS), args.rate, stop),
        )
        for n in range(WRITERS)
    ]
    for writer in writers:
        writer.start()
    stop.wait(1.0)  # the followers catch up with the first records
    child.stdin.write("\n")
    child.stdin.flush()
    stop.wait(args.window)
    child.stdin.write("\n")
    child.stdin.flush()
    figures = json.loads(child.stdout.readline())
    stop.set()
    for writer in writers:
        writer.join()
    child.wait(30)
    return {
        "cpu_pct": figures["cpu"] / args.window * 100,
        "read_per_s": figures["read"] / args.window,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", default="")
    args = parser.parse_args()
    trees = [str(HERE)] + [t for t in args.trees.split(",") if t]
    with open_specs(args.stores, allowed=("sqlite", "redis")) as specs:
        for round_ in range(args.rounds):
            for spec in specs:
                for tree in trees:
                    figures = measure(tree, spec, args)
                    shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
                    print(
                        f"round {round_} {kind(spec):<6} {tree}: {args.followers} followers x "
                        f"{args.rate:g}/s: {shown}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
