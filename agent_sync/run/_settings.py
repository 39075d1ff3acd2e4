"""A run's settings: the agent's configuration, checked once when the agent is built
(:func:`agent_settings`), and what one call changes in it (:func:`call_settings`: its
``cache``, ``deps``, ``params`` and ``output_type``). Immutable: a run holds the settings it
started with whatever happens to the agent meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from .._guardrails._set import GuardrailSet, checked_guardrails
from .._limits import Budget, checked_budget
from .._run_state import OwnerLostPolicy
from ..errors import UsageError
from ..messages import Message, ToolSpec, Usage
from ..models.base import CacheMode, Model
from ..output._checks import checked_output_retries, checked_output_type
from ..retry import RetryPolicy
from ..tools._registry import ToolSource, collect_tools
from ..tools.decorator import Tool
from ..tools.executor import ExecutorKind

if TYPE_CHECKING:
    from ..output import OutputSpec
    from ..stores._protocol import RunStore
    from ._context import RunContext

__all__ = [
    "UNSET",
    "ContextShaper",
    "RunSettings",
    "Unset",
    "agent_settings",
    "call_settings",
    "check_cache",
]


class ContextShaper(Protocol):
    """What the model step asks of the agent's context policy: the run sits below the
    policies (``agent_sync.context``'s keeper implements this and reads the run's context),
    so the run names only what it calls."""

    def view(self, ctx: RunContext) -> list[Message]:
        """The messages to send for this call (a new list, never the history itself)."""
        ...

    def observe(self, ctx: RunContext, sent: Sequence[Message], usage: Usage | None) -> None:
        """Learn from the usage the provider reported for ``sent``."""
        ...

    def shrink(self, sent: Sequence[Message]) -> list[Message] | None:
        """A smaller valid view after the provider refused ``sent`` as too long, or
        ``None`` if it cannot shrink."""
        ...

    def fresh(self, store: RunStore | None, conversation_id: str | None) -> ContextShaper:
        """The same policy for another conversation, knowing nothing yet (a policy learns
        per conversation: a sub-agent call's child gets its own)."""
        ...


class Unset:
    """Type of :data:`UNSET`: "not given", where ``None`` is a meaningful value."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The agent's configuration, as a run needs it (immutable)."""

    model: Model
    tools: dict[str, Tool[Any]]
    tool_specs: tuple[ToolSpec, ...]
    system_prompt: str | None
    max_cycles: int
    tool_executor: ExecutorKind
    max_tool_workers: int
    tool_grace_period: float
    retry: RetryPolicy
    params: dict[str, Any]
    cache: CacheMode | None = None
    hooks: tuple[object, ...] = ()
    trace_content: bool = False
    conversation_id: str | None = None
    approval_timeout: float | None = None
    deps: Any = None  # the run's ToolContext.deps (process-local: never in a RunState)
    output: OutputSpec | None = None  # the output type (structured output), if any
    output_retries: int = 2
    context: ContextShaper | None = None  # the context policy, with what it learned
    on_owner_lost: OwnerLostPolicy = "fail"  # what a store does when the run's owner dies
    budget: Budget | None = None  # the usage limits, checked (with the model's price)
    name: str = "agent"  # the agent's name (tracing's gen_ai.agent.name)
    guardrails: GuardrailSet | None = None  # None: none (nothing added per chunk)


def agent_settings(
    model: Model,
    *,
    tools: Sequence[Tool[Any] | Callable[..., Any]],
    system_prompt: str | None,
    max_cycles: int,
    tool_executor: ExecutorKind,
    max_tool_workers: int,
    tool_grace_period: float,
    retry: RetryPolicy | None,
    params: Mapping[str, Any] | None,
    cache: CacheMode | None,
    hooks: Sequence[object],
    trace_content: bool,
    approval_timeout: float | None,
    conversation_id: str | None,
    deps: Any,
    output_type: object,
    output_retries: int,
    context: ContextShaper | None,
    tool_sources: list[ToolSource],
    on_owner_lost: OwnerLostPolicy = "fail",
    usage_limits: object = None,
    name: str = "agent",
    guardrails: object = (),
) -> RunSettings:
    """The settings of ``Agent(...)``'s arguments (see :class:`~agent_sync.Agent`); the
    tool sources among ``tools`` (MCP servers, whose tools come at each run) are put in
    ``tool_sources``.

    Raises:
        UsageError: An invalid argument, named.
    """
    if not callable(getattr(model, "stream", None)):
        raise UsageError(f"model must have a stream(request, *, cancel) method, got {model!r}")
    if max_cycles < 1:
        raise UsageError("max_cycles must be at least 1")
    if tool_executor not in ("concurrent", "sequential"):
        raise UsageError("tool_executor must be 'concurrent' or 'sequential'")
    if max_tool_workers < 1 or tool_grace_period < 0:
        raise UsageError("max_tool_workers must be >= 1 and tool_grace_period >= 0")
    check_cache(cache)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise UsageError(f"system_prompt must be a str or None, got {type(system_prompt).__name__}")
    registry = collect_tools(tools, tool_sources)
    if isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence):
        raise UsageError("hooks must be a list of hook objects")
    if approval_timeout is not None and not approval_timeout > 0:
        raise UsageError("approval_timeout must be positive (seconds) or None")
    if conversation_id is not None and (
        not isinstance(conversation_id, str) or not conversation_id.strip()
    ):
        raise UsageError("conversation_id must be a non-empty str")
    if on_owner_lost not in ("fail", "resume"):
        raise UsageError(f"on_owner_lost must be 'fail' or 'resume', got {on_owner_lost!r}")
    if not isinstance(name, str) or not name.strip():
        shown = repr(name) if isinstance(name, str) else type(name).__name__
        raise UsageError(f"name must be a non-empty str (the agent's name), got {shown}")
    return RunSettings(
        model=model,
        tools=registry,
        tool_specs=tuple(t.spec for t in registry.values()),
        system_prompt=system_prompt,
        max_cycles=max_cycles,
        tool_executor=tool_executor,
        max_tool_workers=max_tool_workers,
        tool_grace_period=tool_grace_period,
        retry=retry or RetryPolicy(),
        params=_checked_params(params),
        cache=cache,
        hooks=tuple(hooks),
        trace_content=bool(trace_content),
        approval_timeout=approval_timeout,
        conversation_id=conversation_id,
        deps=deps,
        output=checked_output_type(output_type),
        output_retries=checked_output_retries(output_retries),
        context=context,
        on_owner_lost=on_owner_lost,
        budget=checked_budget(usage_limits, model),
        name=name,
        guardrails=checked_guardrails(guardrails),
    )


def call_settings(
    settings: RunSettings,
    *,
    cache: CacheMode | None | Unset = UNSET,
    deps: Any = UNSET,
    params: Mapping[str, Any] | None = None,
    output_type: object = UNSET,
    usage_limits: object = UNSET,
    guardrails: object = None,
) -> RunSettings:
    """The settings of one call: the agent's, with the call's ``cache``, ``deps``,
    ``output_type`` and ``usage_limits`` if given, its ``params`` merged over the
    agent's (for every model call of the run) and its ``guardrails`` added to the agent's.

    Raises:
        UsageError: An invalid argument, named.
    """
    changes: dict[str, Any] = {}
    if not isinstance(cache, Unset):
        check_cache(cache)
        changes["cache"] = cache
    if not isinstance(deps, Unset):
        changes["deps"] = deps
    if params is not None:
        changes["params"] = {**settings.params, **_checked_params(params)}
    if not isinstance(output_type, Unset):
        changes["output"] = checked_output_type(output_type)
    if not isinstance(usage_limits, Unset):
        changes["budget"] = checked_budget(usage_limits, settings.model)
    if guardrails is not None:
        changes["guardrails"] = checked_guardrails(guardrails, settings.guardrails)
    return replace(settings, **changes) if changes else settings


def check_cache(cache: object) -> None:
    """Refuse anything but ``None``, ``"short"`` or ``"long"``."""
    if cache not in (None, "short", "long"):
        raise UsageError(f"cache must be None, 'short' or 'long', got {cache!r}")


def _checked_params(params: object) -> dict[str, Any]:
    """A copy of model ``params`` (a mapping of names to values; ``None``: none).

    Raises:
        UsageError: ``params`` is not a mapping with str keys.
    """
    if params is None:
        return {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise UsageError(
            f"params must be a dict of model parameters, e.g. {{'temperature': 0}}, got "
            f"{type(params).__name__}"
        )
    return dict(params)
