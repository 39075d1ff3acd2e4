"""Messages rendered in the GenAI semantic conventions' message schema (recorded only with
``trace_content=True``): ``[{"role", "parts"}]`` as JSON strings, what the conventions
prescribe while the Python SDK has no structured span attributes.

A user message's tool results become a ``role: "tool"`` message; images and documents a
part naming kind and format, never their bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..messages import ContentBlock, Message, ToolResult

__all__ = ["chat_messages", "output_message", "result_value", "to_json"]

_FINISH = {  # stop reason -> the conventions' output-message finish_reason
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "content_filtered": "content_filter",
    "guardrail_intervened": "content_filter",
}


def chat_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """``[{"role", "parts"}]``; a user message's tool results become a ``tool`` message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks = message["content"]
        results = [_part(b) for b in blocks if "toolResult" in b]
        others = [_part(b) for b in blocks if "toolResult" not in b]
        if results:
            out.append({"role": "tool", "parts": results})
        if others or not results:
            out.append({"role": message["role"], "parts": others})
    return out


def output_message(message: Message, stop_reason: str | None) -> dict[str, Any]:
    """An assistant message with its ``finish_reason`` (``"error"`` when it did not finish)."""
    parts = [_part(b) for b in message["content"]]
    finish = _FINISH.get(stop_reason, stop_reason) if stop_reason else "error"
    return {"role": "assistant", "parts": parts, "finish_reason": finish}


def result_value(result: ToolResult) -> Any:
    """A result's content as one value: a lone piece's text or JSON, else the list."""
    values = [piece.get("text", piece.get("json")) for piece in result.get("content", [])]
    return values[0] if len(values) == 1 else values


def to_json(value: Any) -> str:
    """``value`` as a JSON string; what JSON cannot hold becomes ``"<TypeName>"``."""
    return json.dumps(value, ensure_ascii=False, default=lambda o: f"<{type(o).__name__}>")


def _part(block: ContentBlock) -> dict[str, Any]:
    if "text" in block:
        return {"type": "text", "content": block["text"]}
    if "toolUse" in block:
        use = block["toolUse"]
        return {
            "type": "tool_call",
            "id": use["toolUseId"],
            "name": use["name"],
            "arguments": use.get("input"),
        }
    if "toolResult" in block:
        result = block["toolResult"]
        part = {"type": "tool_call_response", "id": result["toolUseId"]}
        part["response"] = result_value(result)
        if result.get("status") == "error":
            part["status"] = "error"
        return part
    if "reasoningContent" in block:
        text = block["reasoningContent"].get("reasoningText", {}).get("text", "")
        return {"type": "reasoning", "content": text}
    if "image" in block:
        return {"type": "image", "format": block["image"].get("format")}
    if "document" in block:
        return {"type": "document", "format": block["document"].get("format")}
    return {"type": next(iter(block), "unknown")}
