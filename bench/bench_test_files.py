"""Wall time of test files: this tree against others (issue 33 item 7, the suite's time).

    python bench/bench_test_files.py --trees /tmp/before [--rounds 3] FILE [FILE ...]

Each round runs each file once in each tree (this one and every ``--trees`` entry, which is
a ``git archive`` of an older commit unpacked, say), serially, interleaved, each in a fresh
``python -m pytest -q -p no:cacheprovider FILE`` with ``PYTHONPATH`` at that tree. The
figures: each file's median and max seconds per tree, and whether every run passed. The
machine is shared (CI's two busy cores, or other work here): only interleaved figures of
one sitting compare.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

logger = logging.getLogger("bench_test_files")

HERE = Path(__file__).resolve().parents[1]


def run_file(tree: Path, test_file: str) -> tuple[float, bool]:
    """Seconds ``pytest`` took on ``test_file`` in ``tree``, and whether it passed."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="test files or folders, relative to a tree")
    parser.add_argument("--trees", default="", help="other trees, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background (``cmd &``): the tests' processes would inherit an
        # ignored SIGINT, and those that send themselves a Ctrl-C would wait out their bounds
        signal.signal(signal.SIGINT, signal.default_int_handler)
    trees = [HERE, *(Path(t).resolve() for t in args.trees.split(",") if t)]
    seconds: dict[tuple[str, Path], list[float]] = {}
    passed: dict[tuple[str, Path], bool] = {}
    for round_no in range(1, args.rounds + 1):
        for test_file in args.files:
            for tree in reversed(trees):  # the older trees first in each round
                took, ok = run_file(tree, test_file)
                seconds.setdefault((test_file, tree), []).append(took)
                passed[(test_file, tree)] = passed.get((test_file, tree), True) and ok
                logger.info("round %d %s %s: %.1f s", round_no, tree, test_file, took)
    for test_file in args.files:
        for tree in trees:
            samples = seconds[(test_file, tree)]
            logger.info(
                "%-40s %-28s median %6.1f s  max %6.1f s  %s",
                test_file,
                "this tree" if tree == HERE else str(tree),
                statistics.median(samples),
                max(samples),
                "passed" if passed[(test_file, tree)] else "FAILED",
            )


if __name__ == "__main__":
    main()
