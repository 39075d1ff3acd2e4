"""One watcher thread per store per process: renews the leases of the runs this process
owns and delivers the signals other processes send them (cancel, inject).

A run registers its driver when it begins (or claims) a stored run and unregisters when it
ends. The thread loops on ``store.wait_signals(owned, timeout)``: the store blocks as it can
(a condition, pub/sub, or a short poll), so an idle process costs little. Each lease is
renewed every third of its length.

How long one wait lasts: a store that can be woken has ``_wake_watcher()``, which ends the
running ``wait_signals`` early (the Redis store writes to a local socket pair its listener
waits on beside its pub/sub, the memory store notifies its condition). It is woken when a run
registers, so a signal queued for a run before it was registered is taken at once and a short
lease's first renewal is not missed; its waits last until the next lease renewal is due, at
most :data:`IDLE_S` (a safety poll: an idle Redis owner costs about one command a second, not
twenty takes). Any other store (SQLite, whose wait polls the database anyway) waits at most
:data:`TICK_S`, which bounds how late a newly registered run is first watched.
Polls: a part above the stores may have the watcher call a function every so often while
it is registered (:meth:`_Watcher.add_poll`): the recovery of lost runs
(:mod:`agent_sync.stores._recovery`) looks for them there. The thread lives while the process owns a
run or has a poll; with polls only, it waits on an event between them and asks the store
nothing else.

A signal for a run that has just ended is dropped (its driver is gone, nothing to stop):
an inject never is, because a run's final commit is refused while the store accepted
injects its owner has not received (``InputPending``; the run's ``StoreLink`` is what is
registered here, and it keeps an inject that reaches an ending run for that run to answer).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..cancel import CancelMode
from ._protocol import RunSignal, RunStore

__all__ = ["TICK_S", "Watched", "watch"]

logger = logging.getLogger(__name__)

TICK_S = 0.05
"""Longest wait between two looks at the registrations and leases, for a store that cannot
be woken when a run registers (and the pause after a store failure)."""

LEASE_LOST = "the run's lease was lost: another worker took it over or ended it"
"""The cancel reason of a run whose renewal the store refused."""

IDLE_S = 1.0
"""Longest wait of a store that is woken when a run registers (a safety poll)."""


class Watched(Protocol):
    """What the watcher needs of a run (the run driver)."""

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool: ...

    def inject(self, content: object) -> None: ...


@dataclass
class _Entry:
    run: Watched
    owner: str
    lease_s: float
    renew_at: float


class _Watcher:
    def __init__(self, store: RunStore) -> None:
        # Weakly: the registry is process-wide, and a dropped store must free its
        # connections; the thread holds the store only for one pass of its loop.
        self._store = weakref.ref(store)
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._pause = threading.Event()  # never set: a wait that cannot be cut short
        self._wakeable = hasattr(store, "_wake_watcher")  # see the module docstring
        self._polls: dict[object, _Poll] = {}
        self._woken = threading.Event()  # a registration, while the thread waits for polls

    def add(self, run_id: str, run: Watched, *, owner: str, lease_s: float) -> None:
        with self._lock:
            self._entries[run_id] = _Entry(run, owner, lease_s, time.monotonic() + lease_s / 3)
            started = self._start()
        self._woken.set()
        if not started and self._wakeable:  # a new thread's first look sees it
            try:  # its first renewal may be due before the running wait ends, too
                self._wake()
            except Exception:  # the safety poll looks anyway
                logger.debug("run_id=<%s> | the watcher was not woken", run_id, exc_info=True)

    def _wake(self) -> None:
        """End the store's running ``wait_signals`` early, if it can be (see the module
        docstring)."""
        store = self._store()
        if store is not None and self._wakeable:
            store._wake_watcher()  # type: ignore[attr-defined]

    def remove(self, run_id: str) -> None:
        with self._lock:
            self._entries.pop(run_id, None)

    def add_poll(self, key: object, poll: Callable[[], None], every_s: float) -> None:
        """Call ``poll()`` in the watcher's thread every ``every_s`` seconds (the first at
        once) until :meth:`remove_poll` (``key`` names it; adding it again replaces it).
        A poll that raises is logged and called again at its next time."""
        with self._lock:
            self._polls[key] = _Poll(poll, every_s, time.monotonic())
            self._start()
        self._woken.set()

    def remove_poll(self, key: object) -> None:
        with self._lock:
            self._polls.pop(key, None)

    def _start(self) -> bool:
        """Start the thread if it is not running (under the lock); whether it was started."""
        if self._thread is not None and self._thread.is_alive():
            return False
        self._thread = threading.Thread(
            target=self._loop, name="agent_sync-store-watcher", daemon=True
        )
        self._thread.start()
        return True

    def _loop(self) -> None:
        owned = _Owned(self)
        while self._turn(owned):
            pass

    def _turn(self, owned: _Owned) -> bool:
        """One pass of the loop; whether to go on. The store is held for this pass only
        (a local of this frame): between two passes nothing here keeps it alive."""
        store = self._store()
        with self._lock:
            if store is None or (not self._entries and not self._polls):
                self._thread = None
                return False
            polls_only = not self._entries
        self._run_polls()
        if polls_only:  # nothing to renew or hear: the store is not asked
            del store  # (a poll-only wait may be long)
            self._woken.wait(self._timeout())
            self._woken.clear()
            return True
        try:
            # A live view: a run added during the wait is heard at once (a snapshot
            # left it unheard for up to a tick: a Stop right after a start took 45 ms).
            signals = store.wait_signals(owned, self._timeout())
        except Exception:  # a store hiccup must not kill the watcher
            self._failed()
            signals = []
        else:
            self._failures = 0
        for signal in signals:
            self._deliver(signal)
        self._renew(store)
        return True

    def _timeout(self) -> float:
        """How long the next wait may last (see the module docstring)."""
        with self._lock:
            poll_at = min((p.due for p in self._polls.values()), default=math.inf)
            if not self._wakeable and self._entries:
                return max(0.0, min(TICK_S, poll_at - time.monotonic()))
            due = min((e.renew_at for e in self._entries.values()), default=math.inf)
        return max(0.0, min(IDLE_S, due - time.monotonic(), poll_at - time.monotonic()))

    def _run_polls(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [p for p in self._polls.values() if p.due <= now]
        for poll in due:
            poll.due = now + poll.every_s
            try:
                poll.call()
            except Exception:  # e.g. the store is down: the next time tries again
                logger.warning("store watcher: a poll failed", exc_info=True)

    def _failed(self) -> None:
        """The store failed: say so once per outage, then wait a tick (a store that is
        down fails at once, and the loop must not spin on it)."""
        self._failures += 1
        if self._failures == 1:
            logger.warning("store watcher: the store failed; retrying", exc_info=True)
        else:
            logger.debug("store watcher: the store failed again", exc_info=True)
        self._pause.wait(TICK_S)

    def _deliver(self, signal: RunSignal) -> None:
        with self._lock:
            entry = self._entries.get(signal.run_id)
        if entry is None:
            return
        try:
            if signal.kind == "cancel":
                entry.run.cancel(signal.reason, mode=signal.mode)
            else:
                entry.run.inject(list(signal.content))
        except Exception:  # e.g. inject into a run that ended meanwhile
            logger.debug("run_id=<%s> | signal not applied", signal.run_id, exc_info=True)

    def _renew(self, store: RunStore) -> None:
        now = time.monotonic()
        with self._lock:
            due = [(run_id, e) for run_id, e in self._entries.items() if e.renew_at <= now]
        for run_id, entry in due:
            entry.renew_at = now + entry.lease_s / 3
            try:
                renewed = store.renew(run_id, owner=entry.owner, lease_s=entry.lease_s)
            except Exception:
                logger.warning("run_id=<%s> | lease renewal failed", run_id, exc_info=True)
                continue
            if not renewed:
                self._lost(run_id, entry)

    def _lost(self, run_id: str, entry: _Entry) -> None:
        """The store says this process no longer runs the run (its lease ran out while the
        process stood still, and a reader failed it or a recoverer took it over): stop it
        here, so its tools stop too (its commits are refused anyway)."""
        with self._lock:
            if self._entries.get(run_id) is not entry:
                return  # it ended meanwhile
        logger.warning("run_id=<%s> | the run's lease was lost: stopping it here", run_id)
        try:
            entry.run.cancel(LEASE_LOST)
        except Exception:
            logger.debug("run_id=<%s> | not stopped", run_id, exc_info=True)


@dataclass
class _Poll:
    call: Callable[[], None]
    every_s: float
    due: float


class _Owned(Collection[str]):
    """The run ids a watcher's process owns, read under its lock at every use."""

    def __init__(self, watcher: _Watcher) -> None:
        self._watcher = watcher

    def __contains__(self, run_id: object) -> bool:
        with self._watcher._lock:
            return run_id in self._watcher._entries

    def __iter__(self) -> Iterator[str]:
        with self._watcher._lock:
            return iter(list(self._watcher._entries))

    def __len__(self) -> int:
        with self._watcher._lock:
            return len(self._watcher._entries)


_watchers: weakref.WeakKeyDictionary[object, _Watcher] = weakref.WeakKeyDictionary()
_watchers_lock = threading.Lock()


def _forget_watchers() -> None:
    """In a forked child (gunicorn ``--preload``, multiprocessing ``fork``): the parent's
    watcher threads do not exist here and its locks may have been held at the fork, so the
    child starts with none; its runs start their own watcher."""
    global _watchers, _watchers_lock
    _watchers = weakref.WeakKeyDictionary()
    _watchers_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_watchers)


def watch(store: RunStore) -> _Watcher:
    """The watcher of ``store`` in this process (one per store object)."""
    with _watchers_lock:
        watcher = _watchers.get(store)
        if watcher is None:
            watcher = _watchers[store] = _Watcher(store)
        return watcher
