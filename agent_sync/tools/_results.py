"""Tool results: whatever a tool returns or raises, as a valid ``toolResult``, never raising.

The executor turns every outcome of a call into a result here, so a hostile return value
(an ``__str__`` that raises, an int past the digit limit, a wrongly shaped result dict, a
``NaN``, a ``datetime``, a file name with a lone surrogate) can never stop a worker from
reporting or poison the history: what is kept obeys :mod:`agent_sync._encodable`.
"""

from __future__ import annotations

import json
from typing import Any

from .._encodable import Unencodable, clean_json, clean_text
from .._message_checks import tool_result_piece_problem
from ..messages import ToolResult, ToolResultContent

__all__ = ["describe_exception", "error_result", "result_from_value", "safe_str"]


def error_result(tool_use_id: str, text: str) -> ToolResult:
    """A ``toolResult`` with ``status: "error"`` and one text piece (made encodable: a
    reason or message may carry a lone surrogate from wherever it was written)."""
    shown = clean_text(text) if isinstance(text, str) else safe_str(text)
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": shown}]}


def safe_str(value: object) -> str:
    """``str(value)`` that never raises: a value that cannot be shown is described instead.

    Used wherever the executor turns something a tool produced (a return value, an
    exception) into text, so that a hostile ``__str__`` or an int past Python's digit
    limit can never stop a worker from reporting. Lone surrogates are replaced.
    """
    try:
        return clean_text(str(value))  # a __str__ returning a str subclass gives a str
    except BaseException as exc:  # noqa: BLE001 - whatever __str__ raises, describe it
        return f"<{_type_name(value)} that could not be shown: {_type_name(exc)}>"


def describe_exception(exc: BaseException) -> str:
    """``"Type: message"`` for an exception, never raising (see :func:`safe_str`)."""
    message = safe_str(exc)
    return f"{_type_name(exc)}: {message}" if message else _type_name(exc)


def result_from_value(tool_use_id: str, value: Any) -> ToolResult:
    """A valid ``toolResult`` from whatever a tool returned. Never raises.

    * a ``str`` becomes a text piece;
    * a dict shaped like a result (a ``content`` list, optional ``status``, optional
      ``toolUseId``) is used as it is if every piece is exactly one of ``{"text": str}``
      or ``{"json": <JSON value>}`` and ``status`` is ``"success"`` or ``"error"``;
      otherwise the call gets an error result naming the problem (a wrong-typed result
      is the tool's bug: passing it on would poison every later model call);
    * any other value is JSON-encoded (:func:`agent_sync._encodable.clean_json` with
      ``convert``: datetimes ISO 8601, ``Decimal`` its digits, UUIDs and paths as text,
      sets as lists, pydantic models and dataclasses as objects): a ``dict`` becomes a
      JSON piece (plain JSON values), a ``str`` a text piece, anything else its JSON text;
    * a value JSON cannot carry (``NaN``, ``bytes``, an object with no JSON form, an int
      past Python's int-to-str digit limit) gives an error result saying what and where,
      never a Python repr.

    Lone surrogates in any string are replaced with U+FFFD.
    """
    try:
        return _result_from_value(tool_use_id, value)
    except BaseException as exc:  # noqa: BLE001 - the worker must report, whatever happens
        return error_result(tool_use_id, _unrepresentable(value, exc))


def _result_from_value(tool_use_id: str, value: Any) -> ToolResult:
    if isinstance(value, str):
        return _text_result(tool_use_id, clean_text(value))
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        if set(value) <= _RESULT_KEYS:
            return _result_shaped(tool_use_id, value)
    try:
        plain = clean_json(value, what="the return value", convert=True)
    except Unencodable as exc:
        return error_result(
            tool_use_id,
            f"The tool returned a value that cannot be sent to the model: {exc}. Return a "
            "str or a JSON value (datetimes, Decimals, UUIDs, sets, dataclasses and pydantic "
            "models are encoded for you).",
        )
    if isinstance(plain, dict):
        return {"toolUseId": tool_use_id, "status": "success", "content": [{"json": plain}]}
    if isinstance(plain, str):
        return _text_result(tool_use_id, plain)
    return _text_result(tool_use_id, json.dumps(plain, ensure_ascii=False, allow_nan=False))


_RESULT_KEYS = frozenset({"content", "status", "toolUseId"})


def _result_shaped(tool_use_id: str, value: dict[str, Any]) -> ToolResult:
    status = value.get("status", "success")
    problems = [] if status in ("success", "error") else [f"status {safe_str(status)!r}"]
    content: list[ToolResultContent] = []
    for position, piece in enumerate(value["content"]):
        problem = tool_result_piece_problem(piece)
        if problem is not None:
            problems.append(f"content piece {position}: {problem}")
        elif "json" in piece:
            content.append({"json": clean_json(piece["json"])})
        elif "image" in piece:  # checked above: a format and source bytes (an MCP image)
            image = piece["image"]
            content.append({"image": {"format": image["format"], "source": image["source"]}})
        else:
            content.append({"text": clean_text(piece["text"])})
    if problems:
        return error_result(
            tool_use_id,
            "The tool returned a result that cannot be sent to the model: "
            + "; ".join(problems[:3])
            + " (a result piece is {'text': str} or {'json': <JSON value>})",
        )
    return {"toolUseId": tool_use_id, "status": status, "content": content}


def _unrepresentable(value: Any, exc: BaseException) -> str:
    return (
        f"The tool returned a {_type_name(value)} that could not be represented as a "
        f"result ({describe_exception(exc)[:300]}). Return a str, or a JSON-serialisable value."
    )


def _type_name(value: object) -> str:
    try:
        return type(value).__qualname__
    except BaseException:  # noqa: BLE001 - a metaclass can break even this
        return "object"


def _text_result(tool_use_id: str, text: str) -> ToolResult:  # text: clean already
    return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": text}]}
