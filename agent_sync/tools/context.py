"""What a running tool can know about its invocation, and how it cooperates with cancel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..cancel import CancelScope
from ..messages import ToolUse

if TYPE_CHECKING:
    import threading

__all__ = ["ToolContext"]


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Passed to a tool that declares a parameter annotated ``ToolContext``.

    A long tool should check :attr:`cancelled` (or sleep with :meth:`wait`) so that
    ``agent.cancel()`` stops it promptly; a tool that does not is given a grace period,
    then abandoned (its late result is discarded, never written into the history).

    Example::

        @tool
        def crawl(url: str, context: ToolContext) -> str:
            for page in pages(url):
                if context.cancelled:
                    return "stopped early"
                ...

    Attributes:
        tool_use: The model's call (``toolUseId``, ``name``, ``input``).
        agent: The :class:`~agent_sync.Agent` running the tool. Do not call its ``invoke``
            from the tool: the agent is busy until the tool returns.
    """

    tool_use: ToolUse
    agent: Any
    _scope: CancelScope

    @property
    def cancelled(self) -> bool:
        """Whether the invocation has been cancelled (or timed out)."""
        return self._scope.cancelled

    @property
    def cancel_event(self) -> threading.Event:
        """The invocation's cancel event, to pass to anything that waits on an Event."""
        return self._scope.event

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking at once on cancel.

        Returns:
            ``True`` if the invocation was cancelled (stop working), ``False`` on timeout.
        """
        return self._scope.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~agent_sync.cancel.CancelledError` if cancelled.

        The loop records the call as cancelled; nothing else needs to catch it.
        """
        self._scope.raise_if_cancelled()
