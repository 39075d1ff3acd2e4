"""Soak: the suite's random-cancel stress tests, run for many more rounds.

The suite runs each soak for a few rounds (CI's budget on two busy cores); this runs the
same tests and checks with every soak's rounds multiplied (``AGENT_SYNC_SOAK``, see
``tests/fixtures/soak.py``): random cancels of multi-turn runs, eight threads at once,
racing invokes, closes racing iteration, hypothesis's random invoke/cancel/abandon
sequences, and injects racing cancels. Prints pytest's summary and the wall time; every
test must pass.

    python bench/soak_stress.py               # 10 times the suite's rounds
    python bench/soak_stress.py --factor 100
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOAKS = ["tests/test_stress.py", "tests/test_stream_close.py", "tests/run/test_inject_stress.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factor", type=int, default=10, help="times the suite's rounds")
    args = parser.parse_args()
    env = {**os.environ, "AGENT_SYNC_SOAK": str(args.factor)}
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--timeout=0"]
    done = subprocess.run([*command, *SOAKS], cwd=ROOT, env=env, check=False)
    print(f"soak x{args.factor}: exit {done.returncode} in {time.perf_counter() - started:.0f} s")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
