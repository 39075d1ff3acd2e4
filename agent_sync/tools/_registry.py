"""The agent's tools by name: ``Agent(tools=[...])`` checked and collected in one place.

An item of ``tools=`` may also be a *tool source* (an :class:`~agent_sync.mcp.MCPServer`):
an object with an ``agent_tools(cancel)`` method. Its tools are asked for by each run, as its
first act (:func:`with_sources`, with the run's cancel scope), so a source whose tool list
changes is current from the next run on, and a source that connects lazily does so in the
first run, not when the agent is built, cancellable as the rest of the run is.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

from ..cancel import CancelScope
from ..errors import UsageError
from .decorator import Tool

__all__ = ["ToolSource", "collect_tools", "with_sources"]


@runtime_checkable
class ToolSource(Protocol):
    """Something that brings tools to an agent at each run (an MCP server)."""

    def agent_tools(self, cancel: CancelScope | None = None) -> Sequence[Tool[Any]]:
        """The tools for the next run (the same objects while unchanged); a wait (a connect)
        ends with :class:`~agent_sync.cancel.CancelledError` when ``cancel`` is cancelled."""
        ...


def collect_tools(tools: object, sources: list[ToolSource] | None = None) -> dict[str, Tool[Any]]:
    """``tools`` (a list of ``@tool`` objects or plain functions) as name -> :class:`Tool`.

    Plain functions are wrapped with :class:`Tool`. Tool sources (MCP servers) are put in
    ``sources`` when it is given (read in the same pass: ``tools`` may be an iterator),
    else refused.

    Raises:
        UsageError: ``tools`` is not a list (a single function, a str, a dict...), an item
            is not a function, or two tools have one name.
    """
    if callable(tools) or isinstance(tools, (str, bytes, Mapping)) or not _iterable(tools):
        shown = getattr(tools, "__name__", None) or type(tools).__name__
        hint = f": write tools=[{shown}]" if callable(tools) else ""
        raise UsageError(
            f"tools must be a list of @tool functions, got {type(tools).__name__} {shown!r}{hint}"
        )
    registry: dict[str, Tool[Any]] = {}
    for position, item in enumerate(cast(Iterable[Any], tools)):
        if isinstance(item, ToolSource) and sources is not None:
            sources.append(item)  # its tools come at each run: with_sources
            continue
        if isinstance(item, Tool):
            wrapped = item
        elif callable(item) and not inspect.isclass(item):
            wrapped = Tool(item)
        else:
            raise UsageError(
                f"tools[{position}] must be a @tool or a function, got {type(item).__name__}"
            )
        if wrapped.name in registry:
            raise UsageError(f"two tools are named {wrapped.name!r}")
        registry[wrapped.name] = wrapped
    return registry


def with_sources(
    registry: dict[str, Tool[Any]],
    sources: Sequence[ToolSource],
    cancel: CancelScope | None = None,
) -> dict[str, Tool[Any]]:
    """``registry`` with every source's current tools added (the sources may connect; a
    cancel of ``cancel`` ends that wait).

    Raises:
        UsageError: A source's tool has the name of another tool.
        CancelledError: ``cancel`` was cancelled while a source connected.
    """
    merged = dict(registry)
    for source in sources:
        for item in source.agent_tools(cancel):
            if item.name in merged:
                raise UsageError(
                    f"two tools are named {item.name!r} (one from {source!r}): take that "
                    "server's tools with server.tools(prefix=...) instead"
                )
            merged[item.name] = item
    return merged


def _iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True
