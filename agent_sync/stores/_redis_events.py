"""The event logs of :class:`~agent_sync.stores.RedisRunStore` (the
:class:`~agent_sync.stores.RunEventLog` role).

A run's event log is a stream whose entry ids are the events' numbers (``7-0`` is event 7;
nothing is ever deleted from it, so its length is its last number). One script appends
(``append`` in :mod:`._redis_scripts`): it checks the complete mark and the length
(compare-and-set), ``XADD`` s the batch and sets the expiry: ``finished_ttl_s`` from the last
append while the log is open, and ``keep_s`` for it and its complete mark once complete.
``read_events`` reads with ``XRANGE``; a wait is one of the store object's waiting readers,
for which one thread per process sends one ``XREAD BLOCK`` (:mod:`._redis_waits`), so an
append from any process wakes it at once (on a Redis Cluster, one thread per shard the
waited runs' logs live in, :mod:`._redis_keys`). A wait with nothing to read may end up to 0.1 s
past its timeout (Redis ends a block on its next timer tick); through a client whose socket
timeout is under about 0.25 s, which cannot block, each wait polls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._signal_safe import Event
from ._event_log import RunEvent
from ._redis_client import RedisScripts, text, translated
from ._redis_keys import KeyLayout
from ._redis_waits import READER_BLOCK_S, StreamWaits, stream_events
from ._rules import encode_events, events_complete, events_moved_on, storable_id

if TYPE_CHECKING:
    from ._redis_client import Client

__all__ = ["RedisEventLog"]

_TICK_S = 0.1  # how late Redis may end a BLOCK: it checks timeouts every 1 / hz (10) seconds
_EVENT_POLL_S = 0.02  # read_events through a client whose socket timeout is too short to block
_KEEP_FOR_EVER_S = 1e12  # a keep_s this long (31,000 years) sets no expiry (PEXPIRE overflows)


class RedisEventLog:
    """The event logs under ``prefix`` on the store's client: the
    :class:`~agent_sync.stores.RunEventLog` half of :class:`~agent_sync.stores.RedisRunStore`,
    which inherits it. Thread-safe."""

    def __init__(
        self, client: Client, scripts: RedisScripts, *, layout: KeyLayout, ttl_s: int
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._events_keys = layout
        self._events_ttl_s = ttl_s  # an open log's expiry after its last append (0: none)
        block_s = self._block_s()
        # XREAD reads streams of one slot only: one reader (thread) per shard
        self._all_waits: dict[str, StreamWaits] = (
            {}
            if block_s is None
            else {
                prefix: StreamWaits(
                    client,
                    events_prefix=f"{prefix}events:",
                    wake_prefix=f"{prefix}wake:",
                    block_s=block_s,
                    read_log=self._events_after,
                )
                for prefix in layout.shards
            }
        )

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        texts = encode_events(events, after, keep_s)
        keep_ms = "" if keep_s is None else str(_keep_ms(keep_s))
        reply = self._scripts.run(
            "append",
            self._events_keys.by_id(run_id),
            run_id,
            after,
            self._events_ttl_s * 1000,
            keep_ms,
            *texts,
        )
        outcome = text(reply[0])
        if outcome == "ok":
            return int(reply[1])
        if outcome == "complete":
            raise events_complete(run_id)
        raise events_moved_on(run_id, int(reply[1]), after)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        if not storable_id(run_id):
            return []
        after = max(0, after)
        waits = self._waits(run_id) if timeout > 0 else None
        # A wait reads nothing first: the reader thread's XREAD (in flight, or sent for it)
        # answers at once when the log has moved on.
        events = self._events_after(run_id, after) if waits is None else []
        while not events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if waits is None:  # a socket timeout too short to block: poll
                Event().wait(min(_EVENT_POLL_S, remaining))
                events = self._events_after(run_id, after)
                continue
            waited = waits.wait(run_id, after, remaining, Event())
            events = self._events_after(run_id, after) if waited is None else waited
        return events

    def _read_events_woken(
        self, run_id: str, *, after: int, timeout: float, wake: Event
    ) -> list[RunEvent]:
        """See :class:`._event_log.WokenReads`."""
        if not storable_id(run_id):
            return []
        after = max(0, after)
        waits = self._waits(run_id)
        if timeout <= 0 or waits is None:
            return self.read_events(run_id, after=after, timeout=min(timeout, _EVENT_POLL_S))
        waited = waits.wait(run_id, after, timeout, wake)
        return self._events_after(run_id, after) if waited is None else waited

    def _events_after(self, run_id: str, after: int) -> list[RunEvent]:
        """One read of the log past ``after`` (``XRANGE``)."""
        key = f"{self._events_keys.by_id(run_id)}events:{run_id}"
        client: Any = self._client  # redis-py's stream commands are loosely typed
        with translated():
            return stream_events(client.xrange(key, min=f"{after + 1}-0", max="+"))

    def _waits(self, run_id: str) -> StreamWaits | None:
        """The waiting readers of the shard of ``run_id``'s log (``None``: none can block)."""
        return self._all_waits.get(self._events_keys.by_id(run_id))

    def _block_s(self) -> float | None:
        """The longest ``XREAD BLOCK``: :data:`._redis_waits.READER_BLOCK_S`, or less if
        the client's socket timeout is short (a reply later than it reads as a dead server);
        ``None`` if it is too short to block at all. Redis ends a block on its next timer
        tick, up to :data:`_TICK_S` late, so that is kept in hand."""
        pool = getattr(self._client, "connection_pool", None)  # a cluster's: its nodes'
        pool = getattr(self._client, "nodes_manager", pool)
        options = getattr(pool, "connection_kwargs", None)
        socket_timeout = options.get("socket_timeout") if isinstance(options, dict) else None
        if not isinstance(socket_timeout, (int, float)) or socket_timeout <= 0:
            return READER_BLOCK_S
        block_s = min(READER_BLOCK_S, socket_timeout / 2 - _TICK_S)
        return block_s if block_s >= 0.01 else None


def _keep_ms(keep_s: float) -> int:
    """``keep_s`` as ``PEXPIRE`` milliseconds; -1 (no expiry) for a time past any server's."""
    if keep_s >= _KEEP_FOR_EVER_S:
        return -1
    return math.ceil(keep_s * 1000)
