"""Tool results: whatever a tool returns or raises, as a valid ``toolResult``, never raising.

The executor turns every outcome of a call into a result here, so a hostile return value
(an ``__str__`` that raises, an int past the digit limit, a wrongly shaped result dict) can
never stop a worker from reporting or poison the history.
"""

from __future__ import annotations

import json
from typing import Any

from ..messages import ToolResult, ToolResultContent, tool_result_piece_problem

__all__ = ["describe_exception", "error_result", "result_from_value", "safe_str"]


def error_result(tool_use_id: str, text: str) -> ToolResult:
    """A ``toolResult`` with ``status: "error"`` and one text piece."""
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}


def safe_str(value: object) -> str:
    """``str(value)`` that never raises: a value that cannot be shown is described instead.

    Used wherever the executor turns something a tool produced (a return value, an
    exception) into text, so that a hostile ``__str__`` or an int past Python's digit
    limit can never stop a worker from reporting.
    """
    try:
        text = str(value)
        if type(text) is not str:  # a __str__ returning a str subclass
            text = str.__str__(text)
        return text
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
    * any other JSON-serialisable ``dict`` becomes a JSON piece (a JSON round-trip copy,
      so the history holds plain JSON values);
    * any other JSON-serialisable value becomes its JSON text, anything else its
      ``str()``;
    * a value that cannot be represented at all (an int past Python's int-to-str digit
      limit, an object whose ``__str__`` raises) gives an error result saying so.
    """
    try:
        return _result_from_value(tool_use_id, value)
    except BaseException as exc:  # noqa: BLE001 - the worker must report, whatever happens
        return error_result(tool_use_id, _unrepresentable(value, exc))


def _result_from_value(tool_use_id: str, value: Any) -> ToolResult:
    if isinstance(value, str):
        return _text_result(tool_use_id, value if type(value) is str else str.__str__(value))
    if isinstance(value, dict):
        if isinstance(value.get("content"), list) and set(value) <= _RESULT_KEYS:
            return _result_shaped(tool_use_id, value)
        plain = _json_copy(value)
        if plain is not _NOT_JSON:
            return {"toolUseId": tool_use_id, "status": "success", "content": [{"json": plain}]}
        return _text_result(tool_use_id, _str_or_raise(value))
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = _str_or_raise(value)
    return _text_result(tool_use_id, text)


_RESULT_KEYS = frozenset({"content", "status", "toolUseId"})
_NOT_JSON = object()


def _result_shaped(tool_use_id: str, value: dict[str, Any]) -> ToolResult:
    status = value.get("status", "success")
    problems = [] if status in ("success", "error") else [f"status {safe_str(status)!r}"]
    content: list[ToolResultContent] = []
    for position, piece in enumerate(value["content"]):
        problem = tool_result_piece_problem(piece)
        if problem is not None:
            problems.append(f"content piece {position}: {problem}")
        elif "json" in piece:
            content.append({"json": _json_copy(piece["json"])})
        else:
            text = piece["text"]
            content.append({"text": text if type(text) is str else str.__str__(text)})
    if problems:
        return error_result(
            tool_use_id,
            "The tool returned a result that cannot be sent to the model: "
            + "; ".join(problems[:3])
            + " (a result piece is {'text': str} or {'json': <JSON value>})",
        )
    return {"toolUseId": tool_use_id, "status": status, "content": content}


def _json_copy(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return _NOT_JSON


def _str_or_raise(value: Any) -> str:
    text = str(value)
    return text if type(text) is str else str.__str__(text)


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


def _text_result(tool_use_id: str, text: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": text}]}
