"""A run's link to a :class:`~agent_sync.stores.RunStore`: begin or claim, commit at step
boundaries, hand signals and lease renewal to the process's watcher.

The driver calls it at fixed points (see ``_driver.py``): ``begin``/``claim`` when it takes
the agent, ``checkpoint`` after every step of a running run, ``commit`` for the pause
(before the pause is announced) and for the end. A commit that fails stops the run (fail
closed: nothing goes on that could not be recorded).

Injects from other processes (``store.inject``) reach the run through the link: the watcher
hands each to :meth:`StoreLink.inject`, which counts it and puts it in the run's inbox, or,
once the run's inbox is closed (it is ending), keeps it. The final commit says how many it
received, and the store refuses it while it accepted more (``InputPending``): so an inject
accepted just before the end is answered by the run (:meth:`StoreLink.commit_end` hands it
back), never dropped with the run's queue. A running commit tells the store how many it
received too (:meth:`StoreLink.received`, read before the state is made, so the state holds
each of them): the store acknowledges those and keeps the rest for a recoverer, should this
worker die before its next commit.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from .._prompt import content_blocks
from .._run_state import RunState
from ..cancel import CancelMode
from ..errors import UsageError
from ..messages import ContentBlock, Message
from ..stores._protocol import ConversationRecord, RunStore
from ..stores._rules import InputPending
from ..stores._watcher import Watched, watch
from . import _log_cache as log_cache

__all__ = ["StoreLink", "load_log", "new_owner"]

logger = logging.getLogger(__name__)


def load_log(
    store: RunStore,
    conversation_id: str,
    known: list[Message],
    synced: int,
    generation: int = 0,
) -> tuple[ConversationRecord, list[Message], int]:
    """The conversation's stored record, its whole log as a list, and how many of the
    list's messages mirror the log; only what ``known[:synced]`` does not hold is read.

    The log never shrinks and only its last message is ever rewritten (a run extending
    the trailing user message), so the messages before the last one an agent synced are
    the store's, unless the log was replaced since (``record.generation`` is not the
    ``generation`` they were read under): then it is read again from the start. The
    mirrored count stops at a paused run's start: after it, an agent holds the paused
    run's own messages.
    """
    if synced == 0:  # a new agent: start from what this process last synced, if anything
        known, synced, generation = log_cache.recall(store, conversation_id)
    since = synced - 1 if 0 < synced <= len(known) else 0
    record = store.load(conversation_id, since=since)
    if record.start > 0 and (record.generation != generation or record.start != since):
        # replaced (or shorter than what we hold): what we hold is not its prefix
        record = store.load(conversation_id)
    logged = [*known[: record.start], *record.messages]
    mirrored = record.log_length
    if record.run is not None and record.run.state.status == "paused":
        mirrored = min(mirrored, record.run.state.history_start)
    log_cache.remember(store, conversation_id, logged, mirrored, record.generation)
    return record, logged, mirrored


def new_owner() -> str:
    """An owner token: host, process, thread, and a random part (unique per run)."""
    host = socket.gethostname()
    return f"{host}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:12]}"


class StoreLink:
    """One run's dealings with its store. Used by the run's driver only."""

    def __init__(self, store: RunStore, conversation_id: str, lease_s: float) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.lease_s = lease_s
        self.owner = new_owner()
        self.version = 0
        self.ended = False
        self._run_id: str | None = None
        self._run: Watched | None = None
        # Guards the two below. Shared with the store's watcher thread (every run of the
        # store): taken with ``with`` on the plain lock, whose C ``__enter__`` a Ctrl-C in
        # this run's thread cannot split (Condition.__enter__ is Python: see _signal_safe).
        self._arrived_lock = threading.RLock()
        self._arrived = threading.Condition(self._arrived_lock)
        self._received = 0  # injects the watcher handed this run
        self._late: list[ContentBlock] = []  # ... after its inbox closed, not yet answered

    def begin(self, state: RunState, run: Watched, *, expected_length: int) -> None:
        """Record the run as running (see ``RunStore.begin`` for what it raises)."""
        self.version = self.store.begin(
            self.conversation_id,
            state,
            owner=self.owner,
            lease_s=self.lease_s,
            expected_length=expected_length,
        )
        self._watch(state.run_id, run)

    def claim(self, state: RunState, version: int, run: Watched) -> None:
        """Take the paused run to resume it (``RunConflictError`` for a loser)."""
        self.version = self.store.claim(
            state.run_id, owner=self.owner, lease_s=self.lease_s, version=version
        )
        self._watch(state.run_id, run)

    def received(self) -> int | None:
        """How many injects the watcher handed this run, each in its inbox since (or taken
        from it into the history by the run's own thread): read before making a state, the
        count its commit acknowledges. ``None`` while one waits outside the inbox (the run
        is ending: :meth:`commit_end` hands it back)."""
        with self._arrived_lock:
            return None if self._late else self._received

    def commit(self, state: RunState, *, injects_received: int | None = None) -> None:
        """Store ``state`` (compare-and-set on the version this run holds); with
        ``injects_received`` (:meth:`received`, read before ``state`` was made), the store
        acknowledges the injects it holds."""
        if self.ended:
            return
        self.version = self.store.commit(
            state, owner=self.owner, version=self.version, injects_received=injects_received
        )
        if state.status != "running":
            self.close()

    def commit_end(self, state: RunState) -> list[ContentBlock]:
        """Commit a final or paused state (the run's last look at its input), unless input
        injected through the store has not been answered: then commit nothing and return
        that input (the run answers it, writes it to its history, or carries it in its
        paused state, and calls again). Waits for an accepted inject the watcher has
        not handed over yet (at most ``lease_s``).

        Raises:
            InputPending: The watcher did not hand over the store's injects in time.
        """
        if self.ended:
            return []
        waited_until: float | None = None
        while True:
            with self._arrived_lock:
                late, self._late = self._late, []
                received = self._received
            if late:
                return late
            try:
                self.version = self.store.commit(
                    state, owner=self.owner, version=self.version, injects_received=received
                )
            except InputPending:  # accepted, on its way: the watcher brings it
                now = time.monotonic()
                waited_until = waited_until or now + self.lease_s
                if now >= waited_until:
                    raise
                with self._arrived_lock:
                    if not self._late:
                        self._arrived.wait(min(waited_until - now, _RECHECK_S))
                continue
            self.close()
            return []

    # -- the watcher's side (a Watched) --

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        """A cancel from another process (or the watcher's, for a lost lease): the run's,
        unless it has ended."""
        run = self._run
        return run is not None and not self.ended and run.cancel(reason, mode=mode)

    def inject(self, content: object) -> None:
        """An inject from another process: into the run's inbox, or kept for
        :meth:`commit_end` if the inbox is closed (the run is ending); counted either way."""
        run = self._run
        with self._arrived_lock:
            if run is None or self.ended:
                raise UsageError("the run is over: nothing more can be injected into it")
            self._received += 1
            try:
                run.inject(content)
                return
            except UsageError:  # its inbox is closed: the run is ending
                pass
            self._late.extend(content_blocks(content, what="injected input"))
            self._arrived.notify_all()

    def close(self) -> None:
        """Stop watching (idempotent); the run is paused or over."""
        self.ended = True
        if self._run_id is not None:
            watch(self.store).remove(self._run_id)
            self._run_id = None

    def _watch(self, run_id: str, run: Watched) -> None:
        self._run_id, self._run = run_id, run
        watch(self.store).add(run_id, self, owner=self.owner, lease_s=self.lease_s)


_RECHECK_S = 0.5
"""While an accepted inject is on its way, how often the final commit is tried again."""
