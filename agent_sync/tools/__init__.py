"""Tools: the ``@tool`` decorator, the context a tool receives, and the executors.

Also the process-wide cap on abandoned tool threads (tools that ignored a cancel and
outlived the grace period): :func:`abandoned_tool_threads`, :func:`max_abandoned_tool_threads`,
:func:`set_max_abandoned_tool_threads`.
"""

from ._abandoned import (
    abandoned_tool_threads,
    max_abandoned_tool_threads,
    set_max_abandoned_tool_threads,
)
from .context import ToolContext
from .decorator import Tool, tool
from .executor import ExecutorKind

__all__ = [
    "ExecutorKind",
    "Tool",
    "ToolContext",
    "abandoned_tool_threads",
    "max_abandoned_tool_threads",
    "set_max_abandoned_tool_threads",
    "tool",
]
