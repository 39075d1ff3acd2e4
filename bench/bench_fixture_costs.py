"""Per-test fixed costs of the model tests: a local wire server started and closed, and an
``AnthropicModel`` built (issue 33 item 7, the suite's time).

    PYTHONPATH=TREE python bench/bench_fixture_costs.py [--rounds 200]

Run it with ``PYTHONPATH`` at this tree and at a ``git archive`` of an older commit, one
after the other in one sitting: the figures are medians in milliseconds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

from agent_sync.models import AnthropicModel
from agent_sync.testing import OpenAIServer

logger = logging.getLogger("bench_fixture_costs")


def _server_start_and_close() -> None:
    OpenAIServer().start().close()


def _anthropic_model() -> None:
    AnthropicModel("claude-test", client_args={"base_url": "http://127.0.0.1:9", "api_key": "k"})


def _median_ms(action: Callable[[], None], rounds: int) -> float:
    action()  # the first one pays for imports
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, action in (
        ("wire server start + close", _server_start_and_close),
        ("AnthropicModel build", _anthropic_model),
    ):
        logger.info("%-28s median %7.2f ms", name, _median_ms(action, args.rounds))


if __name__ == "__main__":
    main()
