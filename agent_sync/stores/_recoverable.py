"""``store.recover(make_agent)``: every store of the package has it, from this mixin.

Recovering a run takes an agent (``make_agent`` builds one), which lives above the stores:
the work is :func:`agent_sync.stores._recovery.recover`, which names the agent by the one
verb it calls (:class:`~agent_sync.stores._recovery.RecoveringAgent`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._recovery import recover

__all__ = ["Recoverable"]


class Recoverable:
    """Gives a store :meth:`recover` (see :meth:`~agent_sync.stores.RunStore.recover`)."""

    def recover(self, make_agent: Callable[[str], Any], *, limit: int | None = None) -> list[str]:
        """Resume the store's lost runs now, in this process; return the ids resumed.

        One pass over ``lost_runs(limit=limit)``: each run is claimed (one winner among
        racing recoverers) and driven to its end in a thread of its own by an agent that
        ``make_agent(conversation_id)`` builds on this store. Registers nothing: for a cron
        job or a worker's start. See ``docs/recovery.md``.
        """
        return recover(self, make_agent, limit=limit)  # type: ignore[arg-type]
