"""The ``@tool`` decorator: a typed Python function becomes a tool the model can call."""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeAlias, TypeVar, Union, overload

from .._jsonschema import Schema, compile_schema, problems
from ..errors import ToolError, UsageError
from ..messages import ToolSpec, ToolUse
from ._async import run_coroutine
from ._schema import SchemaArguments, parse_docstring
from ._signature import SignatureArguments, is_context_type, type_hints
from .context import ToolContext

__all__ = ["Tool", "tool"]

R = TypeVar("R")

ApprovalGate: TypeAlias = Union[bool, Callable[[ToolUse, ToolContext[Any]], bool]]
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
        input_schema: JSON schema of the arguments object: pydantic's, from the signature's
            types, or the ``input_schema=`` given.
        context_param: Name of the parameter that receives the :class:`ToolContext`, if any.
        requires_approval: Whether (or for which inputs) a call waits for a human decision.
        decision_schema: JSON schema of the extra fields a decision carries
            (``Approve(data=...)``), checked like tool input; ``None`` for none.
        idempotent: Whether running a call twice has the effect of running it once: a run
            resumed after its worker died (``on_owner_lost="resume"``) runs such a call
            again; any other call in flight then is answered "worker stopped; effect unknown".

    ``namespace``: names to resolve string annotations with (``from __future__ import
    annotations``) besides the function's module; by default the local names of the code
    that made the tool, so a model class local to a test function works.

    From the signature, pydantic makes the schema and validates the model's input against
    it (strictly, as JSON), and the function gets real objects. A schema you give
    (``input_schema=``, ``decision_schema=``) is checked with ``jsonschema`` (Draft 2020-12,
    every keyword), and a schema that is itself invalid is a
    :class:`~agent_sync.errors.UsageError` here, when the tool is built.
    """

    idempotent: bool = False
    """Whether a call may be run again after its worker died (``@tool(idempotent=True)``)."""

    def __init__(
        self,
        fn: Callable[..., R],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: ApprovalGate = False,
        decision_schema: dict[str, Any] | None = None,
        input_schema: dict[str, Any] | None = None,
        namespace: Mapping[str, Any] | None = None,
        idempotent: bool = False,
    ) -> None:
        if namespace is None:  # made by the caller's code: its local names count
            namespace = sys._getframe(1).f_locals
        if _is_async_generator(fn):
            raise UsageError(
                f"tool {getattr(fn, '__name__', fn)!r} is an async generator function: a tool "
                "returns its result (an async def tool may await, then return it)"
            )
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not self.name:
            raise UsageError(f"{fn!r} has no __name__: name the tool with @tool(name=...)")
        if (
            not self.name
            or len(self.name) > 64
            or not all(c.isalnum() or c in "_-" for c in self.name)
        ):
            raise UsageError(f"tool name {self.name!r} is invalid: use {_NAME_RULE}")
        hints = type_hints(fn, f"tool {self.name}", namespace)
        self.context_param = next(
            (p for p, hint in hints.items() if p != "return" and is_context_type(hint)), None
        )
        summary, param_docs = parse_docstring(fn.__doc__)
        self.description = description or summary or self.name
        skip = {self.context_param} if self.context_param else set()
        self._arguments: SignatureArguments | SchemaArguments
        if input_schema is None:
            self._arguments = SignatureArguments(fn, hints, skip, param_docs, f"tool {self.name}")
        else:
            where = f"tool {self.name}: input_schema"
            self._arguments = SchemaArguments(fn, input_schema, skip, where)
        self.input_schema: dict[str, Any] = self._arguments.schema
        if not (isinstance(requires_approval, bool) or callable(requires_approval)):
            raise UsageError(
                f"tool {self.name}: requires_approval must be a bool or a callable "
                "(tool_use, context) -> bool"
            )
        self._decision_validator: Schema | None = None
        if decision_schema is not None:
            where = f"tool {self.name}: decision_schema"
            self._decision_validator = compile_schema(decision_schema, where)
            decision_schema = json.loads(json.dumps(decision_schema))  # ours, plain JSON
        if not isinstance(idempotent, bool):
            raise UsageError(f"tool {self.name}: idempotent must be a bool, got {idempotent!r}")
        self.requires_approval: ApprovalGate = requires_approval
        self.decision_schema = decision_schema
        self.idempotent = idempotent
        functools.update_wrapper(self, fn)

    @property
    def spec(self) -> ToolSpec:
        """The Converse ``toolSpec`` the model sees."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": {"json": self.input_schema},
        }

    def parse_input(self, tool_input: Any) -> tuple[dict[str, Any] | None, list[str]]:
        """The keyword arguments the function is called with, or ``None`` and the problems.

        From the signature, pydantic validates the input and the arguments are real
        objects (a model instance, a ``datetime.date``); with an explicit
        ``input_schema=``, the input is checked against it and passed as it is. Each
        problem names its field (``input.city: expected string, got integer``); a
        parameter the function does not take is one too.
        """
        return self._arguments.parse(tool_input)

    def validate_input(self, tool_input: Any) -> list[str]:
        """Problems with ``tool_input``, in words the model can act on (``[]``: valid)."""
        return self._arguments.parse(tool_input)[1]

    def validate_decision_data(self, data: Any, schema: dict[str, Any] | None = None) -> list[str]:
        """Problems with a decision's ``data`` against ``schema`` (default: the tool's
        ``decision_schema``), each naming its field (``data.ticket: ...``)."""
        if schema is None or schema == self.decision_schema:
            validator = self._decision_validator
        else:  # a request stored by another version of the tool: its own schema rules
            validator = compile_schema(schema, f"tool {self.name}: stored decision schema")
        return [] if validator is None else problems(validator, data, "data")

    def needs_approval(self, tool_use: ToolUse, context: ToolContext[Any]) -> bool:
        """Whether this call waits for a decision (the gate callable, if any, decides)."""
        gate = self.requires_approval
        if isinstance(gate, bool):
            return gate
        return bool(gate(tool_use, context))

    def run(self, tool_input: dict[str, Any], context: ToolContext[Any]) -> R:
        """Validate ``tool_input``, then call the function with it (see :meth:`call_with`).

        Raises:
            ToolError: The input is invalid (the problems, each naming its field).
        """
        arguments, found = self.parse_input(tool_input)
        if arguments is None:
            raise ToolError(f"invalid input for tool {self.name}: " + "; ".join(found))
        return self.call_with(arguments, context)

    def call_with(self, arguments: dict[str, Any], context: ToolContext[Any]) -> R:
        """Call the function with arguments from :meth:`parse_input`, injecting ``context``
        if it asks for it; a coroutine is run to its end (cancelled with the run)."""
        kwargs = dict(arguments)
        if self.context_param:
            kwargs[self.context_param] = context
        value = self.fn(**kwargs)
        if inspect.iscoroutine(value):  # async def: awaited here, cancelled with the run
            return run_coroutine(value, context._scope)  # type: ignore[no-any-return]
        if inspect.isawaitable(value) or inspect.isasyncgen(value):
            raise ToolError(  # never an awaitable's repr as the tool's answer
                f"tool {self.name} returned {type(value).__name__} object instead of a "
                "result: return the value (an async def tool is awaited for you)"
            )
        return value

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
    input_schema: dict[str, Any] | None = None,
    idempotent: bool = False,
) -> Callable[[Callable[..., R]], Tool[R]]: ...


def tool(
    fn: Callable[..., R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalGate = False,
    decision_schema: dict[str, Any] | None = None,
    input_schema: dict[str, Any] | None = None,
    idempotent: bool = False,
) -> Tool[R] | Callable[[Callable[..., R]], Tool[R]]:
    """Make a function a tool: ``@tool`` or ``@tool(name=..., description=...)``.

    The description is the docstring's text before its sections; each parameter's
    description comes from ``Annotated[..., Field(description=...)]`` or the ``Args:``
    section; types come from the annotations: anything pydantic validates (``str``,
    ``int``, ``list[...]``, ``Optional``, ``Literal``, models, dataclasses, ``TypedDict``,
    ``Enum``, ``datetime``, ``UUID``, ``Decimal``, ``Annotated[..., Field(ge=1)]``...).
    The schema is pydantic's, the model's input is validated by pydantic and the function
    is called with real objects; parameters with defaults are optional. A parameter
    annotated :class:`ToolContext` (or ``ToolContext[Deps]``) receives the context and is
    hidden from the model.

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
    An ``async def`` function is awaited on a private event loop in the tool's worker
    thread, and a cancel of the run cancels its task at once.
    ``input_schema=`` gives the arguments' JSON schema yourself (the signature's types are
    then not used): the model's input is checked against it, every keyword, before the
    function is called with it as keyword arguments.
    ``@tool(idempotent=True)``: the call is safe to run again, which a run resumed after
    its worker died does (see ``docs/recovery.md``).

    Raises:
        UsageError: A type pydantic cannot validate, ``*args``, a positional-only
            parameter, an invalid name, an async generator function, a
            ``decision_schema`` or ``input_schema`` that is not a valid JSON schema, or an
            ``input_schema`` the function cannot be called with.
    """
    options: dict[str, Any] = {
        "namespace": sys._getframe(1).f_locals,  # a type local to the caller's function
        "name": name,
        "description": description,
        "requires_approval": requires_approval,
        "decision_schema": decision_schema,
        "input_schema": input_schema,
        "idempotent": idempotent,
    }
    if fn is not None:
        if not callable(fn) or inspect.isclass(fn):
            raise UsageError("@tool decorates a function")
        return Tool(fn, **options)
    return lambda f: Tool(f, **options)


def _is_async_generator(fn: object) -> bool:
    """An async generator function, or an object whose ``__call__`` is one."""
    call = getattr(fn, "__call__", None)  # noqa: B004 - the bound __call__, not callable()
    return any(inspect.isasyncgenfunction(f) for f in (fn, call) if f is not None)
