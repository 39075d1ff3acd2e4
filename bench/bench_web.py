"""Web integration figures: disconnect-to-idle latency and 50 concurrent SSE clients.

Run: ``.venv/bin/python bench/bench_web.py`` (offline: ScriptedModel, local servers only).

1. Time from the client dropping the connection to the agent being idle (the server has
   closed the SSE body, which cancels and joins the run):
   - while events flow (a text delta every 10 ms);
   - while the model is silent, when the server exposes the client socket (werkzeug);
   - while the model is silent, keep-alive writes only (wsgiref), for two intervals.
2. 50 concurrent SSE clients on werkzeug's threaded server: errors, wall time, time to
   first text, then the same with half of them leaving mid-answer; leaked threads and
   invalid histories are counted.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import flask  # noqa: E402

from agent_sync import Agent  # noqa: E402
from agent_sync.messages import validate_history  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from agent_sync.web import ConversationRegistry  # noqa: E402
from agent_sync.web.flask import sse_response  # noqa: E402
from bench._common import report  # noqa: E402
from tests.web._client import SSEConnection, serve, serve_wsgiref  # noqa: E402
from tests.web.conftest import CloseRecorder  # noqa: E402

FLOWING = {"text": "x" * 4000, "chunk_size": 4, "chunk_delay": 0.01}
SILENT = {"text": "x" * 400, "chunk_size": 4, "stall_after": 3}
ANSWER = {
    "text": "The quick brown fox jumps over the lazy dog. " * 5,
    "chunk_size": 4,
    "chunk_delay": 0.01,
}
TRIALS = 30


def build_app(
    turn: Any, *, keepalive: float, watch: bool
) -> tuple[Any, ConversationRegistry[Agent]]:
    app = flask.Flask(__name__)
    registry: ConversationRegistry[Agent] = ConversationRegistry(
        lambda cid: Agent(ScriptedModel([turn])), max_conversations=10_000
    )

    @app.post("/chat")
    def chat() -> flask.Response:
        data = flask.request.get_json()
        agent = registry.get(data["conversation_id"])
        return sse_response(agent, data["message"], keepalive=keepalive, watch_disconnect=watch)

    return app, registry


@contextmanager
def serve_werkzeug(app: Any) -> Iterator[int]:
    with serve(app) as server:
        yield server.server_port


def disconnect_latency(
    label: str,
    turn: Any,
    *,
    keepalive: float,
    watch: bool,
    server: Callable[[Any], Any],
    trials: int = TRIALS,
) -> None:
    app, registry = build_app(turn, keepalive=keepalive, watch=watch)
    recorder = CloseRecorder(app.wsgi_app)
    app.wsgi_app = recorder
    samples: list[float] = []
    invalid = 0
    with server(app) as port:
        for i in range(trials):
            conn = SSEConnection(port, "/chat", {"conversation_id": f"c{i}", "message": "hi"})
            for _ in range(3):
                conn.next_frame()
            start = time.perf_counter()
            conn.drop()
            if not recorder.wait_for_closes(i + 1, timeout=30):
                raise SystemExit(f"{label}: the server never closed the body")
            samples.append(time.perf_counter() - start)
            agent = registry.peek(f"c{i}")
            assert agent is not None
            invalid += agent.is_running or bool(validate_history(agent.messages))
    report(label, samples)
    if invalid:
        print(f"   !! {invalid} agents still running or with an invalid history")


def concurrent_clients(clients: int = 50, *, drop_half: bool) -> None:
    app, registry = build_app(ANSWER, keepalive=1.0, watch=True)
    recorder = CloseRecorder(app.wsgi_app)
    app.wsgi_app = recorder
    before = set(threading.enumerate())
    barrier = threading.Barrier(clients)
    errors: list[str] = []
    first_text: list[float] = []
    totals: list[float] = []
    lock = threading.Lock()

    def client(n: int, port: int) -> None:
        try:
            barrier.wait(10)
            start = time.perf_counter()
            conn = SSEConnection(
                port, "/chat", {"conversation_id": f"k{n}", "message": "hi"}, timeout=30
            )
            if conn.status != 200:
                raise RuntimeError(f"status {conn.status}")
            got_first = None
            frames = 0
            last = None
            for frame in conn.frames():
                if frame.event == "text":
                    frames += 1
                    if got_first is None:
                        got_first = time.perf_counter() - start
                    if drop_half and n % 2 and frames == 5:
                        break
                last = frame
            conn.drop()
            if not (drop_half and n % 2):
                if last is None or last.event != "done" or last.data["stop_reason"] != "end_turn":
                    raise RuntimeError(f"bad end {last}")
            with lock:
                first_text.append(got_first or 0.0)
                totals.append(time.perf_counter() - start)
        except Exception as exc:  # counted, not raised: the figure is the error count
            with lock:
                errors.append(f"client {n}: {exc!r}")

    with serve_werkzeug(app) as port:
        threads = [
            threading.Thread(target=client, args=(n, port), name=f"bench-client-{n}")
            for n in range(clients)
        ]
        wall = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        wall = time.perf_counter() - wall
        closed = recorder.wait_for_closes(clients, timeout=30)
    for t in set(threading.enumerate()) - before:
        t.join(5)
    leaked = [t.name for t in set(threading.enumerate()) - before]
    running = sum(1 for n in range(clients) if (a := registry.peek(f"k{n}")) and a.is_running)
    invalid = sum(
        1 for n in range(clients) if (a := registry.peek(f"k{n}")) and validate_history(a.messages)
    )
    label = f"{clients} clients" + (", half leave mid-answer" if drop_half else "")
    print(
        f"{label}: errors={len(errors)} bodies_closed={closed} wall={wall:.2f}s "
        f"agents_running_after={running} invalid_histories={invalid} leaked_threads={leaked}"
    )
    report("   time to first text", first_text)
    report("   time to end (or to leaving)", totals)
    for line in errors[:5]:
        print("   ", line)


def main() -> None:
    print("== disconnect -> agent idle (server closed the SSE body) ==")
    disconnect_latency(
        "events flowing (werkzeug)", FLOWING, keepalive=15, watch=True, server=serve_werkzeug
    )
    disconnect_latency(
        "events flowing (wsgiref)", FLOWING, keepalive=15, watch=False, server=serve_wsgiref
    )
    disconnect_latency(
        "silent, socket watched (werkzeug, ka=15s)",
        SILENT,
        keepalive=15,
        watch=True,
        server=serve_werkzeug,
    )
    for keepalive in (0.1, 0.5):
        disconnect_latency(
            f"silent, keep-alives only (wsgiref, ka={keepalive}s)",
            SILENT,
            keepalive=keepalive,
            watch=False,
            server=serve_wsgiref,
            trials=10,
        )
    print()
    print("== concurrent SSE clients (threaded werkzeug, offline model) ==")
    concurrent_clients(50, drop_half=False)
    concurrent_clients(50, drop_half=True)


if __name__ == "__main__":
    main()
