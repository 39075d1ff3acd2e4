"""How a :class:`~agent_sync.stores.RedisRunStore` owner hears its signals.

Signals are a list per run plus a ``PUBLISH`` on one channel (the ``signal`` script);
``wait_signals`` listens on that channel (one pub/sub connection per store object) and takes
what the run's owner has not taken from its list atomically (the ``take`` script), so a
signal is delivered once, in order, and never lost between a look and a wait. It stays in
the list until the commit that consumes it (the ``write`` script), so a recoverer's claim
hands it to the new owner if the one that took it died first. While one thread of the store
listens, the others poll every :data:`_POLL_S`. A forked child opens its own pub/sub
connection.

Waking: the listener waits for its pub/sub socket or for a local socket pair, whichever is
readable first; :meth:`RedisSignals.wake` writes a byte to the pair, which ends the listening
wait at once (the store watcher, when a run registers, once per run). A wake is this
process's business, so it costs no command: a ``PUBLISH`` on a channel of the listener's own
was a round trip from the waker, a message to read for the listener, and on a Redis Cluster a
message every master passes on over the cluster bus. A subscribe confirmation makes the
listener take again, so a connection redis-py re-established (and subscribed again) by itself
loses no signal queued while it was down: the listener needs no polling to stay exact.

On a Redis Cluster the lists live in their runs' shards (:mod:`._redis_keys`): a take runs
once per shard of the runs asked for, and signals of runs of different shards are in order
per run (each shard numbers its own). Pub/sub reaches every node of a cluster.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
import weakref
from collections.abc import Callable, Collection
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
        self._waker: tuple[socket.socket, socket.socket] | None = None  # with the pub/sub
        self._close_waker: Callable[[], object] = lambda: None
        self._pid = os.getpid()
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
            self._waker = None  # the parent's: its wakes are not ours
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
                    self._drain_wakes()
                    woken = True
                if taken or remaining <= 0 or woken:
                    return taken
                woken = self._wait_for(listener, run_ids, deadline)
        finally:
            self._listener_lock.release()

    def wake(self) -> None:
        """End the listening thread's running or next wait (after one more take): a flag it
        reads after each take, and a byte on the local socket pair it waits on (none before
        it subscribed: it reads the flag after that). No command."""
        self._wake_pending = True  # one store: signal-safe in a caller's thread
        waker = self._waker
        if self._pid != os.getpid() or waker is None:
            return
        try:
            waker[1].send(b"w")
        except OSError:  # full (a wake is pending anyway), or closed with the listener
            pass

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
                pubsub.subscribe(self.channel)
            reader, writer = socket.socketpair()
            reader.setblocking(False)
            writer.setblocking(False)
            self._pubsub, self._waker = pubsub, (reader, writer)
            # Closed with the listener, or when this object is collected: before the garbage
            # it was part of is finalized (whose order would leave the sockets unclosed).
            self._close_waker = weakref.finalize(self, _close_all, pubsub, reader, writer)
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
                    message = listener.get_message(timeout=0)  # read, or one at hand
            except StoreUnavailableError:
                self._drop_listener()
                raise
            if message is None:
                if self._sleep(listener, remaining):
                    return True
                continue
            if message.get("type") != "message":  # (re)subscribed: look again
                return False
            if text(message.get("data")) in wanted:
                return False

    def _sleep(self, listener: Any, timeout: float) -> bool:
        """Wait until the pub/sub socket is readable, a :meth:`wake`, or ``timeout``;
        ``True`` if woken. The pub/sub connection is redis-py's: its socket is ``_sock``,
        connected by the ``get_message`` before this (a socket of another kind, or none:
        a short wait on redis-py's side instead, whose next look reads the wake flag)."""
        assert self._waker is not None  # created with the listener
        sock = getattr(listener.connection, "_sock", None)
        if not isinstance(sock, socket.socket):
            listener.connection.can_read(timeout=min(timeout, _POLL_S))
            return self._wake_pending
        if getattr(sock, "pending", lambda: 0)():  # TLS: decrypted bytes already read in
            return False
        # a selector, not select.select: a busy server's sockets go past fd 1024, where
        # select() refuses the set (epoll and kqueue have no such bound)
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_READ)
            selector.register(self._waker[0], selectors.EVENT_READ)
            ready = selector.select(timeout)
        if any(key.fileobj is self._waker[0] for key, _ in ready):
            self._drain_wakes()
            return True
        return False

    def _drain_wakes(self) -> None:
        """Read the wakes' bytes (they are one flag: :attr:`_wake_pending`)."""
        waker = self._waker
        if waker is None:
            return
        try:
            while waker[0].recv(4096):
                pass
        except OSError:  # nothing left (or closed)
            pass

    def _drop_listener(self) -> None:
        self._pubsub = self._waker = None
        self._close_waker()


def _close_all(pubsub: Any, *sockets: socket.socket) -> None:
    """Close a listener: its pub/sub connection and its wake socket pair."""
    try:
        pubsub.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass
    for end in sockets:
        end.close()
