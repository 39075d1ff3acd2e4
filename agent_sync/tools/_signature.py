"""A tool's arguments from its signature, with pydantic: the JSON schema the model sees, and
the validation that turns the model's JSON input into the objects the function takes.

A parameter may have any type pydantic validates: ``str``/``int``/``float``/``bool``,
containers of them, ``Optional``, ``Literal``, ``Enum``, ``datetime``/``date``/``time``,
``UUID``, ``Decimal``, pydantic models, dataclasses, ``TypedDict``, and constraints and
descriptions with ``Annotated[..., Field(...)]`` (or a ``Field(...)`` default). The
parameters become one ``TypedDict`` (a parameter with a default is ``NotRequired``), and one
``TypeAdapter`` of it gives both the schema and the validator, so what the model is told and
what is enforced cannot drift apart.

The model's input is JSON, so it is validated as JSON in pydantic's strict mode: a value must
have the JSON type the schema names (``"5"`` is not an integer, ``true`` is not a number),
and types JSON has no literal for come from their JSON form (a date from ``"2026-11-26"``, a
UUID or ``Decimal`` from its text, an ``Enum`` from its value, a model from an object).
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind
from pydantic_core import CoreSchema, to_jsonable_python
from typing_extensions import NotRequired, Required, TypedDict

from .._jsonschema import json_type
from ..errors import UsageError
from ._problems import describe_errors
from .context import ToolContext

__all__ = ["SignatureArguments", "is_context_type", "type_hints"]

# A string annotation that names the context: hidden whatever its deps type, even one that
# cannot be resolved where the tool is defined (a class local to a function).
_CONTEXT_TEXT = re.compile(r"(?:\w+\.)*ToolContext(?:\[.*\])?")


class _ToolSchema(GenerateJsonSchema):
    """pydantic's JSON schema without a title on every field (tokens the model reads for
    nothing), and without warnings about defaults JSON cannot carry (they are left out)."""

    ignored_warning_kinds: set[JsonSchemaWarningKind] = {  # noqa: RUF012 - pydantic's API
        "skipped-choice",
        "non-serializable-default",
    }

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False


def is_context_type(hint: object) -> bool:
    """Whether an annotation is ``ToolContext`` or ``ToolContext[Deps]``."""
    return hint is ToolContext or typing.get_origin(hint) is ToolContext


def type_hints(
    fn: Callable[..., Any], where: str, namespace: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``fn``'s resolved annotations, ``Annotated`` kept. String annotations resolve in
    ``fn``'s module, then in ``namespace`` (the locals of the code that made the tool); a
    ``ToolContext[...]`` written as text is recognised even where its deps type cannot be
    resolved.

    Raises:
        UsageError: Another annotation cannot be resolved.
    """
    failure: Exception | None = None
    for localns in (None, namespace) if namespace else (None,):
        try:
            return typing.get_type_hints(fn, localns=localns, include_extras=True)
        except Exception as exc:  # an unresolvable forward reference somewhere
            failure = failure or exc
    globalns = {**getattr(inspect.unwrap(fn), "__globals__", {}), **(namespace or {})}
    hints: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        annotation = param.annotation
        if annotation is param.empty:
            continue
        if isinstance(annotation, str):
            if _CONTEXT_TEXT.fullmatch(annotation.replace(" ", "")):
                hints[name] = ToolContext
                continue
            holder = types.SimpleNamespace(__annotations__={name: annotation})
            try:
                annotation = typing.get_type_hints(holder, globalns, include_extras=True)[name]
            except Exception:
                raise UsageError(
                    f"{where}: cannot resolve the type hint of parameter {name} ({failure})"
                ) from None
        hints[name] = annotation
    return hints


class SignatureArguments:
    """The arguments object of a function, as pydantic validates it.

    Attributes:
        schema: The JSON schema of the arguments object (plain JSON, the tool's own).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        hints: Mapping[str, Any],
        skip: set[str],
        docs: Mapping[str, str],
        where: str,
    ) -> None:
        fields: dict[str, Any] = {}
        defaults: dict[str, Any] = {}
        for name, param in inspect.signature(fn).parameters.items():
            if name in skip:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise UsageError(f"{where}: *args/**kwargs parameters are not supported")
            if param.kind is param.POSITIONAL_ONLY:
                raise UsageError(
                    f"{where}: parameter {name} is positional-only; a tool is called with keywords"
                )
            annotation = hints.get(name, Any)
            if isinstance(param.default, FieldInfo):  # x: int = Field(3, ge=0)
                annotation = Annotated[annotation, param.default]
                optional = not param.default.is_required()
            else:
                optional = param.default is not param.empty
                if optional:
                    defaults[name] = param.default
            fields[name] = NotRequired[annotation] if optional else Required[annotation]
        self._names = frozenset(fields)
        self._expected = ", ".join(sorted(fields)) or "none"
        name, key = getattr(fn, "__name__", "tool"), tuple(fields.items())
        try:
            try:
                self._adapter, generated = _adapted(name, key)
            except TypeError:  # an annotation lru_cache cannot key on: made each time
                self._adapter, generated = _adapted.__wrapped__(name, key)
        except Exception as exc:
            raise _unsupported(fields, where, exc) from None
        self.schema = _finish(generated, docs, defaults, where)

    def parse(self, tool_input: Any) -> tuple[dict[str, Any] | None, list[str]]:
        """The keyword arguments for the function (real objects: a model instance, a
        ``date``), or ``None`` and the problems, each naming its field."""
        if not isinstance(tool_input, dict):
            return None, [f"input: expected object, got {json_type(tool_input)}"]
        found: list[str] = []
        arguments: dict[str, Any] | None = None
        try:
            arguments = self._adapter.validate_json(json.dumps(tool_input), strict=True)
        except ValidationError as exc:
            found = describe_errors(exc.errors(include_url=False), tool_input, "input")
        except (TypeError, ValueError) as exc:  # not JSON (an Approve(input=...) from code)
            found = [f"input: not a JSON object ({exc})"]
        except Exception as exc:  # a validator of the user's raised something else
            found = [f"input: validation failed ({type(exc).__name__}: {exc})"]
        found += [
            f"input: unknown parameter {name!r} (expected: {self._expected})"
            for name in tool_input
            if name not in self._names
        ]
        return (None, found) if found else (arguments, [])


@functools.lru_cache(maxsize=256)
def _adapted(
    name: str, fields: tuple[tuple[str, Any], ...]
) -> tuple[TypeAdapter[dict[str, Any]], dict[str, Any]]:
    """The ``TypeAdapter`` of the arguments ``TypedDict`` and its generated JSON schema
    (shared: never change it). Building them takes about half a millisecond, and the same
    signature comes back (a tool defined in a function, for each request): they are kept by
    the fields, when every annotation can be a key (a ``Field(...)`` default cannot)."""
    typed_dict: Any = TypedDict  # made at run time: no static type to check it against
    adapter: TypeAdapter[dict[str, Any]] = TypeAdapter(
        typed_dict(f"{name}_arguments", dict(fields))
    )
    return adapter, adapter.json_schema(schema_generator=_ToolSchema)


def _finish(
    generated: dict[str, Any], docs: Mapping[str, str], defaults: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """The generated schema (left as it is), with the docstring's descriptions and the
    signature's defaults."""
    schema = copy.deepcopy({key: value for key, value in generated.items() if key != "title"})
    properties: dict[str, Any] = schema.setdefault("properties", {})
    for name, prop in properties.items():
        if name in docs and "description" not in prop:
            prop["description"] = docs[name]
        if name in defaults and "default" not in prop:
            default = _json_default(defaults[name])
            if default is not _NO_DEFAULT:
                prop["default"] = default
    try:
        return json.loads(json.dumps(schema, allow_nan=False))  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: the generated input schema is not plain JSON ({exc})") from None


_NO_DEFAULT = object()


def _json_default(value: Any) -> Any:
    """A default as the schema shows it (an Enum's value, a date's text), or none for a
    value JSON cannot carry (``NaN``, an arbitrary object)."""
    try:
        plain = to_jsonable_python(value)
        json.dumps(plain, allow_nan=False)
    except Exception:
        return _NO_DEFAULT
    return plain


def _unsupported(fields: Mapping[str, Any], where: str, exc: Exception) -> UsageError:
    """The error naming the parameter whose type pydantic cannot validate or describe."""
    for name, field in fields.items():
        (annotation,) = typing.get_args(field)
        try:
            TypeAdapter(annotation).json_schema(schema_generator=_ToolSchema)
        except Exception as own:
            return UsageError(
                f"{where}, parameter {name}: unsupported type annotation {annotation!r} for "
                f"a tool parameter (pydantic: {_first_line(own)})"
            )
    return UsageError(f"{where}: the parameters cannot be validated ({_first_line(exc)})")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
