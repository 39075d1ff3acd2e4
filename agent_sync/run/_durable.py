"""A run's link to a :class:`~agent_sync.stores.RunStore`: begin or claim, commit at step
boundaries, hand signals and lease renewal to the process's watcher.

The driver calls it at fixed points (see ``_driver.py``): ``begin``/``claim`` when it takes
the agent, ``checkpoint`` after every step of a running run, ``commit`` for the pause
(before the pause is announced) and for the end. A commit that fails stops the run (fail
closed: nothing goes on that could not be recorded).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from ..messages import Message
from ..stores._protocol import ConversationRecord, RunStore
from ..stores._watcher import Watched, watch
from ._state import RunState

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
    since = synced - 1 if 0 < synced <= len(known) else 0
    record = store.load(conversation_id, since=since)
    if record.start > 0 and record.generation != generation:
        record = store.load(conversation_id)  # replaced: what we hold is not its prefix
    logged = [*known[: record.start], *record.messages]
    mirrored = record.log_length
    if record.run is not None and record.run.state.status == "paused":
        mirrored = min(mirrored, record.run.state.history_start)
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

    def commit(self, state: RunState) -> None:
        """Store ``state`` (compare-and-set on the version this run holds)."""
        if self.ended:
            return
        self.version = self.store.commit(state, owner=self.owner, version=self.version)
        if state.status != "running":
            self.close()

    def close(self) -> None:
        """Stop watching (idempotent); the run is paused or over."""
        self.ended = True
        if self._run_id is not None:
            watch(self.store).remove(self._run_id)
            self._run_id = None

    def _watch(self, run_id: str, run: Watched) -> None:
        self._run_id = run_id
        watch(self.store).add(run_id, run, owner=self.owner, lease_s=self.lease_s)
