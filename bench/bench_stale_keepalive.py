"""Stale keep-alive connections: 20 sequential calls against a server that closes them.

Run: ``.venv/bin/python bench/bench_stale_keepalive.py [--calls 20]``

llama.cpp's ``llama-server`` answers a stream advertising ``Connection: keep-alive`` and
then closes the socket; the client's next request on that pooled connection fails. A
client that treats this as an ordinary error pays a full retry back-off (1.5-2 s). The
expected behaviour (issue 10 item 11, DESIGN 4a) is an immediate re-send that is not a
retry, so 20 calls cost about 20 x one call.

The local server (``agent_sync.testing._keepalive_server``) answers both wire formats by
path (``/v1/chat/completions`` as OpenAI SSE, ``/v1/messages`` as Anthropic SSE) in three
modes:

* ``keep``: a well-behaved keep-alive server (the baseline);
* ``next`` (``close_on_reuse``): closes a connection when the next request arrives on it,
  unanswered (every reuse fails: the deterministic worst case);
* ``after`` (``close_after``): closes right after the response (the natural race: the
  client's pool check sees the close or not, depending on timing).

For each provider and mode it prints the total of ``--calls`` sequential ``invoke``s with
the default retry policy, ``calls x`` the median single call on the ``keep`` server, their
ratio, the retries counted and the requests the server received.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_sync import Agent  # noqa: E402
from agent_sync.models import AnthropicModel, OpenAIModel  # noqa: E402
from agent_sync.testing._keepalive_server import (  # noqa: E402
    KeepAliveServer,
    Mode,
    chunked_response,
)

_OPENAI = [
    b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":'
    b'"answer"},"finish_reason":null}]}\n\n',
    b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
    b'"finish_reason":"stop"}]}\n\n',
    b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":10,'
    b'"completion_tokens":1,"total_tokens":11}}\n\n',
    b"data: [DONE]\n\n",
]
_ANTHROPIC = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":'
    b'"message","role":"assistant","content":[],"model":"m","stop_reason":null,'
    b'"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}\n\n',
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"answer"}}\n\n',
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    b'"stop_sequence":null},"usage":{"output_tokens":1}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]


# The table's mode names and the server's.
_MODES: dict[str, Mode] = {"keep": "keep", "next": "close_on_reuse", "after": "close_after"}


def _respond(path: str, number: int) -> bytes:
    return chunked_response(_ANTHROPIC if path.endswith("/messages") else _OPENAI)


def _models(port: int) -> dict[str, Callable[[], Any]]:
    return {
        "OpenAIModel": lambda: OpenAIModel(
            "llama", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-bench-000000000000"
        ),
        "AnthropicModel": lambda: AnthropicModel(
            "claude-bench",
            client_args={"base_url": f"http://127.0.0.1:{port}", "api_key": "sk-ant-bench-0000"},
        ),
    }


def _run(name: str, mode: str, calls: int) -> tuple[list[float], int, int]:
    server = KeepAliveServer(_respond, _MODES[mode], name="bench-keepalive")
    model = _models(server.port)[name]()
    agent = Agent(model)
    times: list[float] = []
    retries = 0
    try:
        for _ in range(calls):
            started = time.perf_counter()
            result = agent.invoke("hi")
            times.append(time.perf_counter() - started)
            retries += result.metrics.retries
            agent.messages = []
    finally:
        close = getattr(model, "close", None)
        if close is not None:
            close()
        server.close()
    return times, retries, server.received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    calls = args.calls
    print(f"{calls} sequential invokes per row; baseline = {calls} x median call on 'keep'")
    print(f"{'model':<15} {'mode':<6} {'total_s':>8} {'baseline_s':>10} {'ratio':>6} "
          f"{'retries':>7} {'requests':>8}")  # fmt: skip
    for name in ("OpenAIModel", "AnthropicModel"):
        keep, _, _ = _run(name, "keep", calls)
        baseline = calls * statistics.median(keep)
        for mode in ("keep", "next", "after"):
            times, retries, received = (keep, 0, calls) if mode == "keep" else (None, 0, 0)
            if times is None:
                times, retries, received = _run(name, mode, calls)
            total = sum(times)
            print(f"{name:<15} {mode:<6} {total:>8.3f} {baseline:>10.3f} "
                  f"{total / baseline:>6.2f} {retries:>7d} {received:>8d}")  # fmt: skip


if __name__ == "__main__":
    main()
