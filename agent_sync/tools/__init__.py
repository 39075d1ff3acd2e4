"""Tools: the ``@tool`` decorator, the context a tool receives, and the executors."""

from .context import ToolContext
from .decorator import Tool, tool
from .executor import ExecutorKind

__all__ = ["ExecutorKind", "Tool", "ToolContext", "tool"]
