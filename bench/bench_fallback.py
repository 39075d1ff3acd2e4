"""Benchmark: what a FallbackModel's switch costs (prints figures).

Run: ``python bench/bench_fallback.py [--runs 200]``

Goal (issue 31): a fallback from a 429 before content to the next model adds <= 1 ms
beyond the second call. Measured, interleaved round by round against local wire servers
(an Anthropic primary answering 429, an OpenAI-compatible fallback answering a 20-chunk
text):

- ``chain``: ``Agent(FallbackModel(primary, fallback)).invoke`` (the 429, then the answer);
- ``429 alone``: the primary's ``stream`` raising its 429 (the first call's own cost);
- ``fallback alone``: ``Agent(fallback).invoke`` (the second call, with the run around it).

The switch's cost is ``chain - (429 alone + fallback alone)``, from the medians. The servers
run in this process (threads), so absolute times include them; the difference is what the
chain adds.

Second, what a chain costs when its first model answers: ``Agent(FallbackModel(openai,
anthropic)).invoke`` over ``Agent(openai).invoke`` on a 200-chunk answer, interleaved (one
more generator between the model and the run, per chunk).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent, RetryPolicy  # noqa: E402
from agent_sync.cancel import CancelScope  # noqa: E402
from agent_sync.errors import ModelThrottledError  # noqa: E402
from agent_sync.messages import Message  # noqa: E402
from agent_sync.models import (  # noqa: E402
    AnthropicModel,
    FallbackModel,
    ModelRequest,
    OpenAIModel,
)
from agent_sync.testing.anthropic_server import AnthropicServer  # noqa: E402
from agent_sync.testing.openai_server import OpenAIServer  # noqa: E402
from bench._common import ms, report  # noqa: E402

ANSWER = {"text": "x" * 160, "chunk_size": 8}  # 20 chunks
THROTTLED = {"status": 429, "retry_after": 30}
HELLO: list[Message] = [{"role": "user", "content": [{"text": "hello"}]}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    one_attempt = RetryPolicy(max_attempts=1)
    with AnthropicServer() as anthropic_server, OpenAIServer() as openai_server:
        primary = AnthropicModel(
            "claude-bench", client_args={"base_url": anthropic_server.base_url, "api_key": "k"}
        )
        fallback = OpenAIModel("gpt-bench", base_url=openai_server.url, api_key="k")
        chain_agent = Agent(FallbackModel(primary, fallback), retry=one_attempt)
        single_agent = Agent(fallback, retry=one_attempt)
        chain, throttled, single = [], [], []

        def time_chain() -> float:
            anthropic_server.add_turns(THROTTLED)
            openai_server.add_turns(ANSWER)
            chain_agent.messages = []
            started = time.perf_counter()
            result = chain_agent.invoke("hello")
            elapsed = time.perf_counter() - started
            assert result.metrics.model_ids == ("gpt-bench",), result.metrics.model_ids
            return elapsed

        def time_throttled() -> float:
            anthropic_server.add_turns(THROTTLED)
            started = time.perf_counter()
            try:
                list(primary.stream(ModelRequest(messages=HELLO), cancel=CancelScope()))
            except ModelThrottledError:
                pass
            else:
                raise AssertionError("the primary did not answer 429")
            return time.perf_counter() - started

        def time_single() -> float:
            openai_server.add_turns(ANSWER)
            single_agent.messages = []
            started = time.perf_counter()
            single_agent.invoke("hello")
            return time.perf_counter() - started

        for _ in range(10):  # warm the pools and the code paths
            time_chain(), time_throttled(), time_single()
        for round_number in range(args.runs):
            order = [(chain, time_chain), (throttled, time_throttled), (single, time_single)]
            if round_number % 2:
                order.reverse()
            for samples, measure in order:
                samples.append(measure())
        direct_agent = Agent(fallback, retry=one_attempt)
        first_answers = Agent(FallbackModel(fallback, primary), retry=one_attempt)
        long_answer = {"text": "x" * 1600, "chunk_size": 8}  # 200 chunks
        direct, chained = [], []
        for round_number in range(args.runs):
            pair = [(direct, direct_agent), (chained, first_answers)]
            if round_number % 2:
                pair.reverse()
            for samples, agent in pair:
                openai_server.add_turns(long_answer)
                agent.messages = []
                started = time.perf_counter()
                agent.invoke("hello")
                samples.append(time.perf_counter() - started)
        primary.close()
        fallback.close()
    report("chain (429, then the fallback answers)", chain)
    report("429 alone (the primary's stream)", throttled)
    report("fallback alone (Agent.invoke)", single)
    added = statistics.median(chain) - statistics.median(throttled) - statistics.median(single)
    print(f"the switch adds (median chain - 429 - fallback):  {ms(added)}  goal <= 1 ms")
    report("200 chunks, the model alone", direct)
    report("200 chunks, a chain whose first model answers", chained)
    ratio = statistics.median(chained) / statistics.median(direct)
    print(f"chain / alone (medians): {ratio:.3f}")


if __name__ == "__main__":
    main()
