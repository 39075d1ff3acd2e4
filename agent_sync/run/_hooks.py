"""Calling the run's hooks from the loop: one place for the hook rules.

A run always has a :class:`HookRunner` (:func:`run_hooks`): the user's hooks, and the run's
tracer as one more hook (a :class:`RunObserver`, called before them, so a call's span is
open while a hook sees the call). A run with neither shares :data:`NO_HOOKS`, and every
method of a runner with no listener for it returns without building its event: hooks cost
nothing when there are none.

The rules (documented for users in :mod:`agent_sync.hooks`): hooks run in the loop's
thread, in order; a hook that raises fails the run with :class:`~agent_sync.hooks.HookError`
(the steps' cleanup leaves the history valid); ``before_tool_call`` combines as "first
``Deny`` wins, a replaced input is what later hooks see". A hook called while the call has
already failed (``after_model_call`` with ``error``) cannot fail the run a second time: its
exception is logged. An observer never raises (:mod:`agent_sync._tracing` guarantees it
for the tracer).

Each hook's methods are looked up once, when the run starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from .._decisions import Approve, Deny
from .._tracing import tracing_hooks
from ..errors import HookError
from ..hooks import AfterModelCall, AfterToolCall, BeforeModelCall, BeforeToolCall
from ..messages import ContentBlock, Message, MessageStopEvent, ToolResult, ToolUse, Usage

if TYPE_CHECKING:
    from ._context import RunSettings

__all__ = ["NO_HOOKS", "HookRunner", "RunObserver", "run_hooks"]

logger = logging.getLogger(__name__)

_Methods = tuple[tuple[object, Callable[[Any], Any]], ...]

_NO_SCOPE: AbstractContextManager[None] = nullcontext()  # stateless: one for every call


class RunObserver(Protocol):
    """A hook that sees the whole run (the tracer): the user's hook methods, plus the run's
    start and end, each tool's start, and a block around the start of each model call.
    Its methods never raise."""

    def run_started(self, prompt: list[ContentBlock] | None) -> None: ...

    def run_ended(
        self,
        *,
        stop_reason: str | None,
        cancel_reason: str | None,
        usage: Usage,
        error: BaseException | None,
    ) -> None: ...

    def before_model_call(self, event: BeforeModelCall) -> None: ...

    def after_model_call(
        self, event: AfterModelCall, response: MessageStopEvent | None = None
    ) -> None: ...

    def model_call_scope(self, cycle: int) -> AbstractContextManager[None]: ...

    def model_answered(self, cycle: int, model: object) -> None: ...

    def tool_started(self, tool_use: ToolUse, cycle: int) -> None: ...

    def after_tool_call(self, event: AfterToolCall) -> None: ...


class HookRunner:
    """The hooks of one run (observers first). Called from the loop's thread only.

    The methods take an event's fields and build the event only if a hook listens.
    """

    __slots__ = ("_after_model", "_after_tool", "_before_model", "_before_tool", "_observers")

    def __init__(self, hooks: Sequence[object] = (), observers: Sequence[RunObserver] = ()) -> None:
        self._observers = tuple(observers)
        listeners = (*self._observers, *hooks)
        self._before_model = _methods(listeners, "before_model_call")
        self._after_model = _methods(hooks, "after_model_call")  # observers: called apart
        self._before_tool = _methods(hooks, "before_tool_call")
        self._after_tool = _methods(listeners, "after_tool_call")

    def run_started(self, prompt: list[ContentBlock] | None) -> None:
        for observer in self._observers:
            observer.run_started(prompt)

    def run_ended(
        self,
        *,
        stop_reason: str | None,
        cancel_reason: str | None,
        usage: Usage,
        error: BaseException | None,
    ) -> None:
        for observer in self._observers:
            observer.run_ended(
                stop_reason=stop_reason, cancel_reason=cancel_reason, usage=usage, error=error
            )

    def before_model_call(
        self, *, run_id: str, cycle: int, messages: Sequence[Message], model: Any
    ) -> None:
        if self._before_model:
            event = BeforeModelCall(
                run_id=run_id, cycle=cycle, messages=tuple(messages), model=model
            )
            _call(self._before_model, "before_model_call", event)

    def after_model_call(
        self,
        *,
        run_id: str,
        cycle: int,
        message: Message | None,
        stop_reason: str | None,
        usage: Usage | None,
        duration_s: float,
        error: BaseException | None = None,
        response: MessageStopEvent | None = None,
    ) -> None:
        """``response``: the stream's ``messageStop`` (the provider's own stop reason,
        response id and model), for the observers only: hooks see the event."""
        if self._after_model or self._observers:
            event = AfterModelCall(
                run_id=run_id,
                cycle=cycle,
                message=message,
                stop_reason=stop_reason,
                usage=usage,
                error=error,
                duration_s=duration_s,
            )
            for observer in self._observers:
                observer.after_model_call(event, response)
            _call(self._after_model, "after_model_call", event)

    def model_call_failed(
        self,
        *,
        run_id: str,
        cycle: int,
        usage: Usage | None,
        error: BaseException,
        duration_s: float,
    ) -> None:
        """``after_model_call`` for a call that failed or was cancelled: never raises."""
        try:
            self.after_model_call(
                run_id=run_id,
                cycle=cycle,
                message=None,
                stop_reason=None,
                usage=usage,
                duration_s=duration_s,
                error=error,
            )
        except HookError:
            logger.warning("a hook raised in after_model_call of a failed call", exc_info=True)

    def model_call_scope(self, cycle: int) -> AbstractContextManager[None]:
        """A block in which the observers' context for the call is current (the tracer's
        ``chat`` span, so that spans a provider's SDK makes nest under it)."""
        if not self._observers:
            return _NO_SCOPE
        if len(self._observers) == 1:  # the tracer alone (the usual): its own block
            return self._observers[0].model_call_scope(cycle)
        return _all_scopes(self._observers, cycle)

    def model_answered(self, cycle: int, model: object) -> None:
        """The call's answer began, given by ``model`` (the model called, or the member of a
        chain that answered: :func:`~agent_sync.models._answer.answering_model`)."""
        for observer in self._observers:
            observer.model_answered(cycle, model)

    def before_tool_call(
        self, *, run_id: str, cycle: int, tool_use: ToolUse
    ) -> Approve | Deny | None:
        """Ask every hook in turn; the first ``Deny`` wins, replaced input carries on."""
        if not self._before_tool:
            return None
        event = BeforeToolCall(run_id=run_id, cycle=cycle, tool_use=tool_use)
        replaced: dict[str, Any] | None = None
        for hook, method in self._before_tool:
            decision = _guarded(hook, "before_tool_call", method, event)
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
                    tool_use = {**event.tool_use, "input": replaced}
                    event = BeforeToolCall(run_id=run_id, cycle=cycle, tool_use=tool_use)
                continue
            raise HookError(
                f"{_name(hook)}.before_tool_call returned {type(decision).__name__}; "
                "return None, Approve(...) or Deny(...)",
                hook=hook,
                method="before_tool_call",
            )
        return Approve(input=replaced) if replaced is not None else None

    def tool_started(self, tool_use: ToolUse, cycle: int) -> None:
        for observer in self._observers:
            observer.tool_started(tool_use, cycle)

    def after_tool_call(
        self, *, run_id: str, cycle: int, tool_use: ToolUse, result: ToolResult, duration_s: float
    ) -> None:
        if self._after_tool:
            event = AfterToolCall(
                run_id=run_id,
                cycle=cycle,
                tool_use=tool_use,
                result=result,
                duration_s=duration_s,
            )
            _call(self._after_tool, "after_tool_call", event)


def _methods(hooks: Sequence[object], name: str) -> _Methods:
    return tuple(
        (hook, getattr(hook, name)) for hook in hooks if callable(getattr(hook, name, None))
    )


def _call(methods: _Methods, name: str, event: object) -> None:
    for hook, method in methods:
        _guarded(hook, name, method, event)


def _guarded(hook: object, name: str, method: Callable[[Any], Any], event: object) -> Any:
    try:
        return method(event)
    except Exception as exc:
        raise HookError(
            f"hook {_name(hook)}.{name} raised {type(exc).__name__}: {exc}",
            hook=hook,
            method=name,
        ) from exc


@contextmanager
def _all_scopes(observers: Sequence[RunObserver], cycle: int) -> Iterator[None]:
    with ExitStack() as stack:
        for observer in observers:
            stack.enter_context(observer.model_call_scope(cycle))
        yield


def _name(hook: object) -> str:
    return type(hook).__qualname__


NO_HOOKS = HookRunner()
"""The runner of every run without hooks or tracing (it holds nothing of a run)."""


def run_hooks(run_id: str, settings: RunSettings) -> HookRunner:
    """The hook runner of a run: the agent's hooks and, when OpenTelemetry is configured,
    the run's tracer. Asked once per run, when it starts."""
    observers = tracing_hooks(
        run_id=run_id,
        model=settings.model,
        conversation_id=settings.conversation_id,
        trace_content=settings.trace_content,
        agent_name=settings.name,
        params=settings.params,
        structured=settings.output is not None,
    )
    if not settings.hooks and not observers:
        return NO_HOOKS
    return HookRunner(settings.hooks, observers)
