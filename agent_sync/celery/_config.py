"""What ``configure`` records: how this worker builds agents, and their store.

Nothing here calls ``make_agent`` at import: an app's ``make_agent`` may look its
conversation up (and refuse a made-up one), and its store may be down while the worker
starts. The store is the one ``configure(..., store=)`` names, or else the store of the
first agent a task builds in this process (each task's agent is checked to be on it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..stores import RunEventLog, RunStore
from ..stores._event_log import EventLogStore

if TYPE_CHECKING:
    from ..agent import Agent
    from ..run._binding import ConversationBinding

__all__ = ["Config", "MakeAgent", "check_store", "configured", "set_config"]

MakeAgent = Callable[[str], "Agent"]

_ON = "(Agent(..., store=store, conversation_id=conversation_id))"


class Config:
    """``make_agent`` and the agents' store (``None`` until known; ``learned`` is called
    with it when a task's agent tells it). Thread-safe."""

    def __init__(
        self,
        make_agent: MakeAgent,
        store: EventLogStore | None,
        learned: Callable[[EventLogStore], object] = lambda store: None,
    ) -> None:
        self.make_agent = make_agent
        self._store = store
        self._learned = learned
        self._lock = threading.Lock()

    @property
    def store(self) -> EventLogStore | None:
        """The agents' store, once named or learned."""
        return self._store

    def store_of(self, agent: Agent) -> EventLogStore:
        """The agents' store, checked against ``agent``'s (learned from it if unknown).

        Raises:
            UsageError: ``agent`` has no store, another store than the others, or one
                that keeps no event logs.
        """
        binding: ConversationBinding | None = getattr(agent, "_binding", None)
        theirs: object = binding.store if binding is not None else None
        learned = False
        with self._lock:
            if self._store is None and theirs is not None:
                self._store = check_store(theirs)
                learned = True
            store = self._store
        if learned and store is not None:
            self._learned(store)
        if store is None or theirs is not store:
            raise UsageError(f"make_agent must build agents on the configured store {_ON}")
        return store


def check_store(store: object) -> EventLogStore:
    """``store`` if it keeps runs and their event logs.

    Raises:
        UsageError: It does not (it is not one of the package's stores).
    """
    if not isinstance(store, RunStore) or not isinstance(store, RunEventLog):
        raise UsageError(
            "store must be a store of agent_sync.stores that keeps event logs "
            f"(SQLiteRunStore, RedisRunStore), got {type(store).__name__}"
        )
    return store


_config: Config | None = None


def set_config(config: Config | None) -> None:
    """Record this process's configuration (``None``: forget it, for tests)."""
    global _config
    _config = config


def configured() -> Config:
    """This process's configuration.

    Raises:
        UsageError: ``configure`` was not called.
    """
    config = _config
    if config is None:
        raise UsageError(
            "agent_sync.celery.configure(make_agent) was not called in this worker "
            "(call it in the Celery app's module, at import)"
        )
    return config


def current() -> Config | None:
    """This process's configuration, if any."""
    return _config
