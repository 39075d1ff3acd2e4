"""What clients that misbehave cost one gunicorn worker: live runs, threads, fds and RSS.

    python bench/bench_web_load.py [--trees before=/tmp/old,after=.] [--rounds 2]
        [--leavers 150] [--slow 8] [--watch 20] [--options '{"write_timeout": 5}']

gunicorn ``--workers 1 --threads 8`` (gthread) serves ``bench/_chat_app.py`` on SQLite, with
the ``agent_sync`` of each tree (``--trees``: label=path, run interleaved, ``--rounds``
times; ``--options`` go to ``chat_blueprint``, those a tree does not know are left out).
Two loads, each bounded:

- **leavers**: ``--leavers`` clients (8 at a time) each start a run that waits in a tool
  (``slow-*``), read its first frame, and leave: the answers' statuses, then the worker's
  live runs, threads, fds and RSS, and how long a ``GET /api/history`` takes meanwhile;
  then every run is stopped (``POST /api/cancel``).
- **slow readers**: ``--slow`` clients start a 4 MB answer (``big-*``) and never read (a
  4 KB receive buffer): the worker's figures every 2 s for ``--watch`` seconds, the peak
  RSS, ``GET /api/history``'s time, and when the server closed those connections. Before
  it, the baseline: as many clients read the same answers whole (what the runs cost).

Loopback only. Figures are read from /proc (Linux) and from the app's ``/bench/stats``.
Before/after figures of ``max_live_runs`` and ``write_timeout``: docs/web.md, "Limits".
Compare two trees with ``git worktree add /tmp/old <commit>`` and
``--trees before=/tmp/old,after=. --options '{"write_timeout": 5}'``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.gunicorn import quiet_options  # noqa: E402
from tests.web._client import SSEConnection  # noqa: E402

_CLOSED = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class Worker:
    """gunicorn with one worker serving bench/_chat_app.py from ``tree``."""

    def __init__(self, tree: Path, options: dict[str, Any], folder: Path) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT), str(ROOT / "bench")]),
            "BENCH_STORE": f"sqlite:{folder / f'{uuid.uuid4().hex[:6]}.db'}",
            "BENCH_PREFIX": "load:",
            "BENCH_ROUTE_OPTIONS": json.dumps(options),
        }
        self._log = (folder / "gunicorn.log").open("a")
        gunicorn = Path(sys.executable).with_name("gunicorn")
        self._proc = subprocess.Popen(
            [
                str(gunicorn), "--workers", "1", "--threads", "8", "--worker-class", "gthread",
                "--bind", f"fd://{self._listener.fileno()}", "--log-level", "warning",
                "--timeout", "300", *quiet_options(), "_chat_app:create_app()",
            ],
            env=env, pass_fds=(self._listener.fileno(),), cwd=str(ROOT / "bench"),
            stdout=subprocess.DEVNULL, stderr=self._log,
        )  # fmt: skip
        self.get("/bench/stats", timeout=60)  # up and serving
        self.pid = self._worker_pid()

    def _worker_pid(self) -> int:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self._proc.pid:
                    return int(entry.name)
        raise RuntimeError("no gunicorn worker")

    def get(self, path: str, timeout: float = 5.0) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            return json.loads(conn.getresponse().read() or b"null")
        finally:
            conn.close()

    def figures(self) -> dict[str, Any]:
        """Live runs, threads, fds, RSS (MiB) and the time of a GET /api/history."""
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
        )
        started = time.perf_counter()
        try:
            self.get("/api/history?conversation_id=probe")
            probe = f"{(time.perf_counter() - started) * 1000:.0f} ms"
        except OSError:
            probe = "timeout (5 s)"
        try:
            live: Any = self.get("/bench/stats")["live_runs"]
        except OSError:
            live = "?"
        return {
            "live": live,
            "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{self.pid}/fd")),
            "rss": int(status["VmRSS"].split()[0]) / 1024,
            "history": probe,
        }

    def wait_idle(self, limit_s: float = 60.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                if self.get("/bench/stats")["live_runs"] == 0:
                    return
            except OSError:
                pass
            time.sleep(0.2)

    def close(self) -> None:
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        self._listener.close()
        self._log.close()


def _show(label: str, figures: dict[str, Any]) -> None:
    print(
        f"    {label:<24} live runs {figures['live']!s:>4}  threads {figures['threads']:>4}"
        f"  fds {figures['fds']:>5}  RSS {figures['rss']:6.1f} MiB  history {figures['history']}"
    )


def leavers(worker: Worker, count: int) -> None:
    """``count`` clients start a waiting run each and leave after its first frame."""
    started: list[str] = []
    statuses: Counter[str] = Counter()
    lock = threading.Lock()

    def one(_: int) -> None:
        cid = f"slow-{uuid.uuid4().hex[:10]}"
        try:
            conn = SSEConnection(
                worker.port, "/api/chat", {"conversation_id": cid, "message": "go"}
            )
        except OSError as exc:
            with lock:
                statuses[type(exc).__name__] += 1
            return
        label = str(conn.status)
        if conn.status == 200:
            conn.next_frame()
        elif "retry-after" in conn.headers:
            label += " (Retry-After)"
        conn.drop()
        with lock:
            statuses[label] += 1
            if conn.status == 200:
                started.append(cid)

    _show("before", worker.figures())
    began = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))
    elapsed = time.perf_counter() - began
    print(f"    {count} starts in {elapsed:.1f} s: {dict(statuses)}")
    _show("after the starts", worker.figures())
    for cid in started:
        worker.post("/api/cancel", {"conversation_id": cid})
    worker.wait_idle()
    _show("after stopping them", worker.figures())


def slow_readers(worker: Worker, count: int, watch_s: float) -> None:
    """``count`` clients start a big answer and never read it."""
    _show("before", worker.figures())
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", worker.port))
        body = json.dumps({"conversation_id": f"big-{uuid.uuid4().hex[:10]}", "message": "go"})
        sock.sendall(
            (
                f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(body)}\r\n\r\n{body}"
            ).encode()
        )
        socks.append(sock)
    poller = select.poll()
    for sock in socks:
        poller.register(sock, _CLOSED)
    began = time.monotonic()
    closed: dict[int, float] = {}
    peak = 0.0
    next_show = 0.0
    while (elapsed := time.monotonic() - began) < watch_s:
        for fd, _ in poller.poll(100):
            closed.setdefault(fd, time.monotonic() - began)
            poller.unregister(fd)
        figures = worker.figures()
        peak = max(peak, figures["rss"])
        if elapsed >= next_show:
            _show(f"t={elapsed:4.1f} s, {len(closed)} closed", figures)
            next_show = elapsed + 2.0
    when = sorted(closed.values())
    print(
        f"    peak RSS {peak:.1f} MiB; the server closed {len(closed)} of {count} never-read"
        f" streams" + (f" (after {when[0]:.1f}-{when[-1]:.1f} s)" if when else "")
    )
    for sock in socks:
        sock.close()
    worker.wait_idle()
    _show("after they left", worker.figures())


def readers(worker: Worker, count: int) -> None:
    """The baseline of :func:`slow_readers`: ``count`` clients read the same big answers."""
    _show("before", worker.figures())
    peak = 0.0
    done = threading.Event()

    def one(_: int) -> None:
        cid = f"big-{uuid.uuid4().hex[:10]}"
        conn = SSEConnection(
            worker.port, "/api/chat", {"conversation_id": cid, "message": "go"}, timeout=120
        )
        for frame in conn.frames():
            if frame.event == "done":
                break
        conn.drop()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.1):
            status = Path(f"/proc/{worker.pid}/status").read_text()
            rss = int(status.split("VmRSS:")[1].split()[0]) / 1024
            peak = max(peak, rss)

    watcher = threading.Thread(target=watch)
    watcher.start()
    began = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(one, range(count)))
    done.set()
    watcher.join()
    print(f"    all read in {time.perf_counter() - began:.1f} s; peak RSS {peak:.1f} MiB")
    worker.wait_idle()
    _show("after", worker.figures())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default=f"current={ROOT}")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--leavers", type=int, default=150)
    parser.add_argument("--slow", type=int, default=8)
    parser.add_argument("--watch", type=float, default=20.0)
    parser.add_argument("--options", default="{}", help="JSON for chat_blueprint")
    args = parser.parse_args()
    trees = [entry.split("=", 1) for entry in args.trees.split(",")]
    options = json.loads(args.options)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for round_number in range(1, args.rounds + 1):
            for label, path in trees:
                print(f"round {round_number}, {label} ({path}), options {options}:")
                scenarios = [
                    (f"{args.leavers} clients that start a run and leave", args.leavers),
                    (f"{args.slow} clients that read a big answer (the baseline)", args.slow),
                    (f"{args.slow} clients that never read", args.slow),
                ]
                for number, (title, count) in enumerate(scenarios):
                    worker = Worker(Path(path).resolve(), options, folder)  # a fresh worker
                    try:
                        print(f"  {title}")
                        if number == 0:
                            leavers(worker, count)
                        elif number == 1:
                            readers(worker, count)
                        else:
                            slow_readers(worker, count, args.watch)
                    finally:
                        worker.close()
        log = (folder / "gunicorn.log").read_text()
        if "Traceback" in log:
            print("gunicorn log has tracebacks:\n" + log[-3000:])


if __name__ == "__main__":
    main()
