"""JSON schemas from Python signatures and Google-style docstrings.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``list[X]``/``tuple[X, ...]``,
``dict``/``dict[str, X]``, ``Optional[X]``/``X | None``, ``Literal[...]``, ``Any``, and
plain ``list``/``dict``. Parameters with defaults are optional. The model's input is checked
against the schema by the one validator, :mod:`agent_sync._jsonschema`.
"""

from __future__ import annotations

import inspect
import math
import re
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from ..errors import UsageError

__all__ = ["check_explicit_schema", "input_schema", "parse_docstring", "schema_for"]

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_for(annotation: Any, where: str) -> dict[str, Any]:
    """JSON schema of one annotation.

    Raises:
        UsageError: The annotation is not in the supported subset.
    """
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    if annotation is list or annotation is tuple:
        return {"type": "array"}
    if annotation is dict:
        return {"type": "object"}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple):
        homogeneous = origin is list or (len(args) == 2 and args[1] is Ellipsis)
        if not args or not homogeneous:
            return {"type": "array"}
        return {"type": "array", "items": schema_for(args[0], where)}
    if origin is dict:
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = schema_for(args[1], where)
        return schema
    if origin is Union or isinstance(annotation, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) != len(args)
        if len(members) == 1:
            inner = schema_for(members[0], where)
        else:
            inner = {"anyOf": [schema_for(m, where) for m in members]}
        return {"anyOf": [inner, {"type": "null"}]} if nullable else inner
    raise UsageError(f"{where}: unsupported type annotation {annotation!r} for a tool parameter")


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples|Note|Notes):\s*$"
)
_PARAM = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        heading = _SECTION.match(line)
        if heading:
            section, current = heading.group(1), None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            match = _PARAM.match(line)
            indent = len(line) - len(line.lstrip())
            if match and indent <= 4:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    return "\n".join(description).strip(), params


def input_schema(
    fn: Callable[..., Any], hints: dict[str, Any], skip: set[str], docs: dict[str, str]
) -> dict[str, Any]:
    """The arguments-object schema of ``fn``, leaving out parameters named in ``skip``."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if name in skip:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"tool {fn.__name__}: *args/**kwargs parameters are not supported")
        prop = schema_for(
            hints.get(name, param.annotation), f"tool {fn.__name__}, parameter {name}"
        )
        if name in docs:
            prop = {**prop, "description": docs[name]}
        if param.default is param.empty:
            required.append(name)
        elif _json_safe(param.default):
            prop = {**prop, "default": param.default}
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _json_safe(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)  # NaN and infinities are not JSON
    return value is None or isinstance(value, (str, int, bool))


def check_explicit_schema(
    fn: Callable[..., Any], schema: dict[str, Any], skip: set[str], where: str
) -> None:
    """An explicit ``input_schema=`` must describe an object ``fn`` can be called with.

    Raises:
        UsageError: The schema is not ``"type": "object"``, names a property the function
            does not take (and it has no ``**kwargs``), or leaves out of ``"required"`` a
            parameter that has no default.
    """
    if schema.get("type") != "object":
        raise UsageError(
            f'{where}: a tool takes a JSON object, so the schema needs "type": "object"'
        )
    params = {n: p for n, p in inspect.signature(fn).parameters.items() if n not in skip}
    if any(p.kind is p.POSITIONAL_ONLY and p.default is p.empty for p in params.values()):
        raise UsageError(
            f"{where}: the tool is called with keywords: no positional-only parameters"
        )
    keywords = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    properties = schema.get("properties", {})
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [n for n in properties if n not in keywords]
        if unknown:
            raise UsageError(f"{where}: {fn.__name__}() has no parameter {', '.join(unknown)}")
    required = set(schema.get("required", ()))
    loose = [n for n in keywords if params[n].default is params[n].empty and n not in required]
    if loose:
        raise UsageError(
            f"{where}: {', '.join(loose)} has no default in {fn.__name__}(), so the schema "
            'must list it under "required"'
        )
