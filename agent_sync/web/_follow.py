"""Following a run: a response body that reads the run's event log, from any worker.

:class:`Follower` is the WSGI body of every streamed answer: it sends the encoder's opening,
then every record after ``after`` (what a reconnect missed: read back from the store, so
the same bytes), then each new record as it is appended, by this process or any other
(``store.read_events`` waits for appends), with a keep-alive after ``keepalive`` seconds of
silence. It ends after the log's terminal record, or, for an encoder that
``stops_at_pause``, once the run is paused.

A log whose writer died, or a paused run cancelled by a plain ``store.cancel``, never gets
its terminal record: when the store says the run is over and nothing was appended for
:data:`WRITER_GRACE_S` (and a whole check interval), the follower appends
:func:`._records.closing_record` itself (a compare-and-set, so it never lands after a
record it has not seen), and sends it. A run's writer that lost the store keeps trying to
append its own end (it knows why the run stopped), at most
:data:`._publish.FAILURE_RETRY_MAX_S` apart: the grace is longer than that, and a follower
never closes the log of a run whose writer is alive in this process.

Disconnects: a WSGI server learns the client left when a write fails, and then calls
``close()``. When the server shows the client socket, the follower has the process's one
client watcher (:mod:`._client_watch`) wait on it, so a client that leaves while the run is
silent is noticed at once without the follower waking for it: the watcher's thread wakes the
follower's wait on its log (this process's publisher, or a store that can cut it short:
SQLite, Redis), else (a store whose wait cannot be cut short: the memory store) calls
``on_gone`` in a thread of its own and the follower ends within :data:`UNWOKEN_WAIT_S`.
``on_gone`` (the route's ``on_disconnect="cancel"``) is called once, when the client leaves
before the end.

Slow readers: the run's stored log is the buffer, not this process. A follower holds at
most one chunk of about :data:`WRITE_BYTES` that the server is writing, and with
``write_timeout`` a client that takes no byte of it for that long has its connection
shut down (:mod:`._stall`): the server's write fails, as for a client that left, and the
client may reconnect with ``Last-Event-ID``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Final

from .._run_log._local_log import local_log
from .._run_log._publish import FAILURE_RETRY_MAX_S
from .._run_log._records import closing_record, is_terminal
from .._signal_safe import Event
from ..errors import RunConflictError, StoreUnavailableError
from ..stores import RunEvent
from ..stores._event_log import EventLogStore
from ..stores._rules import FINAL_STATUSES
from ._client_watch import Watch, watch_client
from ._encoders import StreamEncoder
from ._stall import StallGuard

if TYPE_CHECKING:
    import socket

__all__ = ["UNWOKEN_WAIT_S", "WRITER_GRACE_S", "WRITE_BYTES", "Follower", "close_log"]

logger = logging.getLogger(__name__)

UNWOKEN_WAIT_S: Final = 1.0
"""Longest wait of a follower whose client is watched, on a store whose wait cannot be cut
short when the client leaves (the memory store, for a run no publisher of this process
holds)."""

WRITE_BYTES: Final = 64 * 1024
"""About the most one chunk of a stream holds (a record is never split): a client that
catches up on a long backlog costs this much at a time, not the backlog."""

WRITER_GRACE_S: Final = 2.5 * FAILURE_RETRY_MAX_S
"""How long a run must have been over, with its log not ended, before a follower in a
process that does not hold the run's writer closes the log itself (the writer's next
attempt comes sooner, once the store is back)."""

_CHECK_INTERVAL_S: Final = 15.0
"""Without keep-alives, how often a silent follower asks the store whether the run is over."""


def close_log(store: EventLogStore, run_id: str, after: int, replay_ttl: float) -> bool:
    """Append the closing record of a run that is over to its log, if the log is not
    complete yet and ends at ``after``. Returns whether it was appended."""
    snapshot = store.get(run_id)
    if snapshot is None or snapshot.status not in FINAL_STATUSES:
        return False
    try:
        store.append_events(run_id, [closing_record(snapshot)], after=after, keep_s=replay_ttl)
    except RunConflictError:  # the writer (or another follower) got there first
        return False
    return True


class Follower:
    """The byte iterator of a response that follows one run's event log.

    Iterate it from one thread (the server's); ``close()`` is idempotent.
    """

    def __init__(
        self,
        store: EventLogStore,
        run_id: str,
        *,
        after: int,
        encoder: StreamEncoder,
        keepalive: float | None,
        replay_ttl: float,
        client_socket: socket.socket | None = None,
        on_gone: Callable[[], object] | None = None,
        write_timeout: float | None = None,
    ) -> None:
        self._store = store
        self._run_id = run_id
        self._after = after
        self._encoder = encoder
        self._keepalive = keepalive
        self._replay_ttl = replay_ttl
        self._client = client_socket
        self._watch: Watch | None = None
        self._gone = False  # the client watcher saw the client leave
        self._wake: Callable[[], object] | None = None  # ends the running wait, if it can
        self._left = threading.Lock()  # taken once: on_gone runs once
        self._guard = (
            None
            if client_socket is None or write_timeout is None
            else StallGuard(client_socket, write_timeout)
        )
        self._on_gone = on_gone
        self._ended = False
        self._closed = False
        self._frames = self._generate()

    @property
    def last_seq(self) -> int:
        """The number of the last record sent."""
        return self._after

    def __iter__(self) -> Follower:
        return self

    def __next__(self) -> bytes:
        if self._guard is None:
            return next(self._frames)
        return self._guard.next_chunk(self._frames.__next__)

    def close(self) -> None:
        """End the response; a client that left before the end triggers ``on_gone``."""
        if self._closed:
            return
        self._closed = True
        if self._guard is not None:
            self._guard.disarm()
        self._frames.close()
        if not self._ended:
            self._client_left()

    def _client_left(self) -> None:
        if not self._left.acquire(blocking=False):  # once, from whichever thread is first
            return
        self._ended = True
        if self._on_gone is not None:
            try:
                self._on_gone()
            except Exception:
                logger.exception("run_id=<%s> | on_gone failed", self._run_id)

    def _client_gone(self) -> None:
        """The client watcher's thread: the client left. Quick: nothing here waits on I/O."""
        if self._ended:
            return
        logger.debug("run_id=<%s> | client went away", self._run_id)
        self._gone = True
        wake = self._wake  # read after setting _gone: see _read_watched
        if wake is not None:
            wake()  # the follower's thread ends the stream and calls on_gone
        elif self._on_gone is not None:  # a wait that cannot be cut short: on_gone now
            threading.Thread(
                target=self._client_left, name="agent-sync-client-gone", daemon=True
            ).start()

    def _generate(self) -> Generator[bytes, None, None]:
        if self._client is not None:
            self._watch = watch_client(self._client, self._client_gone)
        try:
            yield from self._frames_until_the_end()
        except StoreUnavailableError:
            # The stream ends without its last frame: the client reconnects (an EventSource
            # does by itself) and gets the rest once the store is back. Ended here, not by
            # the client: on_gone does not apply.
            self._ended = True
            logger.warning(
                "run_id=<%s> | the store is unavailable; ending the stream", self._run_id
            )
        finally:
            if self._watch is not None:
                self._watch.stop()

    def _frames_until_the_end(self) -> Generator[bytes, None, None]:
        encoder = self._encoder
        yield encoder.opening()
        if self._after > 0 and self._run_over() and self._log_ended():
            self._ended = True
            yield encoder.closing()  # started at the end: nothing to send, nothing to come
            return
        interval = self._keepalive if self._keepalive is not None else _CHECK_INTERVAL_S
        quiet_since = time.monotonic()
        over_since: float | None = None  # when the run was first seen over, log not ended
        while True:
            waited = time.monotonic() - quiet_since
            events = self._read(max(0.0, interval - waited))
            if events:
                # One write per batch: fewer syscalls, and no small write held back behind
                # another's delayed ACK.
                chunks: list[bytes] = []
                size = 0
                paused_here = False
                for event in events:
                    if size >= WRITE_BYTES:  # a backlog goes out in bounded writes
                        yield b"".join(chunks)
                        chunks, size = [], 0
                    self._after = event.seq
                    frame = encoder.encode(event.seq, event.data)
                    chunks.append(frame)
                    size += len(frame)
                    if is_terminal(event.data):
                        self._ended = True
                        yield b"".join(chunks) + encoder.closing()
                        return
                    paused_here = event.data.get("type") == "approval_required"
                if paused_here and encoder.stops_at_pause and self._paused():
                    self._ended = True
                    yield b"".join(chunks) + encoder.paused()
                    return
                if any(chunks):
                    yield b"".join(chunks)
                quiet_since = time.monotonic()
                over_since = None
                continue
            if self._gone:
                self._client_left()
                return
            if time.monotonic() - quiet_since < interval:
                continue
            quiet_since = time.monotonic()
            if self._keepalive is not None:
                yield encoder.keepalive()
            if self._run_over():
                if self._log_ended():
                    self._ended = True
                    yield encoder.closing()  # nothing after ``after``, and nothing to come
                    return
                now = time.monotonic()
                if over_since is None:
                    over_since = now
                elif now - over_since >= WRITER_GRACE_S and local_log(self._run_id) is None:
                    # No writer here, and none elsewhere appended its end in time: it died.
                    close_log(self._store, self._run_id, self._after, self._replay_ttl)

    def _read(self, timeout: float) -> list[RunEvent]:
        """The records after ``after``: from this process's publisher while it has them
        (no read back), else from the store (waiting for appends from any process)."""
        if self._watch is not None:
            return self._read_watched(timeout)
        local = local_log(self._run_id)
        if local is not None:
            events = local.read(self._after, timeout)
            if events is not None:
                return events
        return self._store.read_events(self._run_id, after=self._after, timeout=timeout)

    def _read_watched(self, timeout: float) -> list[RunEvent]:
        """:meth:`_read` for a follower whose client is watched: its wait ends early
        (nothing read) when the client leaves, if it can. ``_wake`` is set before
        ``_gone`` is looked at, and the watcher sets ``_gone`` before it reads ``_wake``:
        either this sees the client gone, or the watcher ends this wait."""
        local = local_log(self._run_id)
        if local is not None:
            self._wake = local.poke
            held = local.read(self._after, timeout, woken=lambda: self._gone)
            if held is not None:
                return held
        read_woken = getattr(self._store, "_read_events_woken", None)
        if read_woken is None:
            self._wake = None
            if self._gone:
                return []
            wait = min(timeout, UNWOKEN_WAIT_S)
            return self._store.read_events(self._run_id, after=self._after, timeout=wait)
        wake = Event()
        self._wake = wake.set
        if self._gone:
            return []
        woken: list[RunEvent] = read_woken(
            self._run_id, after=self._after, timeout=timeout, wake=wake
        )
        return woken

    def _log_ended(self) -> bool:
        """Whether the log ends at ``after`` with its terminal record, or is gone."""
        tail = self._store.read_events(self._run_id, after=max(0, self._after - 1))
        if not tail:
            return True  # dropped (pruned, or past replay_ttl)
        last = tail[-1]
        return last.seq == self._after and is_terminal(last.data)

    def _paused(self) -> bool:
        snapshot = self._store.get(self._run_id)
        return snapshot is not None and snapshot.status == "paused"

    def _run_over(self) -> bool:
        snapshot = self._store.get(self._run_id)
        return snapshot is None or snapshot.status in FINAL_STATUSES
