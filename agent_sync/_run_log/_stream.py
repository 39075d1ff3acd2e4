"""What the run log needs of a run's events: the stream it publishes, and the reason a
run is cancelled with when its last reader went away (the web's SSE re-exports both)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

from ..events import AgentEvent

__all__ = ["DISCONNECT_REASON", "RunStream"]

DISCONNECT_REASON: Final = "client disconnected"
"""The ``cancel_reason`` of a run stopped because its SSE client went away."""


class RunStream(Iterator[AgentEvent], Protocol):
    """One run's events (``agent_sync.AgentStream`` is one)."""

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel this run only, from any thread."""
        ...

    def close(self) -> None:
        """Stop the run if it is still going and release the agent."""
        ...
