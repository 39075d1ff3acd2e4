"""Counting the round trips a RedisRunStore makes: ``MONITOR`` on every master, the commands
that name the store's prefix, those its scripts run inside the server left out.

Deterministic, unlike seconds: a count per call is a rule a test can pin."""

from __future__ import annotations

import collections
import hashlib
import threading
import uuid
from types import TracebackType
from typing import Any

import redis

from agent_sync.stores._redis_scripts import SCRIPTS

_SHAS = {hashlib.sha1(source.encode()).hexdigest(): name for name, source in SCRIPTS.items()}


class RoundTrips:
    """``with RoundTrips(ports, prefix) as trips: ...``, then ``trips.names``: the commands
    sent meanwhile that name ``prefix`` (a script by its name, ``"begin"``), in order.

    Every script is loaded on every master first, so no ``NOSCRIPT`` retry is counted."""

    def __init__(self, ports: list[int], prefix: str) -> None:
        self._ports = ports
        self._prefix = prefix
        self._marker = f"end-of-count-{uuid.uuid4().hex}"
        self._seen: list[list[tuple[float, str]]] = [[] for _ in ports]
        self._threads: list[threading.Thread] = []
        self.names: list[str] = []

    def __enter__(self) -> RoundTrips:
        for port in self._ports:
            client = redis.Redis(port=port)
            for source in SCRIPTS.values():
                client.script_load(source)
            client.close()
        for port, seen in zip(self._ports, self._seen, strict=True):
            ready = threading.Event()
            thread = threading.Thread(target=self._watch, args=(port, seen, ready), daemon=True)
            thread.start()
            assert ready.wait(30), "MONITOR did not start"
            self._threads.append(thread)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for port in self._ports:  # after every counted command: MONITOR keeps the order
            client = redis.Redis(port=port)
            client.echo(self._marker)
            client.close()
        for thread in self._threads:
            thread.join(30)
            assert not thread.is_alive(), "MONITOR did not see the end marker"
        seen = sorted(item for items in self._seen for item in items)  # by server time
        self.names = [name for _, name in seen]

    def count(self) -> collections.Counter[str]:
        """The commands counted, by name."""
        return collections.Counter(self.names)

    def _watch(self, port: int, seen: list[tuple[float, str]], ready: threading.Event) -> None:
        client: Any = redis.Redis(port=port)  # monitor() is untyped
        try:
            with client.monitor() as monitor:
                ready.set()
                while True:
                    command: dict[str, Any] = monitor.next_command()
                    words = str(command["command"]).split(" ")
                    if self._marker in words:
                        return
                    if command["client_type"] == "lua" or self._prefix not in command["command"]:
                        continue
                    name = words[0].upper()
                    if name == "EVALSHA":
                        name = _SHAS.get(words[1].lower(), name)
                    seen.append((float(command["time"]), name))
        finally:
            client.close()
