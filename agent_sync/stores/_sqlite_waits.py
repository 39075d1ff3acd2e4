"""The waits of :class:`~agent_sync.stores.SQLiteRunStore`'s ``read_events``: one reader
thread per store object and process reads the logs for every waiting reader.

A reader that waits for a run's log to pass the number it read up to registers (its run,
that number and its own lock-free event) and sleeps on its event: it reads nothing itself.
Every :data:`POLL_S` the thread asks the writer connection for SQLite's ``PRAGMA
data_version`` (no table read, no lock); when another connection committed something, or
this store object appended (it pokes the thread), the thread reads every waited-for log in
one query, each from the lowest number its readers wait after, and hands each reader the
events past its number (they are in the rows: no read back), then sets its event. So 100
followers of streaming runs cost one query per poll, not one read per follower per record.
The poll is every :data:`POLL_S` for :data:`BUSY_S` after the file last changed, then every
:data:`QUIET_POLL_S`. An append of this store object also hands its events at once to the
readers that wait right after the number it appended after (no read, no poll).

The thread keeps reading a run for :data:`KEEP_READING_S` after its last reader left, and
remembers the number it last read the log up to: a reader that comes back (as a follower
does after each batch) at or past that number is *covered*: anything newer was committed
after the thread's last read, which the thread's next pass sees, so it reads nothing itself.
A reader that is not covered reads the log once itself (it may have moved on) after it
registered, then waits. Whether it is covered is decided under the lock the thread holds
while it hands events out and records the numbers read; the thread builds its query's list
after it looked at ``data_version``, so a reader registered after that read the log itself
after any commit the look missed. A covered reader whose wait ends before the thread looked
at the file again reads the log once before it returns nothing.

A failed look or read ends every reader's wait with the error (fail closed: a reader's own
read on an open connection may still see a deleted file). Fork: a forked child forgets the
parent's readers and thread (none is the child's). The thread holds this object, never the
store: a dropped store ends it (``close``) and frees its connections.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Final

from .._signal_safe import Event
from ..errors import StoreUnavailableError
from ._event_log import RunEvent
from ._rules import decode_event
from ._sqlite_pool import Connections

__all__ = ["BUSY_S", "KEEP_READING_S", "POLL_S", "QUIET_POLL_S", "LogWaits", "events_of"]

logger = logging.getLogger(__name__)

POLL_S: Final = 0.01
"""The thread's pause between two looks at the file while it changes."""

QUIET_POLL_S: Final = 0.025
"""... once it has not changed for :data:`BUSY_S`."""

BUSY_S: Final = 2.0

KEEP_READING_S: Final = 2.0
"""How long the thread keeps reading a run's log after its last waiting reader left."""

_IN_CHUNK = 400  # (run, number) pairs per query: 2 parameters each, under SQLite's 999

_READ = (
    "WITH wanted (run_id, upto) AS (VALUES {pairs})"
    " SELECT e.run_id, e.seq, e.data FROM wanted AS w"
    " JOIN event_logs AS l ON l.run_id = w.run_id AND l.last_seq > w.upto"
    " AND (l.expires_at IS NULL OR l.expires_at > ?)"
    " JOIN events AS e ON e.run_id = w.run_id AND e.seq > w.upto"
    " ORDER BY e.run_id, e.seq"
)


class _Waiter:
    __slots__ = ("after", "error", "events", "run_id", "wake")

    def __init__(self, run_id: str, after: int, wake: Event) -> None:
        self.run_id = run_id
        self.after = after
        self.wake = wake
        self.events: list[RunEvent] | None = None  # handed over by the thread or an append
        self.error: str | None = None  # the thread's failure, which ends its wait


class LogWaits:
    """The waiting readers of one store object's event logs, in this process, and the one
    thread that reads the file for all of them. Thread-safe."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self._closed = False
        self._forget_waiting()
        _ALL.add(self)

    def _forget_waiting(self) -> None:
        self._lock = threading.Lock()  # all that follows; only ever `with`
        self._waiting: dict[str, dict[int, _Waiter]] = {}  # run id -> token -> waiter
        self._known: dict[str, tuple[int, float]] = {}  # run id -> (read up to, when waited)
        self._passes = 0  # the thread's looks at the file
        self._thread: threading.Thread | None = None
        self._poke = Event()  # the file changed here, or the store was dropped: look now

    def wait(self, run_id: str, after: int, timeout: float, wake: Event) -> list[RunEvent] | None:
        """One wait for ``run_id``'s log to pass ``after``, or for someone to set ``wake``
        (new for each call). Returns the events past ``after`` (handed over, or read here),
        nothing if the wait timed out, or ``None``: woken without events (read the log).

        Raises:
            StoreUnavailableError: The thread failed to look at or read the file.
        """
        waiter = _Waiter(run_id, after, wake)
        token = id(waiter)  # unique while it waits
        try:
            passes = self._register(token, waiter)
            if passes is None:
                events = self._read_log(run_id, after)  # it may have moved on already
                if events:
                    return events
            if wake.wait(timeout):
                if waiter.error is not None:
                    raise StoreUnavailableError(waiter.error)
                return waiter.events
            if passes is not None and self._passes < passes + 2:  # no full look since
                return self._read_log(run_id, after)
            return []
        finally:
            with self._lock:
                waiters = self._waiting.get(run_id)
                if waiters is not None:
                    waiters.pop(token, None)
                    if not waiters:
                        del self._waiting[run_id]

    def appended(self, run_id: str, after: int, texts: Sequence[str]) -> None:
        """This store object appended ``texts`` after ``after``: hand them to the readers
        waiting right there, and have the thread look (for the others, and the numbers)."""
        if not texts:
            return
        events: list[RunEvent] | None = None
        with self._lock:
            for waiter in self._waiting.get(run_id, {}).values():
                if waiter.after != after or waiter.wake.is_set():
                    continue
                if events is None:
                    events = events_of(after, texts)
                waiter.events = events
                waiter.wake.set()
        self._poke.set()  # always: a reader may register before the thread reads again

    def close(self) -> None:
        """The store is gone: the thread ends at its next look."""
        self._closed = True
        self._poke.set()

    def _register(self, token: int, waiter: _Waiter) -> int | None:
        """Add ``waiter``; if it is covered (see the module docstring), the thread's count
        of looks, else ``None`` (it reads the log itself)."""
        with self._lock:
            self._waiting.setdefault(waiter.run_id, {})[token] = waiter
            if self._thread is None or not self._thread.is_alive():  # (a start cut short)
                self._thread = threading.Thread(
                    target=self._run, name="agent_sync-sqlite-events", daemon=True
                )
                self._thread.start()
                return None
            known = self._known.get(waiter.run_id)
            if known is None or known[0] > waiter.after:
                return None
            return self._passes

    def _read_log(self, run_id: str, after: int) -> list[RunEvent]:
        found = self._read_logs({run_id: after})
        return found.get(run_id, [])

    def _run(self) -> None:
        """The thread: see the module docstring."""
        version: int | None = None
        changed_at = time.monotonic()
        while self._turn_over():
            poked = self._poke.is_set()
            self._poke.clear()  # before the look: a later poke makes another
            try:
                with self._connections.writer() as db:  # the same connection at every look
                    (now,) = db.execute("PRAGMA data_version").fetchone()
                if poked or now != version:
                    version, changed_at = now, time.monotonic()
                    with self._lock:
                        reading = self._next_reading()
                    found = self._read_logs(reading)
                    with self._lock:
                        self._hand_out(reading, found)
                with self._lock:
                    self._passes += 1
            except Exception as exc:  # a store that fails: every waiting reader meets it
                logger.debug("the event log reader failed", exc_info=True)
                version = None
                self._fail(exc)
            busy = time.monotonic() - changed_at < BUSY_S
            self._poke.wait(POLL_S if busy else QUIET_POLL_S)

    def _fail(self, exc: Exception) -> None:
        """End every wait with the thread's failure (fail closed: a reader never waits on
        a file the thread cannot read, as one could on a deleted file's open connection)."""
        error = (
            str(exc)
            if isinstance(exc, StoreUnavailableError)
            else (f"the SQLite store is unavailable: {exc}")
        )
        with self._lock:
            for waiters in self._waiting.values():
                for waiter in waiters.values():
                    if not waiter.wake.is_set():
                        waiter.error = error
                        waiter.wake.set()

    def _turn_over(self) -> bool:
        """Whether the thread goes on: a reader waits, or a run is still kept (else it ends:
        a reader that registers next starts another)."""
        now = time.monotonic()
        with self._lock:
            for run_id, (_, since) in list(self._known.items()):
                if run_id not in self._waiting and now - since > KEEP_READING_S:
                    del self._known[run_id]
            if self._closed or (not self._waiting and not self._known):
                self._thread = None
                return False
            return True

    def _next_reading(self) -> dict[str, int]:
        """Each run to read and the number to read it from (lock held): the lowest its
        waiting readers read up to, else the number it was last read up to."""
        now = time.monotonic()
        reading: dict[str, int] = {}
        for run_id, waiters in self._waiting.items():
            afters = [w.after for w in waiters.values() if not w.wake.is_set()]
            if afters:
                reading[run_id] = min(afters)
                known = self._known.get(run_id)
                self._known[run_id] = (known[0] if known else reading[run_id], now)
        for run_id, (number, _) in self._known.items():
            reading.setdefault(run_id, number)
        return reading

    def _read_logs(self, reading: dict[str, int]) -> dict[str, list[RunEvent]]:
        """The events of each run past its number: one query per :data:`_IN_CHUNK` runs
        (live logs only: a complete log past its time reads as empty)."""
        found: dict[str, list[RunEvent]] = {}
        pairs = list(reading.items())
        now = time.time()
        for n in range(0, len(pairs), _IN_CHUNK):
            chunk = pairs[n : n + _IN_CHUNK]
            sql = _READ.format(pairs=",".join(["(?, ?)"] * len(chunk)))
            parameters = [value for pair in chunk for value in pair]
            for run_id, seq, data in self._connections.rows(sql, [*parameters, now]):
                found.setdefault(run_id, []).append(RunEvent(seq=seq, data=decode_event(data)))
        return found

    def _hand_out(self, reading: dict[str, int], found: dict[str, list[RunEvent]]) -> None:
        """Give the waiting readers what the thread read from ``reading`` (lock held), and
        record the number each log was read up to."""
        for run_id, from_number in reading.items():
            events = found.get(run_id)
            last = events[-1].seq if events else from_number
            known = self._known.get(run_id)
            self._known[run_id] = (last, known[1] if known else time.monotonic())
            if not events:
                continue
            for waiter in self._waiting.get(run_id, {}).values():
                if waiter.after >= last or waiter.wake.is_set():
                    continue
                if from_number <= waiter.after:  # the rows hold all it lacks
                    waiter.events = [event for event in events if event.seq > waiter.after]
                waiter.wake.set()


def events_of(after: int, texts: Sequence[str]) -> list[RunEvent]:
    """Appended JSON texts as the events numbered from ``after + 1``."""
    return [RunEvent(seq=after + n, data=decode_event(t)) for n, t in enumerate(texts, 1)]


_ALL: weakref.WeakSet[LogWaits] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for waits in list(_ALL):  # no waiting reader nor thread of the parent's is the child's
        waits._forget_waiting()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
