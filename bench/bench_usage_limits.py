"""Usage limits' cost per streamed chunk (issue 31: <= 1.02x): the same 200-chunk answer,
streamed with and without ``UsageLimits`` (every limit set but cost, which needs a priced
model), interleaved in one sitting. The checks run per model call, never per chunk.

    python bench/bench_usage_limits.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, UsageLimits  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402

LIMITS = UsageLimits(
    requests=10, input_tokens=10**9, output_tokens=10**9, total_tokens=10**9, tool_calls=10
)


def _one(agent: Agent) -> float:
    started = time.perf_counter()
    for _ in agent.stream("go"):
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    turn = {"text": "x" * 200, "chunk_size": 1, "usage": {"inputTokens": 5, "outputTokens": 200}}
    plain = Agent(ScriptedModel([turn], repeat=True))
    limited = Agent(ScriptedModel([turn], repeat=True), usage_limits=LIMITS)
    for agent in (plain, limited):  # warm up
        _one(agent)
    without: list[float] = []
    with_limits: list[float] = []
    for _ in range(runs):  # interleaved; each agent's history trimmed so runs stay alike
        without.append(_one(plain))
        with_limits.append(_one(limited))
        plain.messages, limited.messages = [], []
    a, b = statistics.median(without), statistics.median(with_limits)
    print(
        f"200-chunk stream, median of {runs}: without limits {a * 1e3:.3f} ms, "
        f"with limits {b * 1e3:.3f} ms, ratio {b / a:.3f}x"
    )


if __name__ == "__main__":
    main()
