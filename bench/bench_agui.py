"""The AG-UI route against the AI SDK route on the same ScriptedModel run, interleaved.

    python bench/bench_agui.py [--rounds 40] [--chars 300]

One Flask app serves ``chat_blueprint`` (``/api``, the AI SDK's ``useChat`` body) and
``agui_blueprint`` (``/agui``, a ``RunAgentInput``) on one ``MemoryRunStore``, under
werkzeug's threaded server in this process. Each round runs the same scripted answer (a
tool call, then ``--chars`` one-character text deltas) through both routes, the order
alternating round by round:

- **first event**: request sent -> the first event (AI SDK ``start``, AG-UI
  ``RUN_STARTED``), p50/p99;
- **first text**: request sent -> the first text delta, p50/p99;
- **per record**: (last byte - first event) / the run's records, p50;
- **process CPU per record**: this process's CPU time over the run (server, agent and the
  client's raw reads, the same for both) / the run's records, p50;
- **encoder CPU per record**: each finished run's stored log encoded again by each encoder
  (no I/O: what the route adds per record), p50 over the runs.

The ratios AG-UI / AI SDK are the figures (the goal: at most 1.1x). The bench's client
threads share the machine with the server.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import flask  # noqa: E402

from agent_sync import Agent, tool  # noqa: E402
from agent_sync.stores import MemoryRunStore, RunEvent  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from agent_sync.web._agui_stream import AGUIEncoder  # noqa: E402
from agent_sync.web._encoders import StreamEncoder  # noqa: E402
from agent_sync.web._ui_stream import UIStreamEncoder  # noqa: E402
from agent_sync.web.flask import agui_blueprint, chat_blueprint  # noqa: E402
from tests.web._client import SSEConnection, serve  # noqa: E402


@tool
def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What.
    """
    return f"found {query}"


def _app(store: MemoryRunStore, chars: int) -> flask.Flask:
    text = ("lorem ipsum " * (chars // 12 + 1))[:chars]
    turns: list[Any] = [
        {"tool_calls": [{"name": "lookup", "input": {"query": "x"}}]},
        {"text": text, "chunk_size": 1},
    ]

    def make_agent(cid: str) -> Agent:
        return Agent(ScriptedModel(turns), tools=[lookup], store=store, conversation_id=cid)

    app = flask.Flask(__name__)
    app.register_blueprint(chat_blueprint(make_agent, store=store), url_prefix="/api")
    app.register_blueprint(agui_blueprint(make_agent, store=store, url_prefix="/agui"))
    return app


def _ai_sdk(port: int, cid: str) -> SSEConnection:
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    return SSEConnection(port, "/api/chat", {"id": cid, "messages": [message]}, timeout=60)


def _agui(port: int, cid: str) -> SSEConnection:
    message = {"id": "m1", "role": "user", "content": "go"}
    body = {"threadId": cid, "runId": "r", "messages": [message]}
    return SSEConnection(port, "/agui/", body, timeout=60)


PROTOCOLS: dict[str, tuple[Callable[[int, str], SSEConnection], bytes]] = {
    "ai_sdk": (_ai_sdk, b'"text-delta"'),
    "agui": (_agui, b'"TEXT_MESSAGE_CONTENT"'),
}
_RUN_ID = re.compile(rb'"(?:messageId|runId)":"(run_[0-9a-f]+)"')


def _one_run(port: int, protocol: str) -> tuple[float, float, float, str, str]:
    """(first event s, first text s, last byte s, conversation id, run id) of one run."""
    connect, text_marker = PROTOCOLS[protocol]
    cid = f"{protocol}-{uuid.uuid4().hex[:10]}"
    started = time.perf_counter()
    conn = connect(port, cid)
    first_event = first_text = 0.0
    run_id = ""
    try:
        while (chunk := conn._read_chunk()) is not None:
            now = time.perf_counter() - started
            if not first_event and b"data:" in chunk:
                first_event = now
                found = _RUN_ID.search(chunk)
                run_id = found.group(1).decode() if found else ""
            if not first_text and text_marker in chunk:
                first_text = now
    finally:
        conn.drop()
    return first_event, first_text, time.perf_counter() - started, cid, run_id


def _encode_cpu(make: Callable[[], StreamEncoder], records: list[RunEvent]) -> float:
    """CPU seconds per record to encode ``records`` with a fresh encoder (best of 5)."""
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        encoder = make()
        encoder.opening()
        for record in records:
            encoder.encode(record.seq, record.data)
        encoder.closing()
        best = min(best, time.process_time() - started)
    return best / len(records)


def _p(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--chars", type=int, default=300)
    args = parser.parse_args()
    store = MemoryRunStore()
    samples: dict[str, dict[str, list[float]]] = {
        name: {"first": [], "text": [], "record": [], "process": [], "cpu": []}
        for name in PROTOCOLS
    }
    with serve(_app(store, args.chars)) as server:
        port = server.server_port
        for name in PROTOCOLS:  # warm up both (imports, first requests)
            _one_run(port, name)
        for number in range(args.rounds):
            order = list(PROTOCOLS) if number % 2 == 0 else list(reversed(PROTOCOLS))
            for name in order:
                cpu = time.process_time()
                first, text, last, cid, run_id = _one_run(port, name)
                cpu = time.process_time() - cpu
                records = store.read_events(run_id)
                assert records, f"no log for {run_id!r}"
                got = samples[name]
                got["first"].append(first)
                got["text"].append(text)
                got["record"].append((last - first) / len(records))
                got["process"].append(cpu / len(records))
                make: Callable[[], StreamEncoder] = (
                    functools.partial(AGUIEncoder, run_id, cid)
                    if name == "agui"
                    else functools.partial(UIStreamEncoder, run_id)
                )
                got["cpu"].append(_encode_cpu(make, records))
    print(f"{args.rounds} runs per route, interleaved; {len(records)} records per run")
    print(f"  {'':<28}{'AI SDK':>14}{'AG-UI':>14}{'ratio':>8}")
    for key, label, fraction, unit in (
        ("first", "first event p50", 0.5, 1e3),
        ("first", "first event p99", 0.99, 1e3),
        ("text", "first text p50", 0.5, 1e3),
        ("text", "first text p99", 0.99, 1e3),
        ("record", "per record (wall) p50", 0.5, 1e6),
        ("process", "process CPU per record p50", 0.5, 1e6),
        ("cpu", "encoder CPU per record p50", 0.5, 1e6),
    ):
        ai_sdk = _p(samples["ai_sdk"][key], fraction) * unit
        agui = _p(samples["agui"][key], fraction) * unit
        suffix = "ms" if unit == 1e3 else "us"
        print(f"  {label:<28}{ai_sdk:>11.3f} {suffix}{agui:>11.3f} {suffix}{agui / ai_sdk:>7.2f}x")


if __name__ == "__main__":
    main()
