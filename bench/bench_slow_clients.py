"""Memory held for SSE clients that never read: one large answer, several stuck clients.

Run: ``python bench/bench_slow_clients.py [clients] [answer_mib] [--replay] [--sqlite]``
(offline: ScriptedModel, a threaded werkzeug server in this process, raw sockets that send
a request and never read, each with a small receive buffer).

The run answers ``answer_mib`` MiB of text (the ``done`` record carries it whole); the
first client starts it (``POST /chat``), the others follow its log (``GET
/runs/<id>/events``), while it runs or (``--replay``) once it is over. Once every stream is
stuck in its write, it prints the Python heap above the baseline (``tracemalloc``: held and
peak; the run's own history, store and log are in it) and the bytes the kernel queues for
these connections (``/proc/net/tcp``: unsent plus unread). The goal: one answer + 2 MiB per
client.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import flask  # noqa: E402

from agent_sync import Agent  # noqa: E402
from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from agent_sync.web.flask import chat_blueprint  # noqa: E402
from tests.web._client import serve  # noqa: E402

MIB = 1 << 20


def _stuck_client(port: int, method: str, path: str, body: bytes = b"") -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def _queued_bytes(port: int) -> int:
    """Bytes the kernel holds for the connections to ``port``: what the server's sockets
    have not sent plus what the clients' sockets have not read (``/proc/net/tcp``)."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == port or int(remote.split(":")[1], 16) == port:
            tx, rx = fields[4].split(":")
            total += int(tx, 16) + int(rx, 16)
    return total


def main() -> None:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    clients = int(numbers[0]) if numbers else 6
    answer_mib = float(numbers[1]) if len(numbers) > 1 else 3.8
    replay = "--replay" in sys.argv
    text = "x" * int(answer_mib * MIB)
    store: RunStore = MemoryRunStore()
    if "--sqlite" in sys.argv:
        store = SQLiteRunStore(Path(tempfile.mkdtemp()) / "runs.db")
    model = ScriptedModel([{"text": text, "chunk_size": 256 * 1024}])

    def make_agent(cid: str) -> Agent:
        return Agent(model, store=store, conversation_id=cid)

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, write_timeout=None, keepalive=None),
        url_prefix="/api",
    )
    with serve(app) as server:
        port = server.server_port
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        body = json.dumps({"conversation_id": "c1", "message": "go"}).encode()
        socks = [_stuck_client(port, "POST", "/api/chat", body)]
        while (current := store.load("c1", since=1 << 62).run) is None:
            time.sleep(0.01)
        run_id = current.state.run_id
        if replay:  # the others come once the run is over: they replay its stored log
            while (snap := store.get(run_id)) is None or snap.status == "running":
                time.sleep(0.05)
        socks += [
            _stuck_client(port, "GET", f"/api/runs/{run_id}/events") for _ in range(clients - 1)
        ]
        while (snap := store.get(run_id)) is None or snap.status == "running":
            time.sleep(0.05)
        time.sleep(2.0)  # every stream reaches its stuck write
        now, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        kernel = _queued_bytes(port)
        mode = "replay" if replay else "live"
        print(
            f"{type(store).__name__:<14} {mode:<6} clients={clients} answer={answer_mib:.1f} MiB"
            f" | heap held={(now - base) / MIB:5.1f} peak={(peak - base) / MIB:5.1f}"
            f" | kernel queued={kernel / MIB:5.1f} | per client (heap+kernel)/n="
            f"{(now - base + kernel) / MIB / clients:4.1f} MiB (goal: one answer + 2 MiB each)"
        )
        for sock in socks:
            sock.close()


if __name__ == "__main__":
    main()
