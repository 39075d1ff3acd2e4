"""The ``@tool`` decorator: a typed Python function becomes a tool the model can call."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeAlias, TypeVar, Union, overload

from ..errors import UsageError
from ..messages import ToolSpec, ToolUse
from ._schema import input_schema, parse_docstring, validate
from .context import ToolContext

__all__ = ["Tool", "tool"]

R = TypeVar("R")

ApprovalGate: TypeAlias = Union[bool, Callable[[ToolUse, ToolContext], bool]]
"""``requires_approval``: ``True`` gates every call; a callable ``(tool_use, context) ->
bool`` gates the calls it returns true for (``tool_use`` is the ``ToolUse`` body)."""

_NAME_RULE = "letters, digits, '_' or '-', at most 64 characters"


class Tool(Generic[R]):
    """A function the model can call, with its name, description and input schema.

    Calling the tool object calls the function unchanged, so decorated functions stay
    usable (and testable) as plain Python.

    Attributes:
        name: Name the model calls it by.
        description: What it does, from the docstring unless overridden.
        input_schema: JSON schema of the arguments object.
        context_param: Name of the parameter that receives the :class:`ToolContext`, if any.
        requires_approval: Whether (or for which inputs) a call waits for a human decision.
        decision_schema: JSON schema of the extra fields a decision carries
            (``Approve(data=...)``), checked like tool input; ``None`` for none.
    """

    def __init__(
        self,
        fn: Callable[..., R],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: ApprovalGate = False,
        decision_schema: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        if (
            not self.name
            or len(self.name) > 64
            or not all(c.isalnum() or c in "_-" for c in self.name)
        ):
            raise UsageError(f"tool name {self.name!r} is invalid: use {_NAME_RULE}")
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:  # unresolvable forward references
            raise UsageError(f"tool {self.name}: cannot resolve type hints ({exc})") from exc
        self.context_param = next(
            (p for p, hint in hints.items() if hint is ToolContext and p != "return"), None
        )
        summary, param_docs = parse_docstring(fn.__doc__)
        self.description = description or summary or self.name
        skip = {self.context_param} if self.context_param else set()
        self.input_schema = input_schema(fn, hints, skip, param_docs)
        if not (isinstance(requires_approval, bool) or callable(requires_approval)):
            raise UsageError(
                f"tool {self.name}: requires_approval must be a bool or a callable "
                "(tool_use, context) -> bool"
            )
        if decision_schema is not None and not isinstance(decision_schema, dict):
            raise UsageError(f"tool {self.name}: decision_schema must be a JSON schema (a dict)")
        self.requires_approval: ApprovalGate = requires_approval
        self.decision_schema = decision_schema
        functools.update_wrapper(self, fn)

    @property
    def spec(self) -> ToolSpec:
        """The Converse ``toolSpec`` the model sees."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": {"json": self.input_schema},
        }

    def validate_input(self, tool_input: Any) -> list[str]:
        """Problems with ``tool_input`` against the schema, in words the model can act on."""
        return validate(tool_input, self.input_schema)

    def needs_approval(self, tool_use: ToolUse, context: ToolContext) -> bool:
        """Whether this call waits for a decision (the gate callable, if any, decides)."""
        gate = self.requires_approval
        if isinstance(gate, bool):
            return gate
        return bool(gate(tool_use, context))

    def run(self, tool_input: dict[str, Any], context: ToolContext) -> R:
        """Call the function with validated input, injecting ``context`` if it asks for it."""
        kwargs = dict(tool_input)
        if self.context_param:
            kwargs[self.context_param] = context
        return self.fn(**kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"


@overload
def tool(fn: Callable[..., R], /) -> Tool[R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalGate = False,
    decision_schema: dict[str, Any] | None = None,
) -> Callable[[Callable[..., R]], Tool[R]]: ...


def tool(
    fn: Callable[..., R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalGate = False,
    decision_schema: dict[str, Any] | None = None,
) -> Tool[R] | Callable[[Callable[..., R]], Tool[R]]:
    """Make a function a tool: ``@tool`` or ``@tool(name=..., description=...)``.

    The description is the docstring's text before its sections; each parameter's
    description comes from the ``Args:`` section; types come from the annotations
    (``str``, ``int``, ``float``, ``bool``, ``list[...]``, ``dict``, ``Optional``,
    ``Literal``); parameters with defaults are optional. A parameter annotated
    :class:`ToolContext` receives the context and is hidden from the model.

    Example::

        @tool
        def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
            '''Current weather for a city.

            Args:
                city: City name, e.g. "Oslo".
                unit: Temperature unit.
            '''

    ``@tool(requires_approval=True)`` (or a callable ``(tool_use, context) -> bool``)
    pauses the run before such a call until ``agent.resume(decisions)``;
    ``decision_schema=`` describes extra decision fields (see ``docs/approvals.md``).

    Raises:
        UsageError: An unsupported annotation, ``*args``, or an invalid name.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "requires_approval": requires_approval,
        "decision_schema": decision_schema,
    }
    if fn is not None:
        if not callable(fn) or inspect.isclass(fn):
            raise UsageError("@tool decorates a function")
        return Tool(fn, **options)
    return lambda f: Tool(f, **options)
