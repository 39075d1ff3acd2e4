"""An MCP server's tool as an agent_sync :class:`~agent_sync.tools.Tool`."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types

from ..errors import UsageError
from ..tools.context import ToolContext
from ..tools.decorator import ApprovalGate, Tool

if TYPE_CHECKING:
    from .server import MCPServer

__all__ = ["MCPTool", "tool_name"]

logger = logging.getLogger(__name__)

_OPEN_OBJECT: dict[str, Any] = {"type": "object"}

_VALID_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what every provider accepts
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS = 10  # hex digits of the suffix: 40 bits


def tool_name(name: str, prefix: str) -> str:
    """The name the model sees for the server's tool ``name``: ``prefix + name`` itself when
    that is a valid tool name (ASCII letters, digits, ``_``, ``-``; 64 at most), else a valid
    name made from it that no other name maps to.

    A name that had to change gets its characters outside the rule replaced by ``_``, is
    cut to fit, and ends with ``_`` and a hash of the whole original (``a.b`` ->
    ``a_b_<10 hex>``), so ``a.b``, ``a_b`` and two names of only non-ASCII letters stay
    apart. The hash is SHA-256: the same on every connection and in every process, so a
    stored history's ``toolUse`` names still resolve.
    """
    full = prefix + name
    if _VALID_NAME.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    cleaned = _INVALID_CHAR.sub("_", full)[: 64 - _HASH_CHARS - 1]
    return f"{cleaned}_{digest}"


class MCPTool(Tool[Any]):
    """A tool of an :class:`~agent_sync.mcp.MCPServer`: calling it calls the server.

    The model sees the server's name (with the prefix, if any; mapped one to one to a
    valid name if it is not one: :func:`tool_name`), description and input
    schema unchanged. In a run, the call is a task on the server's connection that a cancel
    of the run cancels (the server is told); called directly (``tool(city="Oslo")``) it
    blocks until the server answers or ``call_timeout`` passes.

    Attributes:
        server: The server the tool belongs to.
        mcp_name: The tool's name on the server.
    """

    def __init__(
        self,
        server: MCPServer,
        spec: types.Tool,
        *,
        name: str,
        requires_approval: ApprovalGate,
    ) -> None:
        self.server = server
        self.mcp_name = spec.name
        mcp_name = spec.name

        def call(**arguments: Any) -> Any:
            return server._call(mcp_name, arguments, None)

        call.__name__ = name
        description = spec.description or spec.title or spec.name
        schema = dict(spec.input_schema)
        try:
            super().__init__(
                call,
                name=name,
                description=description,
                requires_approval=requires_approval,
                input_schema=schema,
            )
        except UsageError as exc:
            # The server checks its own input; a schema our checker cannot compile (a
            # format it does not know, another draft's keyword) still reaches the model.
            logger.warning(
                "server=<%s>, tool=<%s> | input schema not checked here: %s",
                server.name,
                spec.name,
                exc,
            )
            super().__init__(
                call,
                name=name,
                description=description,
                requires_approval=requires_approval,
                input_schema=_OPEN_OBJECT,
            )
            self.input_schema = schema
        # The server says a second call has no more effect than the first: a run resumed
        # after its worker died may call it again (docs/recovery.md).
        annotations = spec.annotations
        self.idempotent = bool(annotations is not None and annotations.idempotent_hint)

    def call_with(self, arguments: dict[str, Any], context: ToolContext[Any]) -> Any:
        """Call the server in this worker thread with the checked input; the run's cancel
        cancels the call."""
        return self.server._call(self.mcp_name, arguments, context)

    def direct_ready(self) -> bool:
        """Whether :meth:`start_direct` can run the call now: the server is connected (a
        connect blocks, so it is left to :meth:`call_with` in a worker thread)."""
        return self.server.connected

    def start_direct(
        self,
        arguments: dict[str, Any],
        context: ToolContext[Any],
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        """Start the call and return at once: the run's tool batch needs no worker thread
        for it. ``done(value, error)`` gets what :meth:`call_with` would return or raise,
        exactly once: from the connection's loop thread, or at once from the cancelling
        thread when the run is cancelled (the server is sent ``notifications/cancelled``)."""
        self.server._start(self.mcp_name, arguments, context, done)

    def __repr__(self) -> str:
        return f"<MCPTool {self.name} of {self.server.name}>"
