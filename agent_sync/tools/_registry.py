"""The agent's tools by name: ``Agent(tools=[...])`` checked and collected in one place."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any, cast

from ..errors import UsageError
from .decorator import Tool

__all__ = ["collect_tools"]


def collect_tools(tools: object) -> dict[str, Tool[Any]]:
    """``tools`` (a list of ``@tool`` objects or plain functions) as name -> :class:`Tool`.

    Plain functions are wrapped with :class:`Tool`.

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


def _iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True
