"""What ``output_type`` means on the wire and back: :class:`OutputSpec`.

An output type becomes a JSON schema the model answers to, always an object on the wire
(providers' structured output and tool inputs are objects):

* a pydantic model, a dataclass or a TypedDict: its pydantic schema, as is;
* anything else pydantic validates (``list[...]``, ``int``, an ``Enum``, ``datetime``...):
  wrapped as ``{"result": <value>}``, and unwrapped in ``result.output``;
* a JSON-schema dict: checked once (Draft 2020-12, :mod:`agent_sync._jsonschema`; an
  invalid schema is a :class:`~agent_sync.errors.UsageError`), an object schema as is,
  any other wrapped; the output is the JSON value (a dict for an object schema).

:meth:`OutputSpec.validate` turns the model's JSON into the output or a list of problems,
one line each naming the field, for the model to act on when it is re-asked.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable
from typing import Any

import pydantic
from typing_extensions import is_typeddict

from .._encodable import Unencodable, load_json
from .._jsonschema import compile_schema, problems
from ..errors import UsageError

__all__ = ["OUTPUT_TOOL_NAME", "OutputProblems", "OutputSpec", "object_root", "output_spec"]

OUTPUT_TOOL_NAME = "final_result"
"""The name of the output tool where a provider answers through a forced tool call."""

_WRAP_KEY = "result"
_NOT_JSON: Any = object()  # OutputProblems.raw of a text that is not JSON at all
# NaN, Infinity or an exponent that may overflow: such a text takes the Python path, which
# refuses non-finite numbers (pydantic-core's JSON parser accepts them)
_BIG_EXPONENT = re.compile(r"[eE][+]?[0-9]{3}")
_MAX_INPUT_SHOWN = 80


class OutputProblems(Exception):
    """Why an answer is not a valid output (internal: the loop re-asks or raises
    :class:`~agent_sync.errors.OutputValidationError`)."""

    def __init__(self, problems: list[str], raw: object) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
        self.raw = raw


@dataclasses.dataclass(frozen=True, eq=False)
class OutputSpec:
    """An output type as the run needs it. Build with :func:`output_spec`.

    Attributes:
        name: The output tool's name (``"final_result"``).
        description: What the output tool is for (the type's docstring, if any).
        schema: The JSON schema of the object the model sends (wrapped, if needed).
        wrapped: Whether the value travels as ``{"result": value}``.
        label: The type's name, for messages and logs.
    """

    name: str
    description: str
    schema: dict[str, Any]
    wrapped: bool
    label: str
    _check: Callable[[Any], Any] = dataclasses.field(repr=False)
    _dump: Callable[[Any], Any] = dataclasses.field(repr=False)
    _check_json: Callable[[str], Any] | None = dataclasses.field(default=None, repr=False)

    def validate(self, raw: object) -> Any:
        """The output for the model's JSON value ``raw`` (the object on the wire).

        Raises:
            OutputProblems: ``raw`` does not validate; one problem per line.
        """
        value = raw
        if self.wrapped:
            if not isinstance(raw, dict) or _WRAP_KEY not in raw:
                raise OutputProblems(
                    [f"the answer must be a JSON object with the key {_WRAP_KEY!r}"], raw
                )
            value = raw[_WRAP_KEY]
        return self._check(value)

    def parse_text(self, text: str) -> Any:
        """The output for an answer given as text (JSON, possibly in a code fence).

        Raises:
            OutputProblems: Not JSON, or JSON that does not validate.
        """
        body = _strip_fence(text)
        if self._check_json is not None and not _maybe_non_finite(body):
            try:
                return self._check_json(body)
            except OutputProblems as exc:
                if exc.raw is not _NOT_JSON:
                    raise
                # not JSON to pydantic-core: the Python path names the JSON error (or
                # reads what only Python's parser accepts)
        return self.validate(self.load_text(text))

    @staticmethod
    def load_text(text: str) -> Any:
        """The JSON value of an answer's text (a surrounding code fence is dropped).

        Raises:
            OutputProblems: The text is not JSON.
        """
        body = _strip_fence(text)
        try:  # what goes out (a stored state) must be plain JSON: no NaN, not too deep
            return load_json(body, what="the answer")
        except Unencodable as exc:
            raise OutputProblems([str(exc)], text) from None
        except ValueError as exc:
            shown = body if len(body) <= 200 else body[:200] + "..."
            raise OutputProblems([f"the answer is not valid JSON ({exc}): {shown}"], text) from None

    def to_json(self, output: Any) -> Any:
        """``output`` as a JSON value (what a :class:`~agent_sync.run.RunState` stores)."""
        return self._dump(output)


def output_spec(output_type: object) -> OutputSpec:
    """The :class:`OutputSpec` of ``output_type`` (a type, a JSON-schema dict, or a spec).

    Raises:
        UsageError: pydantic cannot make a schema of the type, or the dict is not a valid
            JSON schema.
    """
    if isinstance(output_type, OutputSpec):
        return output_type
    if isinstance(output_type, dict):
        return _schema_spec(output_type)
    try:
        return _type_spec(output_type)
    except TypeError:  # unhashable: not a type lru_cache can key on
        return _type_spec.__wrapped__(output_type)


@functools.lru_cache(maxsize=256)
def _type_spec(output_type: Any) -> OutputSpec:
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
        schema = adapter.json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise UsageError(f"output_type {output_type!r} has no JSON schema: {exc}") from None
    label = getattr(output_type, "__name__", None) or repr(output_type)
    is_object = False
    if (
        (isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel))
        or dataclasses.is_dataclass(output_type)
        or is_typeddict(output_type)
    ):
        root = object_root(schema)
        is_object = root is not None
        schema = root if root is not None else schema
    doc = _docstring(output_type) if is_object else ""

    def check(value: Any) -> Any:
        try:
            return adapter.validate_python(value)
        except pydantic.ValidationError as exc:
            raise OutputProblems(_pydantic_problems(exc, wrapped=not is_object), value) from None

    def check_json(text: str) -> Any:
        # one pass in pydantic-core: parsing, then validating, in Python costs twice that
        try:
            return adapter.validate_json(text)
        except pydantic.ValidationError as exc:
            try:
                raw = load_json(text, what="the answer")
            except ValueError:  # not JSON, or too deep (pydantic-core's own depth limit)
                raise OutputProblems([], _NOT_JSON) from None
            raise OutputProblems(_pydantic_problems(exc, wrapped=False), raw) from None

    def dump(output: Any) -> Any:
        return adapter.dump_python(output, mode="json")

    spec = _spec(schema, wrapped=not is_object, label=label, doc=doc, check=check, dump=dump)
    return spec if not is_object else dataclasses.replace(spec, _check_json=check_json)


def _schema_spec(schema: dict[str, Any]) -> OutputSpec:
    validator = compile_schema(schema, "output_type")
    root = object_root(schema)
    is_object = root is not None
    path = "output" if is_object else _WRAP_KEY

    def check(value: Any) -> Any:
        found = problems(validator, value, path)
        if found:
            raise OutputProblems(found, value)
        return value

    label = str(schema.get("title") or "output")
    doc = str(schema.get("description") or "")
    copied = json.loads(json.dumps(root if root is not None else schema))
    return _spec(copied, wrapped=not is_object, label=label, doc=doc, check=check, dump=_same)


def _spec(
    schema: dict[str, Any],
    *,
    wrapped: bool,
    label: str,
    doc: str,
    check: Callable[[Any], Any],
    dump: Callable[[Any], Any],
) -> OutputSpec:
    if wrapped:
        inner = dict(schema)
        defs = inner.pop("$defs", None)
        schema = {
            "type": "object",
            "properties": {_WRAP_KEY: inner},
            "required": [_WRAP_KEY],
        }
        if defs is not None:
            schema["$defs"] = defs  # "#/$defs/..." references resolve from the root
    description = "Give the final answer: call this with the result"
    description += f" ({label}). {doc}" if doc else f" ({label})."
    return OutputSpec(
        name=OUTPUT_TOOL_NAME,
        description=description.strip(),
        schema=schema,
        wrapped=wrapped,
        label=label,
        _check=check,
        _dump=dump,
    )


def object_root(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``schema`` as an object schema on the wire, or ``None`` if it is not an object.

    A root that is only a local reference (``{"$ref": "#/$defs/Node", "$defs": ...}``, as
    pydantic writes a recursive model) is an object when what it names is: the wire gets
    the named definition at the root (providers want ``"type": "object"`` there), its
    ``$defs`` kept so that references inside it (the recursion) still resolve. The same
    rule decides whether the output is wrapped, so an answer in the type's own shape is
    what validates.
    """
    if schema.get("type") == "object":
        return schema
    ref = schema.get("$ref")
    defs = schema.get("$defs")
    if not isinstance(ref, str) or not ref.startswith(_DEFS) or not isinstance(defs, dict):
        return None
    if set(schema) - _REF_ROOT_KEYS:
        return None  # the reference is combined with other keywords: keep it whole
    target = defs.get(ref[len(_DEFS) :])
    if not isinstance(target, dict) or target.get("type") != "object" or "$defs" in target:
        return None
    inlined = dict(target)
    for key in ("$schema", "$id"):
        if key in schema:
            inlined[key] = schema[key]
    inlined["$defs"] = defs
    return inlined


_DEFS = "#/$defs/"
_REF_ROOT_KEYS = frozenset({"$ref", "$defs", "$schema", "$id", "title", "description"})


def _same(value: Any) -> Any:
    return value


def _docstring(output_type: object) -> str:
    doc = getattr(output_type, "__doc__", None) or ""
    if doc.startswith(f"{getattr(output_type, '__name__', '')}("):
        return ""  # a dataclass's generated signature, not a description
    return " ".join(doc.split())


def _pydantic_problems(exc: pydantic.ValidationError, *, wrapped: bool) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"])
        where = ".".join(p for p in (_WRAP_KEY if wrapped else "", loc) if p) or "output"
        try:
            shown = json.dumps(error.get("input"), default=repr)
        except (RecursionError, ValueError):  # a value pydantic found too deep
            shown = type(error.get("input")).__name__
        if len(shown) > _MAX_INPUT_SHOWN:
            shown = shown[:_MAX_INPUT_SHOWN] + "..."
        lines.append(f"{where}: {error['msg']} (got {shown})")
    return lines


def _maybe_non_finite(body: str) -> bool:
    """Whether ``body`` may hold a number JSON has not (``NaN``, ``Infinity``, an exponent
    that overflows to infinity), which pydantic-core reads as a float: such an answer takes
    the Python path, which refuses it. Two substring searches and one single-purpose
    pattern: half the time of one pattern with the three alternatives (26 us for 2.4 KB)."""
    return "NaN" in body or "Infinity" in body or _BIG_EXPONENT.search(body) is not None


def _strip_fence(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        first_newline = body.find("\n")
        if first_newline != -1 and body.endswith("```"):
            return body[first_newline + 1 : -3].strip()
    return body
