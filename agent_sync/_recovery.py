"""Recovery: lost runs (their owner died, ``on_owner_lost="resume"``) go on in this process.

:func:`recover` is one pass (``store.recover``); :func:`keep_recovering` registers a
``make_agent`` with the store's watcher in this process, which then recovers lost runs as
their leases expire (the chat routes and ``agent_sync.celery.configure`` register theirs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .agent import Agent
    from .stores._event_log import EventLogStore

__all__ = ["keep_recovering", "recover"]

MakeAgent = Callable[[str], "Agent"]


def recover(store: EventLogStore, make_agent: MakeAgent, *, limit: int | None = None) -> list[str]:
    """Claim and resume ``store``'s lost runs (at most ``limit``); return their ids."""
    raise NotImplementedError  # the lead lands this


def keep_recovering(store: EventLogStore, make_agent: MakeAgent) -> None:
    """Have this process's watcher of ``store`` recover its lost runs from now on
    (idempotent per ``(store, make_agent)``)."""
    raise NotImplementedError  # the lead lands this
