"""Benchmarks for OpenAIModel against the local Chat Completions fake (prints figures).

Run: ``.venv/bin/python bench/bench_openai.py [--runs 20] [--quick]``

1. Cancel latency, ``agent.cancel()`` call -> ``invoke`` return, per state: chunks
   flowing, silent stream, before headers, retry back-off, cooperative tool.
   Targets: max < 50 ms, median < 10 ms.
2. Loop overhead: median time of ``agent.invoke`` on a one-turn 200-chunk stream divided by
   the median time to iterate the same response with plain requests + the SSE parser +
   ``json.loads``. Target <= 1.10.
3. Throughput: 16 threads x 20 invokes (one agent each, one shared model) vs 16 threads
   iterating raw; ratio, errors, leaked threads and sockets.

The harness is bench/_provider_bench.py; this file says how to reach OpenAI. The server
runs in this process (Python threads), so both sides share the GIL with it; ratios are
more meaningful than absolute times.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync.models import OpenAIModel  # noqa: E402
from agent_sync.models._sse import iter_sse  # noqa: E402
from agent_sync.testing._http_server import ScriptedServer  # noqa: E402
from agent_sync.testing.openai_server import OpenAIServer  # noqa: E402
from bench._provider_bench import (  # noqa: E402
    Provider,
    cancel_section,
    overhead_section,
    throughput_section,
)


def _session(pool: int | None) -> requests.Session:
    session = requests.Session()
    if pool is not None:
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=pool))
    return session


def _url(server: ScriptedServer) -> str:
    return f"{server.base_url}/v1"  # OpenAIServer.url


@contextmanager
def open_model(server: ScriptedServer, pool: int | None) -> Iterator[OpenAIModel]:
    """With ``pool``, the model runs on a shared session sized for that many threads."""
    shared = None if pool is None else _session(pool)
    model = OpenAIModel("bench", base_url=_url(server), session=shared, timeout=(5, 60))
    try:
        yield model
    finally:
        model.close()  # closes only a session the model created
        if shared is not None:
            shared.close()


@contextmanager
def open_raw(server: ScriptedServer, pool: int | None) -> Iterator[Callable[[], object]]:
    """Plain requests + the SSE parser + ``json.loads``; yields "iterate one response"."""
    session = _session(pool)
    url = f"{_url(server)}/chat/completions"
    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip

    def iterate() -> int:
        count = 0
        with session.post(url, json=body, stream=True, timeout=(5, 60)) as response:
            chunks = response.iter_content(chunk_size=None)
            for event in iter_sse(chunks):
                if event.data == "[DONE]":
                    break
                json.loads(event.data)
                count += 1
            for _ in chunks:
                pass  # let the connection return to the pool, as the model does
        return count

    try:
        yield iterate
    finally:
        session.close()


OPENAI = Provider("OpenAIModel", OpenAIServer, open_model, open_raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller load")
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    cancel_section(OPENAI, runs)
    overhead_section(
        OPENAI, max(runs, 50) if not args.quick else 5, "raw requests + SSE parser + json",
        model_alone=True,
    )  # fmt: skip
    throughput_section(OPENAI, 16, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
