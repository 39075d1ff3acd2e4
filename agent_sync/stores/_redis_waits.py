"""The waits of :class:`~agent_sync.stores.RedisRunStore`'s ``read_events``: one reader
thread per store object and process, whatever the number of waiting readers.

A reader that waits for a run's log to pass the number it read up to registers (its run,
that number and its own lock-free event) and sleeps on its event: it sends no command. The
reader thread sends one ``XREAD BLOCK`` over the streams of every run waited for, each from
the lowest number its readers wait after, plus the store object's private *wake stream*
(``{prefix}wake:<id>``). When entries arrive it hands each waiting reader of that run the
events past its number (they are in the reply: no read back) and sets its event. So 100
idle followers cost one blocked command per :data:`READER_BLOCK_S`, not 100 a second, and
one connection, not 100.

A reader whose run the ``XREAD`` in flight already covers (the run is in it, from a number
at or below the reader's) waits for it. Any other reads the log once (it may have moved on),
then ``XADD`` s to the wake stream, which ends the ``XREAD`` so the thread sends a new one
that covers it. The thread keeps reading a run for :data:`KEEP_READING_S` after its last
reader left, at the log's last known number: a follower that comes back for more (as it does
after each batch) is covered, and one batch costs one command, as a plain ``XREAD`` did.

Whether a run is covered is decided under the lock the thread holds while it hands events
out and works out its next ``XREAD``: a reader registered after that is checked against the
``XREAD`` about to be sent; one registered before is in it.

A failed ``XREAD`` wakes every reader without events: each reads the log itself and meets
the error (fail closed); the thread tries again after :data:`RETRY_S`. Fork: a forked
child forgets the parent's readers and thread (none is the child's), and gets a wake stream
of its own.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._signal_safe import Event
from ._event_log import RunEvent
from ._redis_client import text, translated
from ._rules import decode_event

if TYPE_CHECKING:
    from ._redis_client import Client

__all__ = ["KEEP_READING_S", "READER_BLOCK_S", "RETRY_S", "StreamWaits", "stream_events"]

logger = logging.getLogger(__name__)

READER_BLOCK_S: Final = 5.0
"""The reader thread's longest ``XREAD BLOCK`` (less if the client's socket timeout is
short): how often an idle process sends a command, and how late the thread ends once no
reader is left."""

KEEP_READING_S: Final = 2.0
"""How long the reader thread keeps reading a run's log after its last waiting reader left."""

RETRY_S: Final = 0.2
"""The reader thread's pause after a failed ``XREAD``."""

_WAKE_KEEP_MS: Final = 3_600_000  # a wake stream expires an hour after its last poke


class _Waiter:
    __slots__ = ("after", "events", "run_id", "wake")

    def __init__(self, run_id: str, after: int, wake: Event) -> None:
        self.run_id = run_id
        self.after = after
        self.wake = wake
        self.events: list[RunEvent] | None = None  # handed over by the reader thread


class StreamWaits:
    """The waiting readers of one store object's event logs, in this process, and the one
    thread that waits on Redis for all of them. Thread-safe."""

    def __init__(
        self,
        client: Client,
        *,
        events_prefix: str,
        wake_prefix: str,
        block_s: float,
        read_log: Callable[[str, int], list[RunEvent]],
    ) -> None:
        self._client = client
        self._events_prefix = events_prefix
        self._wake_prefix = wake_prefix
        self._block_s = block_s
        self._read_log = read_log  # one read of a run's log past a number (XRANGE)
        self._forget_waiting()
        _ALL.add(self)

    def _forget_waiting(self) -> None:
        self._lock = threading.Lock()  # all that follows; only ever `with`
        self._waiting: dict[str, dict[int, _Waiter]] = {}  # run id -> token -> waiter
        self._reading: dict[str, int] | None = None  # the XREAD about to be or being sent
        self._known: dict[str, tuple[int, float]] = {}  # run id -> (number, when last waited)
        self._thread: threading.Thread | None = None
        self._wake_key = f"{self._wake_prefix}{uuid.uuid4().hex}"
        self._wake_seen = "0-0"

    def wait(self, run_id: str, after: int, timeout: float, wake: Event) -> list[RunEvent] | None:
        """One wait for ``run_id``'s log to pass ``after``, or for someone to set ``wake``
        (new for each call). Returns the events past ``after`` (handed over by the thread, or
        read here), nothing if the wait timed out, or ``None``: woken without events (read
        the log)."""
        waiter = _Waiter(run_id, after, wake)
        token = id(waiter)  # unique while it waits
        try:
            if not self._register(token, waiter):
                events = self._read_log(run_id, after)  # it may have moved on already
                if events:
                    return events
                self._poke()  # the XREAD in flight does not cover it: send another
            if not wake.wait(timeout):
                return []
            return waiter.events
        finally:
            with self._lock:
                waiters = self._waiting.get(run_id)
                if waiters is not None:
                    waiters.pop(token, None)
                    if not waiters:
                        del self._waiting[run_id]

    def _register(self, token: int, waiter: _Waiter) -> bool:
        """Add ``waiter``; whether the ``XREAD`` in flight (or the next) covers it."""
        with self._lock:
            self._waiting.setdefault(waiter.run_id, {})[token] = waiter
            if self._thread is None or not self._thread.is_alive():  # (a start cut short)
                self._reading = None  # its first XREAD covers every reader
                self._thread = threading.Thread(
                    target=self._read, name="agent_sync-redis-events", daemon=True
                )
                self._thread.start()
                return True
            reading = self._reading
            if reading is None:
                return True
            from_number = reading.get(waiter.run_id)
            return from_number is not None and from_number <= waiter.after

    def _poke(self) -> None:
        """End the reader thread's ``XREAD`` (one round trip)."""
        with translated():
            pipe = self._client.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {"w": "1"}, maxlen=1, approximate=False)
            pipe.pexpire(self._wake_key, _WAKE_KEEP_MS)
            pipe.execute()

    def _read(self) -> None:
        """The reader thread: see the module docstring."""
        client: Any = self._client  # redis-py's stream commands are loosely typed
        block_ms = max(1, int(self._block_s * 1000))
        reply: Any = None
        reading: dict[str, int] = {}
        while True:
            with self._lock:
                woke = self._hand_out(reading, reply)
                reading = self._next_reading()
                if not reading:  # nothing waited for, nor lately
                    self._reading = None
                    self._thread = None
                    return
                self._reading = reading
                streams = {f"{self._events_prefix}{run}": f"{n}-0" for run, n in reading.items()}
                streams[self._wake_key] = self._wake_seen
            if woke:
                time.sleep(0)  # let the readers it woke take the GIL before the next XREAD
            try:
                with translated():
                    reply = client.xread(streams, block=block_ms)
            except Exception:  # the readers meet it themselves
                logger.debug("the event log reader failed", exc_info=True)
                reply = None
                with self._lock:
                    for waiters in self._waiting.values():
                        for waiter in waiters.values():
                            waiter.wake.set()
                Event().wait(RETRY_S)

    def _hand_out(self, reading: dict[str, int], reply: Any) -> bool:
        """Give the waiting readers what an ``XREAD`` from ``reading`` read (lock held);
        whether it woke any."""
        woke = False
        now = time.monotonic()
        for key, entries in _streams(reply):
            if key == self._wake_key:
                self._wake_seen = text(entries[-1][0])
                continue
            run_id = key[len(self._events_prefix) :]
            last = _number(entries[-1][0])
            self._known[run_id] = (last, now)
            events: list[RunEvent] | None = None
            for waiter in self._waiting.get(run_id, {}).values():
                if waiter.after >= last or waiter.wake.is_set():
                    continue
                if reading.get(run_id, last) <= waiter.after:  # the reply holds all it lacks
                    if events is None:
                        events = stream_events(entries)
                    waiter.events = [event for event in events if event.seq > waiter.after]
                waiter.wake.set()
                woke = True
        return woke

    def _next_reading(self) -> dict[str, int]:
        """Each run to read and the number to read it from (lock held): the lowest its
        waiting readers read up to, else its last known number while it is kept."""
        now = time.monotonic()
        reading: dict[str, int] = {}
        for run_id, waiters in self._waiting.items():
            afters = [w.after for w in waiters.values() if not w.wake.is_set()]
            if afters:
                reading[run_id] = lowest = min(afters)
                known = self._known.get(run_id)
                self._known[run_id] = (max(lowest, known[0]) if known else lowest, now)
        for run_id, (number, since) in list(self._known.items()):
            if run_id in reading:
                continue
            if now - since > KEEP_READING_S:
                del self._known[run_id]
            else:
                reading[run_id] = number
        return reading


def stream_events(entries: Any) -> list[RunEvent]:
    """Stream entries (``[(id, {"d": json}), ...]``) as events, whatever the decoding."""
    events = []
    for entry_id, fields in entries:
        data = fields.get("d", fields.get(b"d"))
        events.append(RunEvent(seq=_number(entry_id), data=decode_event(data)))
    return events


def _number(entry_id: Any) -> int:
    return int(text(entry_id).partition("-")[0])


def _streams(reply: Any) -> list[tuple[str, Any]]:
    """An ``XREAD`` reply as ``(key, entries)`` pairs: ``[[key, entries], ...]`` (RESP2) or
    ``{key: [entries]}`` (RESP3); nothing if it timed out."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(text(key), value[0]) for key, value in reply.items() if value and value[0]]
    return [(text(key), entries) for key, entries in reply if entries]


_ALL: weakref.WeakSet[StreamWaits] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for waits in list(_ALL):  # no waiting reader nor thread of the parent's is the child's
        waits._forget_waiting()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
