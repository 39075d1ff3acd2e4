"""JSON schemas from Python signatures, Google-style docstrings, and input validation.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``list[X]``/``tuple[X, ...]``,
``dict``/``dict[str, X]``, ``Optional[X]``/``X | None``, ``Literal[...]``, ``Any``, and
plain ``list``/``dict``. Parameters with defaults are optional. Validation covers the same
subset, so an input the model sends is checked against exactly what the schema promised,
and every problem is described in words the model can act on.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from ..errors import UsageError

__all__ = ["parse_docstring", "schema_for", "validate"]

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
    return value is None or isinstance(value, (str, int, float, bool))


def validate(value: Any, schema: dict[str, Any], path: str = "input") -> list[str]:
    """Problems with ``value`` against the schema subset :func:`schema_for` produces."""
    if "anyOf" in schema:
        options = [validate(value, option, path) for option in schema["anyOf"]]
        if any(not problems for problems in options):
            return []
        return [f"{path}: {_describe(value)} matches none of the allowed types"]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        return [f"{path}: {value!r} is not one of {allowed}"]
    kind = schema.get("type")
    if kind is None:
        return []
    if not _matches(value, kind):
        return [f"{path}: expected {kind}, got {_describe(value)}"]
    problems: list[str] = []
    if kind == "array" and "items" in schema:
        for index, item in enumerate(value):
            problems += validate(item, schema["items"], f"{path}[{index}]")
    elif kind == "object":
        properties = schema.get("properties")
        for name in schema.get("required", ()):
            if name not in value:
                problems.append(f"{path}: missing required parameter {name!r}")
        for name, item in value.items():
            if properties is not None and name in properties:
                problems += validate(item, properties[name], f"{path}.{name}")
            elif properties is not None:
                expected = ", ".join(properties) or "none"
                problems.append(f"{path}: unknown parameter {name!r} (expected: {expected})")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += validate(item, schema["additionalProperties"], f"{path}.{name}")
    return problems


def _matches(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return True


def _describe(value: Any) -> str:
    names = {
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        list: "array",
        dict: "object",
    }
    return "null" if value is None else names.get(type(value), type(value).__name__)
