"""Publishing a run: its events become records in the store's event log, in a thread.

The chat routes never send an agent event straight to a client. A :class:`Publisher` runs
the agent's event iterator (``agent.stream()`` or ``agent.resume_stream()``) in a named
thread (``agent-sync-run-N``), and a second one (``agent-sync-run-N-log``) appends the
records to the run's log (``store.append_events``, a compare-and-set on the last number),
as many per append as queued up while the last one was written; responses follow the log
(:mod:`._follow`). So a client on any worker, now or after a reconnect, reads the same
records, and a response that goes away leaves the run going (unless the route cancels it).

The log's end, once: ``done`` after the iteration has ended (the agent, and with it the
conversation, is released), or ``error`` if the run failed; the last append marks the log
complete and keeps it ``replay_ttl`` seconds. A run that pauses appends its
``approval_required`` records and no end: whoever resumes it publishes the rest.

A log that cannot go on (the store is unavailable, or refuses a record) is reported once:
the run is stopped (it stores its own end, so the conversation is released) and the log
ends with an ``error`` record (``StoreError``, or ``StoreUnavailable`` once the store is
back), so no stream waits on a writer that is gone. A writer that lost the store keeps
trying to append that record, with back-off (at most :data:`FAILURE_RETRY_MAX_S` apart),
for as long as the log would be kept (``replay_ttl``): the worker that knows why the run
stopped says so, whenever the store comes back. Followers leave it the time to
(:mod:`._follow`): one in this process never closes a log its writer still holds, one in
another process waits a grace period longer than the writer's back-off.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from ..errors import ModelError, OutputValidationError, RunConflictError, StoreUnavailableError
from ..events import Done, MessageComplete, ToolStart
from ..stores import RunEventLog
from ..stores._recovery import LiveSlot
from ._local_log import open_local_log
from ._partials import PartialThrottle
from ._records import (
    cancelled_tool_ends,
    done_record,
    error_record,
    log_failure_record,
    records_of,
)
from ._stream import DISCONNECT_REASON, RunStream

__all__ = ["FAILURE_RETRY_MAX_S", "REPLAY_TTL_S", "Publisher", "RunSlots"]

logger = logging.getLogger(__name__)

REPLAY_TTL_S: Final = 3600.0
"""How long a finished run's event log is kept for reconnects, by default (the chat
routes' ``replay_ttl``, a Celery task's run, a recovered run)."""

_thread_ids = itertools.count(1)
_JOIN_TIMEOUT_S: Final = 10.0
FAILURE_RETRY_MAX_S: Final = 2.0
"""The longest pause between two attempts of a writer that lost the store to append the
log's ``error`` record (it tries for ``replay_ttl`` seconds)."""


class Publisher:
    """Runs one agent stream in a thread, appending its records to the run's event log.

    Args:
        store: The store of the run's event log.
        stream: The run's events (started: the agent is taken).
        run_id: The run.
        first: Records appended before this returns (a new run's ``run`` record), so the
            log exists before any response follows it.
        after: The number of the log's last record (0 for a new run).
        cycle: Model calls the run made before (a resumed run's).
        denied: ``toolUseId`` of the calls a reviewer denied.
        replay_ttl: Seconds the complete log is kept.
        open_calls: ``toolUseId`` -> name of the calls the log shows started and not ended
            (a recovered run's): a second ``tool_start`` for one is not appended, and one
            that gets no ``ToolEnd`` is ended as a call cut short is.
        slot: A slot of the worker's :class:`RunSlots`, taken for this run: given back
            when the run is over or paused (the caller's to give back if this raises).

    Raises:
        RunConflictError, StoreUnavailableError: ``first`` could not be appended; the
            stream was closed (the run cancelled, the agent released).
        RuntimeError: No thread could be started; the stream was closed.
    """

    def __init__(
        self,
        store: RunEventLog,
        stream: RunStream,
        *,
        run_id: str,
        first: Sequence[dict[str, Any]] = (),
        after: int = 0,
        cycle: int = 0,
        denied: Collection[str] = (),
        replay_ttl: float,
        slot: LiveSlot | None = None,
        open_calls: Mapping[str, str] | None = None,
    ) -> None:
        self._slot = slot
        self._store = store
        self._stream = stream
        self._run_id = run_id
        self._cycle = cycle
        self._denied = frozenset(denied)
        self._partials = PartialThrottle()
        self._replay_ttl = replay_ttl
        self._local = open_local_log(run_id, after)
        try:
            self._after = store.append_events(run_id, list(first), after=after) if first else after
        except BaseException:
            self._local.end()
            stream.close()
            raise
        if first:
            self._local.add(after + 1, list(first))
        self._first_seq = self._after  # before the writer moves _after on
        self._open_calls: dict[str, str] = dict(open_calls or {})  # started, not ended
        self._announced = frozenset(self._open_calls)  # started by a worker that died
        self._released = threading.Event()
        self._store_failed = threading.Event()
        self._outbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        number = next(_thread_ids)
        self._writer = threading.Thread(
            target=self._write, name=f"agent-sync-run-{number}-log", daemon=True
        )
        self._thread = threading.Thread(
            target=self._pump, name=f"agent-sync-run-{number}", daemon=True
        )
        try:
            self._writer.start()
        except BaseException:  # no thread left (RuntimeError): release the agent
            self._local.end()
            stream.close()
            raise
        try:
            self._thread.start()
        except BaseException:
            self._outbox.put(_END)  # the writer ends the local log
            stream.close()
            raise

    @property
    def run_id(self) -> str:
        """The run."""
        return self._run_id

    @property
    def first_seq(self) -> int:
        """The number of the last record appended before the thread started (a
        continuation's stream starts after it)."""
        return self._first_seq

    @property
    def thread(self) -> threading.Thread:
        """The thread that runs the agent (for tests and diagnostics)."""
        return self._thread

    def cancel(self, reason: str = DISCONNECT_REASON) -> bool:
        """Cancel this run (never the conversation's next one), from any thread."""
        if self._released.is_set():
            return False
        return self._stream.cancel(reason)

    def join(self, timeout: float = _JOIN_TIMEOUT_S) -> bool:
        """Wait until the run is over (or paused) and its records are appended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _pump(self) -> None:
        """Iterate the run (this thread only); hand each event's records to the writer;
        give the run's slot back once they are appended."""
        try:
            self._iterate()
            self._writer.join(_JOIN_TIMEOUT_S)
        finally:
            if self._slot is not None:
                self._slot.give()

    def _iterate(self) -> None:
        stream = self._stream
        done: Done | None = None
        failure: BaseException | None = None
        try:
            for event in stream:
                if self._store_failed.is_set():
                    break  # closing the stream cancels the run
                if isinstance(event, Done):
                    done = event  # appended once the agent is released (below)
                    continue
                if isinstance(event, MessageComplete) and event.message["role"] == "assistant":
                    self._cycle += 1
                if not self._partials.keep(event):
                    continue  # the log keeps partials of a growing answer geometrically
                records = records_of(event, cycle=self._cycle, denied=self._denied)
                if self._announced and type(event) is ToolStart:
                    records = [r for r in records if r["id"] not in self._announced]
                if records:
                    self._track_calls(records)
                    self._outbox.put(records)
        except Exception as exc:  # the run's own failure (a model error), raised by next()
            if not isinstance(exc, (ModelError, OutputValidationError)):
                logger.exception("run_id=<%s> | the agent failed", self._run_id)
            failure = exc
        finally:
            try:
                stream.close()  # releases the agent (cancels a run left early)
            except Exception:
                logger.exception("run_id=<%s> | closing the agent stream failed", self._run_id)
            finally:
                self._released.set()
                if self._open_calls:  # cut short: no ToolEnd came; the history answers them
                    self._outbox.put(cancelled_tool_ends(self._open_calls))
                if done is not None and done.result.stop_reason != "paused":
                    self._outbox.put(_Last(done_record(done)))
                elif done is None and failure is not None:
                    self._outbox.put(_Last(error_record(failure)))
                self._outbox.put(_END)

    def _track_calls(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            if record["type"] == "tool_start":
                self._open_calls[record["id"]] = record["name"]
            elif record["type"] == "tool_end":
                self._open_calls.pop(record["id"], None)

    def _write(self) -> None:
        """Append what the run made, in order, as many records per append as have queued
        up meanwhile: a slow store takes bigger batches, not more round trips.

        Whatever goes wrong is reported once (logged, the run stopped) and ends the log
        with an ``error`` record when the store takes one: a stream never waits on a
        writer that is gone."""
        try:
            self._drain()
        except BaseException as exc:  # a bug here must not leave the streams waiting
            logger.exception("run_id=<%s> | the event log writer failed", self._run_id)
            self._failed(exc)
            raise
        finally:
            self._local.end()

    def _drain(self) -> None:
        outbox = self._outbox
        while True:
            batch: list[dict[str, Any]] = []
            keep_s: float | None = None
            item = outbox.get()
            ended = False
            while True:
                if item is _END:
                    ended = True
                    break
                if isinstance(item, _Last):
                    batch.append(item.record)
                    keep_s = self._replay_ttl
                else:
                    batch.extend(item)  # type: ignore[arg-type]
                try:
                    item = outbox.get_nowait()
                except queue.Empty:
                    break
            if batch and not self._store_failed.is_set():
                self._append(batch, keep_s)
            if ended:
                return

    def _append(self, records: list[dict[str, Any]], keep_s: float | None) -> None:
        first = self._after + 1
        try:
            self._after = self._store.append_events(
                self._run_id, records, after=self._after, keep_s=keep_s
            )
        except Exception as exc:  # unavailable, a conflict, a record it cannot encode...
            self._failed(exc)
            return
        self._local.add(first, records)  # stored: this process's streams may send them

    def _failed(self, exc: BaseException) -> None:
        """The log cannot go on: report it once, stop the run, and end the log with an
        ``error`` record (after a store outage, once the store is back, for a while)."""
        if self._store_failed.is_set():
            return
        self._store_failed.set()
        if isinstance(exc, (StoreUnavailableError, RunConflictError)):
            # Nobody can be told what happens next: stop the run rather than go on unseen.
            logger.warning(
                "run_id=<%s> | could not append to the event log, stopping the run: %s",
                self._run_id,
                exc,
            )
        else:
            logger.error(
                "run_id=<%s> | could not append to the event log, stopping the run",
                self._run_id,
                exc_info=exc,
            )
        try:
            self._stream.cancel("the event log could not be written")
        except Exception:
            logger.exception("run_id=<%s> | cancelling the run failed", self._run_id)
        # The end goes last, once the conversation is released: a client that sends its
        # next message when it sees it is not refused.
        self._released.wait()
        if not isinstance(exc, RunConflictError):  # a conflict: another writer owns the log
            self._append_failure(log_failure_record(exc))

    def _append_failure(self, record: dict[str, Any]) -> None:
        """Append the log's last record, retrying while the store is unavailable, for as
        long as the log would be kept (``replay_ttl``): a stream that reconnects once the
        store is back learns why the run ended, from the one worker that knows."""
        deadline = time.monotonic() + self._replay_ttl
        delay = 0.05
        while True:
            try:
                self._after = self._store.append_events(
                    self._run_id, [record], after=self._after, keep_s=self._replay_ttl
                )
            except StoreUnavailableError:
                if time.monotonic() + delay > deadline:
                    logger.warning(
                        "run_id=<%s> | the store stayed unavailable for replay_ttl; "
                        "the log has no end",
                        self._run_id,
                    )
                    return
                time.sleep(delay)
                delay = min(delay * 2, FAILURE_RETRY_MAX_S)
                continue
            except Exception:  # a conflict (a follower closed it), or the store refuses
                logger.warning(
                    "run_id=<%s> | the event log's last record could not be appended",
                    self._run_id,
                    exc_info=True,
                )
                return
            self._local.add(self._after, [record])
            return


class RunSlots:
    """At most ``limit`` live runs (a run's two threads, its store connections): a run takes
    a slot before it starts and gives it back once over or paused. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._live = 0
        self._lock = threading.Lock()

    @property
    def live(self) -> int:
        """Slots taken now."""
        return self._live

    def take(self) -> RunSlots | None:
        """A slot (this object, to give back once), or ``None`` if all are taken."""
        with self._lock:
            if self._live >= self._limit:
                return None
            self._live += 1
            return self

    def give(self) -> None:
        """Give a slot back."""
        with self._lock:
            self._live -= 1


class _Last:
    """The log's terminal record (appended with ``keep_s``)."""

    __slots__ = ("record",)

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record


_END: Final = object()
