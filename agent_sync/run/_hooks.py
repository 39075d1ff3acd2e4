"""Calling the user's hooks (and the tracer) from the loop: one place for the hook rules.

The rules (documented for users in :mod:`agent_sync.hooks`): hooks run in the loop's
thread, in order; a hook that raises fails the run with :class:`~agent_sync.hooks.HookError`
(the steps' cleanup leaves the history valid); ``before_tool_call`` combines as "first
``Deny`` wins, a replaced input is what later hooks see". A hook called while the call has
already failed (``after_model_call`` with ``error``) cannot fail the run a second time: its
exception is logged. The tracer never raises (``agent_sync._tracing`` guarantees it).

Each hook's methods are looked up once, when the run starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from .._decisions import Approve, Deny
from ..errors import HookError
from ..hooks import AfterModelCall, AfterToolCall, BeforeModelCall, BeforeToolCall
from ..messages import ContentBlock, ToolUse, Usage

if TYPE_CHECKING:
    from .._tracing import RunTracer

__all__ = ["HookRunner"]

logger = logging.getLogger(__name__)

_METHODS = ("before_model_call", "after_model_call", "before_tool_call", "after_tool_call")


class HookRunner:
    """The hooks and tracer of one run. Called from the loop's thread only."""

    __slots__ = ("_methods", "tracer")

    def __init__(self, hooks: Sequence[object], tracer: RunTracer | None) -> None:
        self.tracer = tracer
        self._methods: dict[str, list[tuple[object, Callable[[Any], Any]]]] = {
            name: [
                (hook, getattr(hook, name)) for hook in hooks if callable(getattr(hook, name, None))
            ]
            for name in _METHODS
        }

    def run_started(self, prompt: list[ContentBlock] | None) -> None:
        if self.tracer is not None:
            self.tracer.run_started(prompt)

    def run_ended(
        self,
        *,
        stop_reason: str | None,
        cancel_reason: str | None,
        usage: Usage,
        error: BaseException | None,
    ) -> None:
        if self.tracer is not None:
            self.tracer.run_ended(
                stop_reason=stop_reason, cancel_reason=cancel_reason, usage=usage, error=error
            )

    def before_model_call(self, event: BeforeModelCall) -> None:
        if self.tracer is not None:
            self.tracer.model_call_started(event)
        self._call("before_model_call", event)

    def after_model_call(self, event: AfterModelCall) -> None:
        if self.tracer is not None:
            self.tracer.model_call_ended(event)
        self._call("after_model_call", event)

    def model_call_failed(self, event: AfterModelCall) -> None:
        """``after_model_call`` for a call that failed or was cancelled: never raises."""
        try:
            self.after_model_call(event)
        except HookError:
            logger.warning("a hook raised in after_model_call of a failed call", exc_info=True)

    def before_tool_call(self, event: BeforeToolCall) -> Approve | Deny | None:
        """Ask every hook in turn; the first ``Deny`` wins, replaced input carries on."""
        replaced: dict[str, Any] | None = None
        for hook, method in self._methods["before_tool_call"]:
            decision = self._guarded(hook, "before_tool_call", method, event)
            if decision is None or decision is True:
                continue
            if decision is False:
                return Deny()
            if isinstance(decision, Deny):
                return decision
            if isinstance(decision, Approve):
                if decision.input is not None:
                    if not isinstance(decision.input, dict):
                        raise HookError(
                            f"{_name(hook)}.before_tool_call returned Approve(input=...) with a "
                            f"{type(decision.input).__name__}; the input must be a dict",
                            hook=hook,
                            method="before_tool_call",
                        )
                    replaced = decision.input
                    tool_use: ToolUse = {**event.tool_use, "input": replaced}
                    event = BeforeToolCall(
                        run_id=event.run_id, cycle=event.cycle, tool_use=tool_use
                    )
                continue
            raise HookError(
                f"{_name(hook)}.before_tool_call returned {type(decision).__name__}; "
                "return None, Approve(...) or Deny(...)",
                hook=hook,
                method="before_tool_call",
            )
        return Approve(input=replaced) if replaced is not None else None

    def model_call_scope(self, cycle: int) -> AbstractContextManager[None]:
        """A block in which the call's tracing span is current (see ``_tracing``)."""
        if self.tracer is None:
            return nullcontext()
        return self.tracer.model_call_scope(cycle)

    def tool_started(self, tool_use: ToolUse, cycle: int) -> None:
        if self.tracer is not None:
            self.tracer.tool_started(tool_use, cycle)

    def after_tool_call(self, event: AfterToolCall) -> None:
        if self.tracer is not None:
            self.tracer.tool_ended(event)
        self._call("after_tool_call", event)

    def _call(self, name: str, event: object) -> None:
        for hook, method in self._methods[name]:
            self._guarded(hook, name, method, event)

    @staticmethod
    def _guarded(hook: object, name: str, method: Callable[[Any], Any], event: object) -> Any:
        try:
            return method(event)
        except Exception as exc:
            raise HookError(
                f"hook {_name(hook)}.{name} raised {type(exc).__name__}: {exc}",
                hook=hook,
                method=name,
            ) from exc


def _name(hook: object) -> str:
    return type(hook).__qualname__
