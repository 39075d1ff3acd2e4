"""Hooks: user objects the run calls around each model call and each tool call.

Pass them as ``Agent(model, hooks=[...])``. A hook is any object with any of these methods
(each takes one frozen event object; missing methods are skipped, found once per run)::

    class AuditHook:
        def before_model_call(self, event: BeforeModelCall) -> None: ...
        def after_model_call(self, event: AfterModelCall) -> None: ...
        def before_tool_call(self, event: BeforeToolCall) -> Approve | Deny | None: ...
        def after_tool_call(self, event: AfterToolCall) -> None: ...

Rules:

* Hooks run in the loop's thread (the thread iterating ``invoke``/``stream``/``steps``),
  in the order given, never concurrently with each other for one run. A slow hook delays
  the run; ``cancel()`` still interrupts the model call and the tools, but not a hook.
* ``before_tool_call`` may return :class:`~agent_sync.Deny` (the call is answered with an
  error ``toolResult`` carrying the reason and never runs) or
  :class:`~agent_sync.Approve` with ``input=`` (the tool runs with that input, checked
  against its schema; the history keeps what the model asked). ``None`` or ``Approve()``
  lets the call run. With several hooks the first ``Deny`` wins; later hooks see the input
  an earlier hook replaced.
* A hook that raises fails the run: ``invoke`` (or the stream's iteration) raises
  :class:`HookError` with the hook's exception as ``__cause__``, after the history has
  been left valid (every ``toolUse`` answered).
* Event objects are frozen; the messages, tool uses and results they carry are the run's
  own: read them, do not change them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .errors import HookError
from .messages import Message, ToolResult, ToolUse, Usage

__all__ = [
    "AfterModelCall",
    "AfterToolCall",
    "BeforeModelCall",
    "BeforeToolCall",
    "Hook",
    "HookError",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class BeforeModelCall:
    """A model call is about to be sent."""

    run_id: str
    """The run."""
    cycle: int
    """The model call's number in the run, from 1."""
    messages: tuple[Message, ...]
    """The history the model will see."""
    model: Any
    """The model object."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AfterModelCall:
    """A model call ended: with a message, or cut short (cancel, error)."""

    run_id: str
    """The run."""
    cycle: int
    """The model call's number in the run, from 1."""
    message: Message | None
    """The assistant message added to the history; ``None`` if the call failed or was
    cancelled."""
    stop_reason: str | None
    """The model's stop reason, ``None`` if the call did not finish."""
    usage: Usage | None
    """Token usage of this call, if reported."""
    error: BaseException | None
    """What ended the call early (a ``ModelError``, a cancel), else ``None``."""
    duration_s: float
    """Wall time of the call, retries and back-off included."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BeforeToolCall:
    """A tool call is about to run (return ``Deny``/``Approve(input=...)`` to change that)."""

    run_id: str
    """The run."""
    cycle: int
    """The number of the model call that asked for the tool."""
    tool_use: ToolUse
    """The model's call: ``toolUseId``, ``name``, ``input`` (as replaced by earlier hooks)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AfterToolCall:
    """A tool call has its result (it ran, failed, was denied or was cancelled)."""

    run_id: str
    """The run."""
    cycle: int
    """The number of the model call that asked for the tool."""
    tool_use: ToolUse
    """The model's call."""
    result: ToolResult
    """What was recorded in the history for it."""
    duration_s: float
    """Wall time from start to result (0 for a call that never ran)."""


class Hook(Protocol):
    """Documentation type: a hook implements any subset of these methods."""

    def before_model_call(self, event: BeforeModelCall) -> None: ...

    def after_model_call(self, event: AfterModelCall) -> None: ...

    def before_tool_call(self, event: BeforeToolCall) -> Any: ...

    def after_tool_call(self, event: AfterToolCall) -> None: ...
