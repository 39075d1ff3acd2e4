"""A tool's explicit ``input_schema=``, and the descriptions in Google-style docstrings.

A schema the user writes is checked with the one JSON-schema validator,
:mod:`agent_sync._jsonschema` (every keyword), and must describe an object the function can
be called with; the model's input is checked against it and passed to the function as it is.
(A schema from the signature is pydantic's: :mod:`._signature`.)
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from typing import Any

from .._jsonschema import compile_schema, json_type, problems
from ..errors import UsageError

__all__ = ["SchemaArguments", "check_explicit_schema", "parse_docstring"]

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


class SchemaArguments:
    """The arguments object of a function, as an explicit JSON schema describes it.

    Attributes:
        schema: The schema (a plain-JSON copy: the tool's own).
    """

    def __init__(
        self, fn: Callable[..., Any], schema: dict[str, Any], skip: set[str], where: str
    ) -> None:
        self._validator = compile_schema(schema, where)  # a valid schema, then its shape
        check_explicit_schema(fn, schema, skip, where)
        self.schema: dict[str, Any] = json.loads(json.dumps(schema))
        self._accepts = _parameter_names(fn, skip)

    def parse(self, tool_input: Any) -> tuple[dict[str, Any] | None, list[str]]:
        """The keyword arguments (the input as it is), or ``None`` and the problems, each
        naming its field (``input.city: expected string, got integer``)."""
        found = problems(self._validator, tool_input, "input")
        if not isinstance(tool_input, dict):
            return None, found or [f"input: expected object, got {json_type(tool_input)}"]
        if self._accepts is not None:
            expected = ", ".join(sorted(self._accepts)) or "none"
            found += [
                f"input: unknown parameter {name!r} (expected: {expected})"
                for name in tool_input
                if name not in self._accepts
            ]
        return (None, found) if found else (dict(tool_input), [])


def _parameter_names(fn: Callable[..., Any], skip: set[str]) -> frozenset[str] | None:
    """The keyword names ``fn`` takes (``None``: any, it has ``**kwargs``)."""
    names: set[str] = set()
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind is param.VAR_KEYWORD:
            return None
        if name not in skip:
            names.add(name)
    return frozenset(names)
