"""What may enter a history, a store or a frame: text and JSON that strict encoders accept.

One rule, applied at every edge where data comes in (a prompt, injected input, a tool's
return value, a deny reason, the model's stream, a stored history written by an older
version): whatever is kept must survive ``json.dumps(..., allow_nan=False)`` and encoding
as UTF-8, in every store and every frame, for ever.

* **Lone surrogates are replaced** with U+FFFD (:func:`clean_text`). They come from
  ``os.fsdecode`` of a non-UTF-8 file name (``"report-\\udcff.txt"``) or a ``\\ud800``
  escape in JSON, and no UTF-8 encoder accepts them. A surrogate *pair* written as two code
  points becomes the character it encodes (UTF-16 semantics, as JSON's escapes mean).
* **Non-finite numbers are refused** (:class:`Unencodable`): JSON has no ``NaN`` or
  infinities, a strict parser rejects them and a lax one reads them back as something
  else; turning them into ``null`` or a string would hand the reader a value nobody sent.
  Each edge says no in its own way: the model's tool input is invalid input (an error
  result the model can act on), a tool's return value an error result, a prompt or
  injected input a ``UsageError``; web bodies already answer 400.
* **A tool's return value** of a type JSON cannot carry is encoded the standard way when
  it has one (``convert=True``): ``datetime``/``date``/``time`` ISO 8601, ``Decimal`` its
  exact digits as a string (as pydantic's JSON mode does: a float would round it), ``UUID``
  and paths ``str``, ``set``/``frozenset`` a (sorted when possible) list, ``Enum`` its
  value, pydantic models ``model_dump(mode="json")``, dataclasses a dict of their fields.
  Anything else (``bytes``, arbitrary objects) is :class:`Unencodable`: never a repr.

Copies are plain JSON values (``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
``float``, ``bool``, ``None``), so later changes by the caller never reach the history. The
common case (already clean) costs one C-level ``json.dumps`` and ``json.loads``.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = [
    "Unencodable",
    "clean_content",
    "clean_json",
    "clean_text",
    "encoding_problem",
    "load_json",
    "loads_stored",
    "parse_json",
]

MAX_DEPTH = 200
"""Deepest nesting copied (a deeper value, or a cycle, is :class:`Unencodable`)."""

_FAST = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_INT_DIGIT_BITS = 14_000  # ints longer than this may pass Python's int-to-str digit limit


class Unencodable(ValueError):
    """A value that JSON (strict, UTF-8) cannot carry; the message says where and why."""


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same ``str`` if none).

    A ``str`` subclass comes back as a plain ``str`` (its own ``__str__`` is never called).
    """
    if type(text) is not str:
        text = str.__str__(text)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def clean_json(value: Any, *, what: str = "the value", convert: bool = False) -> Any:
    """A plain-JSON copy of ``value`` with :func:`clean_text` applied to every string.

    Args:
        value: The value to copy.
        what: How errors name the value (``"the tool's return value"``).
        convert: Encode the types that have a standard JSON form (see the module doc);
            without it only JSON types (and tuples) are accepted.

    Raises:
        Unencodable: A non-finite number, a type with no JSON form, a cycle, nesting
            deeper than :data:`MAX_DEPTH`; the message names the place (``$.a[2]``).
    """
    try:
        text = _FAST.encode(value)
    except Exception:  # noqa: BLE001 - anything the fast path refuses is explained below
        pass
    else:
        if (text.isascii() or _utf8(text)) and not _deeper_than_max(text):
            return json.loads(text)
    return _Walk(what=what, convert=convert, keep_bytes=False).copy(value, "$", 0)


def load_json(text: str, *, what: str = "the value") -> Any:
    """The JSON value of ``text`` that came from outside (a model's answer or tool input),
    as :func:`clean_json` keeps values: lone surrogates replaced, nothing deeper than
    :data:`MAX_DEPTH`.

    The text is parsed once. The value is walked (and copied) only when the text says it
    may hold something to clean: a ``NaN``/``Infinity`` or a float that overflows (the
    parser's hooks stop at the first), a lone surrogate in the text, or a ``\\uD800``-style
    escape. A clean answer of a few KB costs one ``json.loads``, not a parse, an encode and
    a second parse (which was 10-20x a parse, per model answer and tool call).

    The depth bound is this module's one bound: a text too deep for the parser itself
    (whose limit is Python's recursion limit) is refused with the same message as a value
    too deep to copy, never with a ``RecursionError``.

    Raises:
        Unencodable: Nested deeper than :data:`MAX_DEPTH`, or a non-finite number (it
            subclasses ``ValueError``: catch it first to tell it from bad syntax).
        ValueError: Not JSON (:class:`json.JSONDecodeError`).
    """
    return parse_json(text, what=what)[0]


def parse_json(text: str, *, what: str = "the value") -> tuple[Any, bool]:
    """:func:`load_json`, and whether ``text`` is already the JSON of the value it returns
    (nothing was cleaned): then ``text`` itself can stand for the value as text, where
    encoding the value again would copy it (a typed answer's closing message).

    Raises:
        Unencodable: As :func:`load_json`.
        ValueError: As :func:`load_json`.
    """
    try:
        try:
            value = _CHECKED.decode(text)
        except _NonFinite:
            value = json.loads(text)  # the walk below names the place
        else:
            if _clean_text_json(text) and not _deeper_than_max(text):
                return value, True
    except RecursionError:
        raise Unencodable(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    return clean_json(value, what=what), False


class _NonFinite(Exception):
    """Raised by the parser's hooks: the text holds a number JSON cannot carry."""


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise _NonFinite
    return number


def _no_constant(literal: str) -> float:
    raise _NonFinite


_CHECKED = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)
# \uD800-\uDFFF escapes: a surrogate, lone or half of a pair (emoji written ASCII-only)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


_ALL_BUT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _deeper_than_max(text: str) -> bool:
    """Whether the JSON ``text`` may nest containers deeper than :data:`MAX_DEPTH`: when it
    says so, the caller walks the value, and the walk decides (and names the place).

    The fast paths of :func:`clean_json` and :func:`load_json` take a value without walking
    it; this keeps the depth bound theirs too (a clean value 300 deep was accepted, stored,
    and could fail to load in a deeper stack). Text with no more openings than the bound
    cannot exceed it (two counts: the usual case). Otherwise only the brackets are kept
    (bytes.translate) and the innermost pairs removed one level per pass, at most
    :data:`MAX_DEPTH` passes: ~0.1 ms for 130 KB of rows, 4% of copying it. A bracket inside
    a string may make a shallow text look deep, never a deep one shallow."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    brackets = text.encode("utf-8", "surrogatepass").translate(None, _ALL_BUT_BRACKETS)
    for _ in range(MAX_DEPTH):
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if not brackets:
            return False
    return True


def _clean_text_json(text: str) -> bool:
    """Whether every string parsed from JSON ``text`` is encodable as is: the text holds
    no lone surrogate itself and no surrogate escape."""
    if not text.isascii() and not _utf8(text):
        return False
    return _SURROGATE_ESCAPE.search(text) is None


def clean_content(value: Any, *, what: str = "the content") -> Any:
    """Like :func:`clean_json` for content blocks and messages, which may hold ``bytes``
    (image and document sources, redacted reasoning): those are kept (as ``bytes``)."""
    return _Walk(what=what, convert=False, keep_bytes=True).copy(value, "$", 0)


def encoding_problem(value: Any) -> str | None:
    """Where ``value`` holds a lone surrogate or a non-finite number, or ``None``.

    Other types (``bytes`` in a block, say) are not this function's business: the block
    rules check them. Never raises.
    """
    try:
        text = _FAST.encode(value)
    except Exception:  # noqa: BLE001 - bytes and the like: look closer
        pass
    else:
        if text.isascii() or _utf8(text):
            return None
    try:
        return _first_problem(value, "$", 0)
    except RecursionError:
        return None


def loads_stored(text: str | bytes) -> Any:
    """``json.loads`` of a stored record, made encodable: a record written before the
    rule was enforced (``NaN`` written as such, a lone surrogate escaped as ``\\udXXX``)
    must still load, with ``NaN``/``Infinity`` read as ``null`` and lone surrogates
    replaced. A clean record costs a substring check more than ``json.loads`` (and a look
    at its strings when it holds surrogate escapes, as emoji are written)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    value = _STORED.decode(text)
    if "\\ud" in text and _first_problem(value, "$", 0) is not None:
        return _Walk(what="a stored record", convert=False, keep_bytes=False).copy(value, "$", 0)
    return value


_STORED = json.JSONDecoder(parse_constant=lambda name: None)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _type_name(value: object) -> str:
    try:
        return type(value).__qualname__
    except BaseException:  # noqa: BLE001 - a metaclass can break even this
        return "object"


def _non_finite(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


class _Walk:
    __slots__ = ("_convert", "_keep_bytes", "_path_ids", "_what")

    def __init__(self, *, what: str, convert: bool, keep_bytes: bool) -> None:
        self._what = what
        self._convert = convert
        self._keep_bytes = keep_bytes
        self._path_ids: set[int] = set()

    def _refuse(self, where: str, why: str) -> Unencodable:
        shown = where if len(where) <= 80 else "$..." + where[-60:]
        place = self._what if where == "$" else f"{self._what} at {shown}"
        return Unencodable(f"{place} {why}")

    def copy(self, value: Any, where: str, depth: int) -> Any:
        if isinstance(value, str):
            return clean_text(value)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, enum.Enum) and self._convert:
            return self.copy(value.value, where, depth)
        if isinstance(value, int):
            return self._int(value, where)
        if isinstance(value, float):
            number = float.__float__(value)
            if not math.isfinite(number):
                raise self._refuse(
                    where, f"is {_non_finite(number)}: JSON has no NaN or infinities"
                )
            return number
        if isinstance(value, (bytes, bytearray, memoryview)) and self._keep_bytes:
            return bytes(value)
        if depth >= MAX_DEPTH:
            raise self._refuse(where, f"is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, (dict, list, tuple)):
            return self._container(value, where, depth)
        if self._convert:
            return self._converted(value, where, depth)
        raise self._refuse(where, f"is of type {_type_name(value)}, which has no JSON form")

    def _int(self, value: int, where: str) -> int:
        number = int.__int__(value)
        if number.bit_length() > _INT_DIGIT_BITS:
            try:
                int.__repr__(number)
            except ValueError:
                raise self._refuse(where, "is an int too long to write") from None
        return number

    def _container(self, value: Any, where: str, depth: int) -> Any:
        if id(value) in self._path_ids:
            raise self._refuse(where, "contains itself (a cycle)")
        self._path_ids.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {
                    self._key(key, where): self.copy(item, f"{where}[{_show_key(key)}]", depth + 1)
                    for key, item in value.items()
                }
            return [self.copy(item, f"{where}[{n}]", depth + 1) for n, item in enumerate(value)]
        finally:
            self._path_ids.discard(id(value))

    def _key(self, key: Any, where: str) -> str:
        if isinstance(key, str):
            return clean_text(key)
        if key is None or isinstance(key, (bool, int, float)):
            plain = self.copy(key, where, 0)
            return json.dumps(plain)
        if self._convert:
            converted = self._converted(key, where, 0)
            if isinstance(converted, str):
                return converted
        raise self._refuse(where, f"has a key of type {_type_name(key)}, which has no JSON form")

    def _converted(self, value: Any, where: str, depth: int) -> Any:
        if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
            return clean_text(value.isoformat())
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise self._refuse(where, f"is Decimal({str(value)!r}): JSON has no NaN")
            return str(value)
        if isinstance(value, uuid.UUID):
            return str(value)
        if isinstance(value, os.PathLike):
            path = os.fspath(value)
            if isinstance(path, str):
                return clean_text(path)
        if isinstance(value, (set, frozenset)):
            return self._container(_ordered(value), where, depth)
        if isinstance(value, Mapping):
            return self._container(dict(value), where, depth)
        dump = getattr(type(value), "model_dump", None)
        if callable(dump) and hasattr(type(value), "model_fields"):  # a pydantic model
            return self.copy(value.model_dump(mode="json"), where, depth + 1)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return self._container(fields, where, depth)
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise self._refuse(
                where, "is bytes, which JSON cannot carry: decode it to a str (or base64 it)"
            )
        raise self._refuse(where, f"is of type {_type_name(value)}, which has no JSON form")


def _ordered(items: set[Any] | frozenset[Any]) -> list[Any]:
    try:
        return sorted(items)
    except Exception:  # noqa: BLE001 - mixed or unorderable members keep their order
        return list(items)


def _show_key(key: Any) -> str:
    if isinstance(key, str):
        return json.dumps(clean_text(key))[:40]
    return _type_name(key) if not isinstance(key, (int, float, bool)) else repr(key)[:40]


def _first_problem(value: Any, where: str, depth: int) -> str | None:
    if isinstance(value, str):
        if not value.isascii() and not _utf8(value):
            return f"{where} holds a lone surrogate (not encodable as UTF-8)"
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {_non_finite(value)} (JSON has no NaN or infinities)"
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _first_problem(key, f"{where} key", depth + 1) or _first_problem(
                item, f"{where}[{_show_key(key)}]", depth + 1
            )
            if problem is not None:
                return problem
    elif isinstance(value, (list, tuple)):
        for n, item in enumerate(value):
            problem = _first_problem(item, f"{where}[{n}]", depth + 1)
            if problem is not None:
                return problem
    return None
