"""The one validator for JSON schemas: tool input and decision data, checked with ``jsonschema``.

Every JSON schema agent_sync checks a value against (a tool's input schema, generated or
given; a ``decision_schema``; an ``output_type``'s) goes through :func:`compile_schema` once,
when the tool is built, and :func:`problems` for each value. A schema is checked once per
process (checking one against the Draft 2020-12 metaschema takes milliseconds, and the same
schemas come back: a sub-agent tool's, an MCP server's tools at each connection, a decision
schema at each resume): the validators of the last 1,024 schemas are kept by their JSON
text, each built from a copy of its own, so a caller that changes its dict afterwards
changes nothing. A refusal is never kept: each names its own schema.

Draft 2020-12, every keyword (``pattern``, ``format``, ``minimum``, ``oneOf``, ``$ref``...):
no keyword is ever silently ignored, so a schema is refused with
:class:`~agent_sync.errors.UsageError` when it

* is not a valid Draft 2020-12 schema (``{"type": "strin"}``, ``{"pattern": "["}``),
* is not plain JSON (it is stored with a paused run and sent to the model),
* has a ``$ref`` that cannot be resolved inside the schema (nothing is fetched), or
* names a ``format`` this installation cannot check (an unknown name, or one whose checker
  needs an optional package: ``agent_sync[formats]``).

Problems are worded for whoever must act on them (the model, or the human deciding), each
naming the field: ``"data.ticket: 'x' does not match '^T-[0-9]+$'"``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema_specifications import REGISTRY as _SPECIFICATIONS
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from .errors import UsageError

__all__ = ["Schema", "compile_schema", "json_type", "problems"]

Schema = Draft202012Validator
"""A compiled schema: what :func:`compile_schema` returns and :func:`problems` takes."""

_FORMATS = Draft202012Validator.FORMAT_CHECKER
# Draft 2020-12's formats that jsonschema checks only with optional packages installed
# (``agent_sync[formats]`` installs them, but for the iris' rfc3987-syntax: slow to import).
_FORMATS_NEEDING_EXTRAS = frozenset(
    {
        "date-time",
        "time",
        "duration",
        "hostname",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    }
)
_MAX_MESSAGE = 300
_DRAFTS: Registry[Any] = _SPECIFICATIONS  # the drafts' metaschemas (an untyped module)


def compile_schema(schema: object, where: str) -> Schema:
    """A validator for ``schema``, or :class:`UsageError` naming why the schema is unusable.

    Args:
        schema: The user's JSON schema (a dict).
        where: What the schema is, for the error (``"tool book: decision_schema"``).

    Raises:
        UsageError: The schema is not a dict, not JSON, not valid Draft 2020-12, has a
            ``$ref`` that does not resolve, or a ``format`` that cannot be checked here.
    """
    if not isinstance(schema, dict):
        raise UsageError(f"{where} must be a JSON schema (a dict), got {type(schema).__name__}")
    try:
        text = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{where} must be plain JSON: {exc}") from None
    try:
        return _checked(text)
    except _Refused as refused:  # never kept: each refusal names its own schema
        raise UsageError(f"{where}{refused.detail}") from None


class _Refused(Exception):
    """Why a schema is unusable, worded to follow what the schema is."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@functools.lru_cache(maxsize=1024)
def _checked(text: str) -> Schema:
    """The validator of the schema whose JSON is ``text``, built from a copy of its own."""
    schema = json.loads(text)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        at = _pointer(exc.absolute_path)
        raise _Refused(
            f" is not a valid JSON schema (Draft 2020-12){at}: {_short(exc.message)}"
        ) from None
    _check_formats_and_refs(schema)
    # An explicit (empty) registry: a $ref is resolved inside the schema, never fetched.
    return Draft202012Validator(schema, format_checker=_FORMATS, registry=Registry())


def problems(schema: Schema, value: Any, path: str) -> list[str]:
    """Every way ``value`` fails ``schema``, one line each naming the field (``[]``: valid).

    Never raises: a value too deeply nested to check is one problem.
    """
    try:
        errors = sorted(schema.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
        return [_describe(error, path) for error in errors]
    except RecursionError:
        return [f"{path}: too deeply nested to check"]
    except Unresolvable as exc:  # refused at compile time; kept as a problem, never a crash
        return [f"{path}: the schema's reference {exc.ref!r} cannot be resolved"]


def _check_formats_and_refs(schema: dict[str, Any]) -> None:
    root: Resource[Any] = DRAFT202012.create_resource(schema)
    # resolved as the validator resolves: inside the schema, or the drafts' own metaschemas
    stack = [(_DRAFTS.resolver_with_root(root), root)]
    while stack:
        resolver, resource = stack.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            fmt = contents.get("format")
            if isinstance(fmt, str) and fmt not in _FORMATS.checkers:
                raise _Refused(f": {_format_problem(fmt)}")
            ref = contents.get("$ref")
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    raise _Refused(
                        f": $ref {ref!r} cannot be resolved inside the schema "
                        "(references are never fetched: put the definition under $defs)"
                    ) from None
        stack.extend((resolver.in_subresource(sub), sub) for sub in resource.subresources())


def _format_problem(fmt: str) -> str:
    if fmt in ("iri", "iri-reference"):
        return (
            f"format {fmt!r} cannot be checked without the rfc3987-syntax package: "
            "install it, or remove the keyword"
        )
    if fmt in _FORMATS_NEEDING_EXTRAS:
        return (
            f"format {fmt!r} cannot be checked without its optional checker package: "
            "install agent_sync[formats], or remove the keyword"
        )
    known = ", ".join(sorted(_FORMATS.checkers))
    return f"unknown format {fmt!r} (it would never be checked); the checked formats: {known}"


def _describe(error: ValidationError, path: str) -> str:
    where = path + "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    )
    kind = error.validator
    if kind == "required" and error.message.endswith(" is a required property"):
        name = error.message.removesuffix(" is a required property")
        return f"{where}: missing required parameter {name}"
    if kind == "type":
        expected = _types(error.validator_value)
        return f"{where}: expected {expected}, got {json_type(error.instance)}"
    if kind == "enum" and isinstance(error.validator_value, list):
        allowed = ", ".join(_short(repr(v), 60) for v in error.validator_value)
        return f"{where}: {_short(repr(error.instance), 100)} is not one of {allowed}"
    if kind in ("anyOf", "oneOf") and error.context:
        only_types = all(e.validator == "type" and not e.relative_path for e in error.context)
        if only_types:
            expected = " or ".join(_types(e.validator_value) for e in error.context)
            return f"{where}: expected {expected}, got {json_type(error.instance)}"
        branches: dict[object, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        close = [
            errors
            for errors in branches.values()
            if not any(e.validator == "type" and not e.relative_path for e in errors)
        ]
        if len(close) == 1:  # one alternative has the right type: say what is wrong in it
            return "; ".join(_describe(sub, path) for sub in close[0])
    return f"{where}: {_short(error.message)}"


def _types(value: object) -> str:
    if isinstance(value, list):
        return " or ".join(str(v) for v in value)
    return str(value)


def json_type(value: object) -> str:
    """The JSON type name of a value (``"integer"``, ``"object"``...), for problems."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _pointer(parts: Iterable[object]) -> str:
    path = "/".join(str(part) for part in parts)
    return f" at /{path}" if path else ""


def _short(text: str, limit: int = _MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
