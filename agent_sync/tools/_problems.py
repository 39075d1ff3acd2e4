"""pydantic's validation errors as problems the model can act on, one line each naming the field.

Worded like the problems of the JSON-schema validator (:mod:`agent_sync._jsonschema`), so a
model reads the same kind of message whichever way a tool's input was checked::

    input: missing required parameter 'city'
    input.nights: expected integer, got boolean
    input.seats: Input should be greater than or equal to 1 (got 0)
    input.x: expected integer or string, got number

pydantic's error locations mix places in the input (keys, list indexes) with the names of
union members it tried (``('x', 'int')``); a part of a location that is not a place in the
input is such a member, so it is left out of the path and said apart (``(as int)``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic_core import ErrorDetails

from .._jsonschema import json_type

__all__ = ["describe_errors"]

# pydantic error types that only say "not of this JSON type": worded as the schema validator does
_EXPECTED = {
    "string_type": "string",
    "int_type": "integer",
    "int_parsing": "integer",
    "float_type": "number",
    "float_parsing": "number",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "list_type": "array",
    "tuple_type": "array",
    "set_type": "array",
    "frozen_set_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "dataclass_type": "object",
    "none_required": "null",
}
_MAX_VALUE = 80


def describe_errors(errors: Sequence[ErrorDetails], value: Any, path: str) -> list[str]:
    """Problems for pydantic's ``errors`` about ``value``, in order, one line each.

    Args:
        errors: ``ValidationError.errors()`` of validating ``value``.
        value: The JSON value that was validated (to tell places from union members).
        path: The name of the whole value (``"input"``).
    """
    found: list[str] = []
    by_place: dict[str, list[tuple[ErrorDetails, list[str]]]] = {}
    for error in errors:
        place, members = _split(error, value, path)
        by_place.setdefault(place, []).append((error, members))
    for place, group in by_place.items():
        if len(group) > 1 and all(e["type"] in _EXPECTED and m for e, m in group):
            expected = " or ".join(dict.fromkeys(_EXPECTED[e["type"]] for e, _ in group))
            found.append(f"{place}: expected {expected}, got {json_type(group[0][0]['input'])}")
            continue
        for error, members in group:
            found.append(_describe(error, place, members, path))
    return found


def _split(error: ErrorDetails, value: Any, path: str) -> tuple[str, list[str]]:
    """The place in ``value`` an error is about, and the union members named on the way."""
    place, members, node = path, [], value
    loc = error["loc"]
    for position, part in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(node, dict) and isinstance(part, str):
            if part in node:
                node = node[part]
                place += f".{part}"
                continue
            if last and error["type"] == "missing":
                place += f".{part}"
                continue
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            place += f"[{part}]"
            continue
        members.append(str(part))
    return place, members


def _describe(error: ErrorDetails, place: str, members: list[str], path: str) -> str:
    kind = error["type"]
    where = place
    if kind == "missing":
        parent, _, name = place.rpartition(".")
        noun = "parameter" if parent == path else "field"
        where, text = parent, f"missing required {noun} {name!r}"
    elif kind in _EXPECTED:
        text = f"expected {_EXPECTED[kind]}, got {json_type(error['input'])}"
    else:
        text = f"{error['msg']} (got {_short(error['input'])})"
    if members:
        where += f" (as {', '.join(members)})"
    return f"{where}: {text}"


def _short(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."
