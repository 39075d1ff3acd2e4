"""A real ``redis-server`` for tests and benchmarks: started on a free loopback port in a
temporary folder, without persistence, and stopped (or killed, to test a store that is down).

    with RedisServer.start(folder) as server:
        store = RedisRunStore(redis.Redis(port=server.port))

Readiness is read from the server's own log line ("Ready to accept connections") through a
pipe, never guessed with sleeps. :func:`redis_server_binary` finds the program (Debian's
``redis-server`` package; ``.ci/run`` installs it).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["RedisCluster", "RedisServer", "RedisServerError", "redis_server_binary"]

logger = logging.getLogger(__name__)

_READY = "Ready to accept connections"
_START_TIMEOUT_S = 30.0
_PORT_ATTEMPTS = 5


class RedisServerError(RuntimeError):
    """The server could not be started."""


def redis_server_binary() -> str | None:
    """The path of ``redis-server``, or ``None`` if it is not installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process. Use :meth:`start`; stop with :meth:`stop` (or ``with``)."""

    def __init__(
        self, folder: Path, port: int, process: subprocess.Popen[str], reader: threading.Thread
    ) -> None:
        self.folder = folder
        self.port = port
        self._process = process
        self._reader = reader

    @classmethod
    def start(
        cls,
        folder: str | os.PathLike[str],
        *,
        port: int | None = None,
        durable: bool = False,
        extra: Sequence[str] = (),
    ) -> RedisServer:
        """Start a server whose files live in ``folder``, on ``port`` (a free one by default).

        ``durable=True`` writes every change to an append-only file in ``folder`` before
        answering (``appendfsync always``), so a server killed and started again on the same
        folder has every write it acknowledged: a store that was down, then back.

        Raises:
            RedisServerError: ``redis-server`` is missing or did not become ready.
        """
        binary = redis_server_binary()
        if binary is None:
            raise RedisServerError("redis-server is not installed (apt-get install redis-server)")
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _ in range(1 if port is not None else _PORT_ATTEMPTS):
            chosen = port if port is not None else _free_port()
            process = subprocess.Popen(
                [
                    binary,
                    "--port", str(chosen),
                    "--bind", "127.0.0.1",
                    "--dir", str(path),
                    "--save", "",
                    "--appendonly", "yes" if durable else "no",
                    "--appendfsync", "always",
                    "--protected-mode", "no",
                    "--logfile", "",
                    "--loglevel", "notice",
                    *extra,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
            ready, output, reader = _wait_ready(process)
            if ready:
                return cls(path, chosen, process, reader)
            process.kill()
            process.wait()
            reader.join(10)
            last_error = output[-2000:]
        raise RedisServerError(f"redis-server did not start:\n{last_error}")

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers); idempotent."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._process.wait()
        self._reader.join(10)

    def kill(self) -> None:
        """SIGKILL the server: a store that is down, at once."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._reader.join(10)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _wait_ready(process: subprocess.Popen[str]) -> tuple[bool, str, threading.Thread]:
    """Read the server's log until it is ready (or exits); then drain it in a thread."""
    assert process.stdout is not None
    stream = process.stdout
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        with stream:  # closed when the server exits (no unclosed pipe left behind)
            for line in stream:
                if len(lines) < 200:
                    lines.append(line)
                if _READY in line:
                    ready.set()
        ready.set()  # end of output: the server exited

    reader = threading.Thread(target=read, name="redis-server-log", daemon=True)
    reader.start()
    ready.wait(_START_TIMEOUT_S)
    ok = process.poll() is None and any(_READY in line for line in lines)
    return ok, "".join(lines), reader


class RedisCluster:
    """A Redis Cluster of ``masters`` ``redis-server --cluster-enabled yes`` processes (no
    replicas) on free loopback ports, its 16384 slots split evenly between them. Use
    :meth:`start`; stop with :meth:`stop` (or ``with``).

    The slots are assigned and the nodes introduced with ``CLUSTER ADDSLOTSRANGE`` and
    ``CLUSTER MEET`` (no ``redis-cli`` needed); :meth:`start` returns once every node says
    ``cluster_state:ok`` and knows every other, read by polling ``CLUSTER INFO`` and
    ``CLUSTER NODES`` (each poll waits on a timer, the servers are not assumed fast).
    """

    def __init__(self, servers: list[RedisServer], bus_ports: list[int]) -> None:
        self.servers = servers
        self._bus_ports = bus_ports

    @classmethod
    def start(cls, folder: str | os.PathLike[str], *, masters: int = 3) -> RedisCluster:
        """Start the nodes in subfolders of ``folder`` and form the cluster.

        Raises:
            RedisServerError: A node did not start, or the cluster did not become ready.
        """
        servers: list[RedisServer] = []
        bus_ports = [_free_port() for _ in range(masters)]
        try:
            for n, bus_port in enumerate(bus_ports):
                servers.append(
                    RedisServer.start(
                        Path(folder) / f"node{n}",
                        extra=("--cluster-enabled", "yes", "--cluster-port", str(bus_port),
                               "--cluster-config-file", "nodes.conf",
                               "--cluster-node-timeout", "5000"),
                    )
                )  # fmt: skip
            cluster = cls(servers, bus_ports)
            cluster._form()
            return cluster
        except BaseException:
            for server in servers:
                server.kill()
            raise

    @property
    def ports(self) -> list[int]:
        """The nodes' ports."""
        return [server.port for server in self.servers]

    def _form(self) -> None:
        import redis  # the ``redis`` extra: only the cluster's users need it

        clients: list[Any] = [redis.Redis(port=port, decode_responses=True) for port in self.ports]
        try:
            count = len(clients)
            for n, client in enumerate(clients):
                first, last = n * 16384 // count, (n + 1) * 16384 // count - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            for client in clients[1:]:
                client.execute_command(
                    "CLUSTER", "MEET", "127.0.0.1", self.ports[0], self._bus_ports[0]
                )
            deadline = time.monotonic() + _START_TIMEOUT_S
            pause = threading.Event()
            while not all(_node_ready(client, count) for client in clients):
                if time.monotonic() > deadline:
                    raise RedisServerError("the cluster did not reach cluster_state:ok")
                pause.wait(0.05)  # the nodes gossip on their own clock: poll, bounded
        finally:
            for client in clients:
                client.close()

    def stop(self) -> None:
        """Stop every node; idempotent."""
        for server in self.servers:
            server.stop()

    def __enter__(self) -> RedisCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _node_ready(client: Any, count: int) -> bool:
    """Does this node see the cluster whole: state ok, ``count`` masters all connected?"""
    info = client.execute_command("CLUSTER", "INFO")
    text = info if isinstance(info, str) else str(info)
    if "cluster_state:ok" not in text or f"cluster_known_nodes:{count}" not in text:
        return False
    nodes = client.execute_command("CLUSTER", "NODES")
    listing = nodes if isinstance(nodes, str) else ""
    lines = [line for line in listing.splitlines() if line.strip()]
    return len(lines) == count and all(" connected" in line for line in lines)
