"""How a :class:`~agent_sync.stores.RedisRunStore` owner hears its signals.

Signals are a list per run plus a ``PUBLISH`` on one channel (the ``signal`` script);
``wait_signals`` listens on that channel (one pub/sub connection per store object) and takes
what the run's owner has not taken from its list atomically (the ``take`` script), so a
signal is delivered once, in order, and never lost between a look and a wait. It stays in
the list until the commit that consumes it (the ``write`` script), so a recoverer's claim
hands it to the new owner if the one that took it died first. While one thread of the store
listens, the others poll every :data:`_POLL_S`. A forked child opens its own pub/sub
connection.

Waking: the listener also subscribes to a channel of its own (``{prefix}wake:<random>``):
:meth:`RedisSignals.wake` publishes there, which ends the listening wait at once (the store
watcher, when a run registers). A subscribe confirmation makes the listener take again, so a
connection redis-py re-established (and subscribed again) by itself loses no signal queued
while it was down: the listener needs no polling to stay exact.

On a Redis Cluster the lists live in their runs' shards (:mod:`._redis_keys`): a take runs
once per shard of the runs asked for, and signals of runs of different shards are in order
per run (each shard numbers its own). Pub/sub reaches every node of a cluster.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ..errors import StoreUnavailableError
from ._protocol import RunSignal
from ._redis_client import RedisScripts, text, translated
from ._redis_keys import RunHomes
from ._rules import decode_messages

if TYPE_CHECKING:
    from ._redis_client import Client

__all__ = ["RedisSignals"]

_POLL_S = 0.005  # wait_signals, when another thread of this store holds the pub/sub


class RedisSignals:
    """The signals queued under ``prefix``, taken by the runs' owner. Thread-safe."""

    def __init__(
        self, client: Client, scripts: RedisScripts, *, prefix: str, homes: RunHomes
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._prefix = prefix
        self._homes = homes
        self.channel = f"{prefix}signals"
        """The channel the ``signal`` script publishes a run's id on."""
        self._listener_lock = threading.Lock()
        self._pubsub: Any = None
        self._pid = os.getpid()
        self._wake_channel = f"{prefix}wake:{uuid.uuid4().hex}"  # this object's, this process's
        self._wake_pending = False  # wake() was called: the listener's wait returns

    def close(self) -> None:
        """Close the pub/sub connection."""
        with self._listener_lock:
            self._drop_listener()

    def wait(self, run_ids: Collection[str], timeout: float) -> list[RunSignal]:
        """:meth:`~agent_sync.stores.RunStore.wait_signals`: one thread listens on the
        pub/sub connection, the others poll."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self._pid != os.getpid():  # forked: the parent's pub/sub and lock are not ours
            self._listener_lock, self._pubsub, self._pid = threading.Lock(), None, os.getpid()
            self._wake_channel = f"{self._prefix}wake:{uuid.uuid4().hex}"
        if not self._listener_lock.acquire(blocking=False):
            return self._poll_signals(run_ids, deadline)  # another thread listens
        try:
            listener = self._listener()
            woken = False
            while True:
                wanted = list(run_ids)  # read again at each wake: it may have grown
                taken = self.take(wanted) if wanted else []  # after subscribing: none missed
                remaining = deadline - time.monotonic()
                if self._wake_pending:  # a wake() before this wait began, or unheard yet
                    self._wake_pending = False
                    woken = True
                if taken or remaining <= 0 or woken:
                    return taken
                woken = self._wait_for(listener, run_ids, deadline)
        finally:
            self._listener_lock.release()

    def wake(self) -> None:
        """End the listening thread's running or next wait (after one more take): a flag it
        reads after each take, and one ``PUBLISH`` that only this object's listener hears
        (none before it subscribed: it reads the flag after that)."""
        self._wake_pending = True  # one store: signal-safe in a caller's thread
        if self._pid != os.getpid() or self._pubsub is None:
            return
        with translated():
            self._client.publish(self._wake_channel, "")

    def take(self, run_ids: list[str]) -> list[RunSignal]:
        """Take the signals queued for these runs that their owners have not taken yet,
        in the order queued (they stay queued until the commit that consumes them)."""
        flat = []
        for prefix, ids in self._homes.group(run_ids).items():
            flat += self._scripts.run("take", prefix, *ids)
        items = []
        for n in range(0, len(flat), 2):
            run_id = text(flat[n])
            data = json.loads(text(flat[n + 1]))
            items.append((int(data["seq"]), run_id, data))
        signals = []
        for _, run_id, data in sorted(items, key=lambda item: item[0]):
            payload = data["payload"]
            if data["kind"] == "cancel":
                asked = json.loads(payload)
                signals.append(
                    RunSignal(
                        run_id=run_id,
                        kind="cancel",
                        reason=asked["reason"],
                        mode=asked.get("mode", "now"),
                    )
                )
            else:
                blocks = tuple(decode_messages([payload])[0]["content"])
                signals.append(RunSignal(run_id=run_id, kind="inject", content=blocks))
        return signals

    def _poll_signals(self, run_ids: Collection[str], deadline: float) -> list[RunSignal]:
        pause = threading.Event()
        while True:
            wanted = list(run_ids)
            taken = self.take(wanted) if wanted else []
            remaining = deadline - time.monotonic()
            if taken or remaining <= 0:
                return taken
            pause.wait(min(_POLL_S, remaining))

    def _listener(self) -> Any:
        """The subscribed pub/sub connection (under ``_listener_lock``)."""
        if self._pubsub is None:
            client: Any = self._client  # redis-py's pubsub() is untyped
            pubsub = client.pubsub()  # subscribe confirmations too: see the module docstring
            with translated():
                pubsub.subscribe(self.channel, self._wake_channel)
            self._pubsub = pubsub
        return self._pubsub

    def _wait_for(self, listener: Any, wanted: Collection[str], deadline: float) -> bool:
        """Wait until a signal for one of ``wanted`` is published, the listener is
        (re)subscribed, or the deadline; ``True`` if :meth:`wake` ended the wait."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                with translated():
                    message = listener.get_message(timeout=remaining)
            except StoreUnavailableError:
                self._drop_listener()
                raise
            if message is None:
                continue
            if message.get("type") != "message":  # (re)subscribed: look again
                return False
            if text(message.get("channel")) == self._wake_channel:
                return True
            if text(message.get("data")) in wanted:
                return False

    def _drop_listener(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._pubsub = None
