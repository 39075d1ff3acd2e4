"""The chat routes under ``gunicorn --workers 3 --threads 8``: stop latency, reconnect latency,
and what storing every frame costs.

    python bench/bench_web_runs.py [--stores sqlite,redis] [--runs 30] [--clients 50] [--rounds 5]

For each store, gunicorn serves ``bench/_chat_app.py`` (``chat_blueprint`` on that store,
plus a plain ``sse_response`` route on an agent without a store, the baseline):

- **stop -> last frame**: a stream waits in a tool; ``POST /runs/<id>/stop`` (answered by
  whichever worker: another one 2 times in 3) until the stream's ``done`` frame: p50/p99;
- **reconnect -> first missed frame**: a stream is dropped mid-answer; a
  ``GET /runs/<id>/events`` with ``Last-Event-ID`` until its first frame: p50/p99;
- **throughput**: ``--clients`` concurrent streams of ``--frames`` text frames each: frames/s
  through the blueprint (stored before sent) and through ``sse_response`` (not stored), and
  the server's CPU per frame in each case, and their ratio (the per-frame cost of storing
  events; the goal is at most 1.2x). Wall-clock frames/s also counts the bench's own client
  threads, which share the machine: the CPU ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._stores import open_specs  # noqa: E402
from tests.web._client import SSEConnection  # noqa: E402


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _line(label: str, samples: list[float]) -> None:
    print(
        f"  {label:<34} n={len(samples):<4} p50={statistics.median(samples) * 1000:7.2f} ms"
        f"  p99={_percentile(samples, 0.99) * 1000:7.2f} ms"
    )


class Server:
    """gunicorn serving bench/_chat_app.py on one store spec."""

    def __init__(self, spec: str, folder: Path) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
            "BENCH_STORE": spec,
            "BENCH_PREFIX": f"bench-{uuid.uuid4().hex[:6]}:",
        }
        self._log = (folder / f"gunicorn-{uuid.uuid4().hex[:6]}.log").open("w")
        gunicorn = Path(sys.executable).with_name("gunicorn")
        self._proc = subprocess.Popen(
            [
                str(gunicorn), "--workers", "3", "--threads", "8",
                "--worker-class", "gthread", "--bind", f"fd://{self._listener.fileno()}",
                "--log-level", "warning", "--no-control-socket", "_chat_app:create_app()",
            ],
            env=env, pass_fds=(self._listener.fileno(),), cwd=str(ROOT / "bench"),
            stdout=subprocess.DEVNULL, stderr=self._log,
        )  # fmt: skip

    def chat(self, cid: str, path: str = "/api/chat") -> SSEConnection:
        return SSEConnection(self.port, path, {"conversation_id": cid, "message": "go"}, timeout=60)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def cpu_s(self) -> float:
        """CPU seconds used so far by gunicorn and its workers (Linux: /proc)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid, ppid = int(entry.name), int(fields[1])
            if self._proc.pid in (pid, ppid):
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def close(self) -> None:
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._listener.close()
        self._log.close()


def _until(conn: SSEConnection, event: str) -> Any:
    for frame in conn.frames():
        if frame.event == event:
            return frame
    raise RuntimeError(f"no {event} frame")


def bench_stop(server: Server, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        conn = server.chat(f"slow-{uuid.uuid4().hex[:8]}")
        run_id = _until(conn, "run").data["run_id"]
        _until(conn, "tool_start")
        started = time.perf_counter()
        server.post(f"/api/runs/{run_id}/stop", {"reason": "bench"})
        _until(conn, "done")
        samples.append(time.perf_counter() - started)
        conn.drop()
    return samples


def bench_reconnect(server: Server, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        conn = server.chat(f"long-{uuid.uuid4().hex[:8]}")
        run_id = _until(conn, "run").data["run_id"]
        last = _until(conn, "text")
        conn.drop()
        started = time.perf_counter()
        again = SSEConnection(
            server.port, f"/api/runs/{run_id}/events", None,
            headers={"Last-Event-ID": str(last.id)}, method="GET", timeout=60,
        )  # fmt: skip
        again.next_frame()
        samples.append(time.perf_counter() - started)
        again.drop()
    return samples


def bench_throughput(server: Server, clients: int, path: str) -> tuple[float, int, float]:
    """Frames per second over ``clients`` concurrent streams, the frames counted, and the
    server's CPU milliseconds per 1,000 frames."""
    barrier = threading.Barrier(clients + 1)
    counts: list[int] = []

    def client() -> None:
        barrier.wait()
        conn = server.chat(f"fast-{uuid.uuid4().hex[:8]}", path)
        counted = 0
        for frame in conn.frames():
            if frame.event != "comment":
                counted += 1
        counts.append(counted)
        conn.drop()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    cpu = server.cpu_s()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join(300)
    elapsed = time.perf_counter() - started
    frames = sum(counts)
    return frames / elapsed, frames, (server.cpu_s() - cpu) / frames * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with open_specs(args.stores, allowed=("sqlite", "redis")) as specs:
        folder = Path(os.environ.get("TMPDIR", "/tmp"))
        for spec in specs:
            server = Server(spec, folder)
            try:
                print(f"{spec.split(':')[0]}: gunicorn --workers 3 --threads 8 (gthread)")
                bench_stop(server, 3)  # warm every worker
                _line("stop -> last frame", bench_stop(server, args.runs))
                _line("reconnect -> first missed frame", bench_reconnect(server, args.runs))
                ratios = []
                for _ in range(args.rounds):  # interleaved: stored, plain, stored, plain, ...
                    stored, n_stored, cpu_stored = bench_throughput(
                        server, args.clients, "/api/chat"
                    )
                    plain, n_plain, cpu_plain = bench_throughput(
                        server, args.clients, "/plain/chat"
                    )
                    ratios.append(cpu_stored / cpu_plain)
                    print(
                        f"  {args.clients} clients: stored {stored:7.0f} frames/s,"
                        f" {cpu_stored:5.1f} CPU-ms/1000 ({n_stored}); not stored {plain:7.0f}"
                        f" frames/s, {cpu_plain:5.1f} CPU-ms/1000 ({n_plain})"
                    )
                median = statistics.median(ratios)
                print(f"  server CPU per frame, stored / not stored (median): {median:.2f}x")
            finally:
                server.close()


if __name__ == "__main__":
    main()
