"""Recovery: lost runs go on in this process.

A run of an agent built with ``on_owner_lost="resume"`` whose worker died (its lease ran
out) is *lost*: the store keeps it running and lists it (``store.lost_runs()``) until a
recoverer takes it over with a compare-and-set (``store.claim``), so exactly one does,
whatever the number racing. This module is the stores' side: finding lost runs and handing
each to an agent of its conversation that the ``make_agent`` it was given builds. The agent
does the rest through one verb, :meth:`RecoveringAgent._go_on` (``agent_sync.Agent`` has it):
it claims the run and goes on from its last committed step, same run id, publishing after
the last record of the run's event log if it has one (:mod:`agent_sync._run_log._recovered`),
and returns the rest of the work, which runs here in a thread of its own; the thread is not a
daemon, so a script that recovered runs ends when they have. The stores import nothing of
the agent: they name it by that verb, and the agent implements it from above.

* :func:`recover`: one pass, now (``store.recover``): returns the ids it took over.
* :func:`keep_recovering`: this process's watcher of the store looks for lost runs every
  :data:`POLL_S` seconds from now on (the chat routes and ``agent_sync.celery.configure``
  call it); each lost run it sees is taken over in a thread of its own.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from ..errors import ConcurrentInvocationError, PendingApprovalError, RunConflictError, UsageError
from ._rules import check_limit
from ._watcher import watch

if TYPE_CHECKING:
    from ._protocol import RunStore, StoredRun

__all__ = [
    "POLL_S",
    "LiveSlot",
    "LiveSlots",
    "RecoveringAgent",
    "keep_recovering",
    "recover",
    "stop_recovering",
]

logger = logging.getLogger(__name__)


class LiveSlot(Protocol):
    """One of a worker's live-run slots, taken for a run (``web``'s ``RunSlots`` is one)."""

    def give(self) -> None:
        """Give the slot back (once)."""
        ...


class LiveSlots(Protocol):
    """A worker's live-run slots (the chat routes' ``max_live_runs``)."""

    def take(self) -> LiveSlot | None:
        """A slot, or ``None`` if all are taken."""
        ...


class RecoveringAgent(Protocol):
    """What ``make_agent`` builds: an agent of the lost run's conversation on the
    recovering store (``agent_sync.Agent``)."""

    def _go_on(
        self,
        store: RunStore,
        lost: StoredRun,
        *,
        timeout: float | None,
        replay_ttl: float | None,
        slot: LiveSlot | None,
    ) -> Callable[[], None]:
        """Claim ``lost`` and start it going on (``timeout``: the resumed run's;
        ``replay_ttl``: how long its complete event log is kept, ``None`` for the routes'
        default); return the rest of the work, which gives ``slot`` back when it ends.

        Raises:
            RunConflictError, ConcurrentInvocationError, PendingApprovalError: Another
                recoverer has it.
            UsageError: The agent is not one of ``store``'s.
            Exception: Anything else that stopped it (the run, if claimed, ended).
            Whatever it raises, ``slot`` is the caller's to give back.
        """
        ...


MakeAgent = Callable[[str], RecoveringAgent]

POLL_S: Final = 0.5
"""How often a recovering process asks its store for lost runs (one cheap, indexed query:
a lost run is taken over within about this long after its lease ran out)."""

RETRY_S: Final = 5.0
"""How long a recovering process waits before it tries again a lost run it failed to take
over (its ``make_agent`` raised, the store was down): each failure is logged once per try."""

_BATCH: Final = 16
"""At most this many lost runs are taken per poll (the rest at the next)."""

_thread_ids = itertools.count(1)
_Outcome = Literal["taken", "other", "failed"]


@dataclass(frozen=True)
class _Recoverer:
    """How this process goes on with a lost run of one store."""

    make_agent: MakeAgent
    timeout: float | None = None  # each resumed run's timeout (the routes')
    replay_ttl: float | None = None  # how long its complete event log is kept (None: the
    # routes' default, _run_log._publish.REPLAY_TTL_S)
    slots: LiveSlots | None = None  # the worker's live-run slots (the routes')


def recover(store: RunStore, make_agent: MakeAgent, *, limit: int | None = None) -> list[str]:
    """Take over ``store``'s lost runs (at most ``limit``) now, each going on in a thread
    of its own; return the ids of those this call took (another recoverer's are skipped).

    Raises:
        UsageError: ``limit`` is not ``None`` or an int >= 1, or ``make_agent`` is not
            callable.
    """
    limit = check_limit(limit)
    if not callable(make_agent):
        raise UsageError("make_agent must be a callable conversation_id -> Agent")
    recoverer = _Recoverer(make_agent)
    return [
        lost.state.run_id
        for lost in store.lost_runs(limit=limit)
        if _take_over(store, recoverer, lost) == "taken"
    ]


def keep_recovering(
    store: RunStore,
    make_agent: MakeAgent,
    *,
    timeout: float | None = None,
    replay_ttl: float | None = None,
    slots: LiveSlots | None = None,
    while_alive: object = None,
) -> None:
    """From now on, this process's watcher of ``store`` takes over its lost runs as their
    leases run out, building agents with ``make_agent`` (the first one registered for a
    store is used; registering again changes nothing), until ``while_alive`` (if given:
    the chat routes' run control) is garbage-collected. A forked child (gunicorn
    ``--preload``) keeps recovering with its own watcher."""
    if not callable(make_agent):
        raise UsageError("make_agent must be a callable conversation_id -> Agent")
    alive = weakref.ref(while_alive) if while_alive is not None else None
    with _lock:
        if store in _registered:
            return
        recoverer = _Recoverer(make_agent, timeout, replay_ttl, slots)
        _registered[store] = poll = _Poll(store, recoverer, alive)
    watch(store).add_poll(_Poll, poll, POLL_S)


def stop_recovering(store: RunStore) -> None:
    """This process no longer looks for ``store``'s lost runs (runs taken over go on)."""
    with _lock:
        poll = _registered.pop(store, None)
    if poll is not None:
        watch(store).remove_poll(_Poll)


class _Poll:
    """One store's look for lost runs, in its watcher's thread: each lost run not being
    taken here already is handed to a thread of its own (``make_agent`` is the user's code:
    the watcher, which renews this process's leases, never waits on it)."""

    def __init__(
        self,
        store: RunStore,
        recoverer: _Recoverer,
        alive: Callable[[], object] | None = None,
    ) -> None:
        self.store = store
        self.recoverer = recoverer
        self._alive = alive  # the registration lasts while it answers an object
        self._taking: set[str] = set()
        self._failed: dict[str, float] = {}  # run id -> when to try it again
        self._lock = threading.Lock()

    def __call__(self) -> None:
        if self._alive is not None and self._alive() is None:
            stop_recovering(self.store)  # whoever registered is gone (an app, in tests)
            return
        now = time.monotonic()
        if self._failed:  # forget the tries that are due (the run may be someone else's now)
            with self._lock:
                self._failed = {i: at for i, at in self._failed.items() if at > now}
        for lost in self.store.lost_runs(limit=_BATCH):
            run_id = lost.state.run_id
            with self._lock:
                if run_id in self._taking or self._failed.get(run_id, 0.0) > now:
                    continue
                self._taking.add(run_id)
            thread = threading.Thread(
                target=self._take,
                args=(lost,),
                name=f"agent-sync-recover-{next(_thread_ids)}",
                daemon=True,  # only the claim runs here; a taken run goes on in its own
            )
            try:
                thread.start()
            except RuntimeError:  # no thread left: the next poll tries again
                with self._lock:
                    self._taking.discard(run_id)
                raise

    def _take(self, lost: StoredRun) -> None:
        run_id = lost.state.run_id
        outcome = "failed"
        try:
            outcome = _take_over(self.store, self.recoverer, lost)
        finally:
            with self._lock:
                self._taking.discard(run_id)
                if outcome == "failed":  # said once per RETRY_S, not at every poll
                    self._failed[run_id] = time.monotonic() + RETRY_S
                else:
                    self._failed.pop(run_id, None)


def _take_over(store: RunStore, recoverer: _Recoverer, lost: StoredRun) -> _Outcome:
    """Claim ``lost`` and start it going on: ``"taken"``; ``"other"`` if another recoverer
    has it, or this worker has no live-run slot free (another worker, or the next poll,
    takes it); ``"failed"`` if building its agent or taking it failed (logged)."""
    run_id = lost.state.run_id
    slots = recoverer.slots
    slot = slots.take() if slots is not None else None
    if slots is not None and slot is None:
        return "other"
    try:
        agent = recoverer.make_agent(lost.conversation_id)
        if not callable(getattr(agent, "_go_on", None)):
            raise UsageError(
                "make_agent must build agents on the recovering store "
                "(Agent(..., store=store, conversation_id=conversation_id))"
            )
        rest = agent._go_on(
            store, lost, timeout=recoverer.timeout, replay_ttl=recoverer.replay_ttl, slot=slot
        )
    except (RunConflictError, ConcurrentInvocationError, PendingApprovalError):
        if slot is not None:
            slot.give()
        logger.debug("run_id=<%s> | taken over by another recoverer", run_id)
        return "other"
    except Exception:
        if slot is not None:
            slot.give()
        logger.exception("run_id=<%s> | the lost run could not be taken over", run_id)
        return "failed"
    logger.info("run_id=<%s> | lost run taken over: it goes on here", run_id)
    _keep_alive(rest, run_id)
    return "taken"


def _keep_alive(target: Callable[[], object], run_id: str) -> None:
    """Run ``target`` in a thread that is not a daemon: the process waits for the run."""
    threading.Thread(
        target=target, name=f"agent-sync-recovered-{run_id[-8:]}", daemon=False
    ).start()


_lock = threading.Lock()
_registered: weakref.WeakKeyDictionary[Any, _Poll] = weakref.WeakKeyDictionary()


def _recover_in_child() -> None:
    """In a forked child: the parent's watchers are gone (``stores._watcher`` forgets
    them); this process's watchers recover as the parent's did."""
    global _lock
    _lock = threading.Lock()
    for store, poll in list(_registered.items()):
        poll._taking.clear()
        poll._lock = threading.Lock()
        watch(store).add_poll(_Poll, poll, POLL_S)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_recover_in_child)
