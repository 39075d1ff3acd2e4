"""Small history helpers shared by the loop and the tool executor.

:func:`close_turn` is the one place that knows how to leave a history valid after a run is
cut short (cancel, timeout, max_cycles, Ctrl-C): answer every unanswered ``toolUse`` with
a cancelled ``toolResult`` and, if asked, end with an assistant message.
"""

from __future__ import annotations

import json
from typing import Any

from .messages import CANCELLED_TEXT, ContentBlock, Message, ToolResult

__all__ = ["close_turn", "error_result", "result_from_value", "tool_result_message"]


def error_result(tool_use_id: str, text: str) -> ToolResult:
    """A ``toolResult`` with ``status: "error"`` and one text piece."""
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}


def result_from_value(tool_use_id: str, value: Any) -> ToolResult:
    """A successful ``toolResult`` from whatever a tool returned.

    ``str`` becomes text, a ``dict`` becomes a JSON piece, a dict shaped like a result
    (``content`` list, optional ``status``) is used as it is, any other JSON-serialisable
    value becomes its JSON text, anything else its ``str()``.
    """
    if isinstance(value, str):
        return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": value}]}
    if isinstance(value, dict):
        content = value.get("content")
        if isinstance(content, list) and set(value) <= {"content", "status", "toolUseId"}:
            if value.get("status") == "error":
                return {"toolUseId": tool_use_id, "status": "error", "content": content}
            return {"toolUseId": tool_use_id, "status": "success", "content": content}
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return _text_result(tool_use_id, str(value))
        return {"toolUseId": tool_use_id, "status": "success", "content": [{"json": value}]}
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = str(value)
    return _text_result(tool_use_id, text)


def _text_result(tool_use_id: str, text: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": text}]}


def tool_result_message(results: list[ToolResult]) -> Message:
    """The user message that carries a batch of tool results."""
    return {"role": "user", "content": [{"toolResult": result} for result in results]}


def close_turn(messages: list[Message], closing_text: str | None = CANCELLED_TEXT) -> None:
    """Make ``messages`` valid after a run was cut short, in place.

    Every ``toolUse`` of a trailing assistant message gets a cancelled ``toolResult``; then,
    if ``closing_text`` is given and the history ends with a user message, an assistant
    message with that text closes the turn.
    """
    if not messages:
        return
    last = messages[-1]
    if last["role"] == "assistant":
        pending = [b["toolUse"]["toolUseId"] for b in last["content"] if "toolUse" in b]
        if not pending:
            return
        messages.append(tool_result_message([error_result(i, CANCELLED_TEXT) for i in pending]))
    if closing_text is not None:
        closing: list[ContentBlock] = [{"text": closing_text}]
        messages.append({"role": "assistant", "content": closing})
