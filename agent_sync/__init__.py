"""agent_sync: LLM agents for plain blocking Python, with a cancel() that really stops.

``agent.invoke()`` runs the model -> tools loop to the end; ``agent.cancel()``, from any
thread at any moment, stops it within milliseconds and leaves the history valid.
"""

import logging

from ._decisions import ApprovalRequest, Approve, Deny
from ._limits import UsageLimits
from ._repair import repair_history
from ._version import __version__ as __version__
from .agent import Agent, AgentStream, Prompt
from .cancel import CancelledError, CancelScope, CancelToken
from .errors import (
    AgentSyncError,
    ConcurrentInvocationError,
    ContextWindowOverflowError,
    HookError,
    ModelError,
    ModelThrottledError,
    ToolError,
    UsageError,
)
from .events import AgentEvent
from .messages import Message, validate_history
from .result import AgentMetrics, AgentResult
from .retry import RetryPolicy
from .run import Run, RunSnapshot, RunState, Step
from .tools import Tool, ToolContext, tool

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentMetrics",
    "AgentResult",
    "AgentStream",
    "AgentSyncError",
    "ApprovalRequest",
    "Approve",
    "CancelScope",
    "CancelToken",
    "CancelledError",
    "ConcurrentInvocationError",
    "ContextWindowOverflowError",
    "Deny",
    "HookError",
    "Message",
    "ModelError",
    "ModelThrottledError",
    "Prompt",
    "RetryPolicy",
    "Run",
    "RunSnapshot",
    "RunState",
    "Step",
    "Tool",
    "ToolContext",
    "ToolError",
    "UsageError",
    "UsageLimits",
    "repair_history",
    "tool",
    "validate_history",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
