"""Converse requests in the OpenAI Responses API wire format: :func:`build_request_body`.

The answer's events are read by :mod:`._responses_stream`. The history becomes the
request's ``input`` items, the system prompt its ``instructions``:

* user ``text``/``image``/``document`` -> one user message of ``input_text``,
  ``input_image`` (a data URL) and ``input_file`` (PDFs and office files, as a data URL) or
  ``input_text`` (plain-text documents) parts;
* ``toolResult`` -> a ``function_call_output`` item (``call_id`` is the ``toolUseId``),
  placed before the user's new content; an error result starts with ``Error:`` (the item
  has no error flag); images in a result are sent as ``input_image`` parts of its output;
* assistant ``text`` -> one assistant ``message`` item of ``output_text``; ``toolUse`` ->
  a ``function_call`` item each (``arguments`` a JSON string);
* ``reasoningContent`` whose signature this wire tagged (:mod:`._reasoning`) -> the
  ``reasoning`` item it came from (``id``, ``summary``, ``encrypted_content``), followed
  by the item that followed it in the answer, with that item's id: the API refuses a
  reasoning item without its following item. A reasoning block with nothing after it in
  its message, and every other provider's reasoning, is dropped.

Boundary rule: a history the translator cannot express raises
:class:`~agent_sync.errors.UsageError` naming the message, never a raw ``KeyError``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..messages import ContentBlock, Message, ToolSpec
from ._reasoning import tag, untag
from ._wire import MALFORMED as _MALFORMED

__all__ = ["CACHE_FIELDS", "WIRE", "build_request_body", "reasoning_signature"]

WIRE = "openai-responses"
"""This wire's tag on the reasoning signatures it stores (:mod:`._reasoning`)."""

CACHE_FIELDS = ("prompt_cache_retention", "prompt_cache_key")

_IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg",
                "gif": "image/gif", "webp": "image/webp"}  # fmt: skip
_TEXT_DOCUMENTS = frozenset({"txt", "md", "csv", "html"})
_FILE_TYPES = {
    "pdf": "application/pdf",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}


def reasoning_signature(item: dict[str, Any], follower: dict[str, Any] | None) -> str:
    """The tagged signature of a ``reasoning`` output item and the item that followed it.

    Holds what sending the item back needs: its ``id``, its ``encrypted_content`` (when the
    request asked for it), its summary parts when there are several (one part is the
    block's text), and the ``type`` and ``id`` of the item after it.
    """
    payload: dict[str, Any] = {"id": item.get("id") or ""}
    if item.get("encrypted_content"):
        payload["encrypted_content"] = item["encrypted_content"]
    summary = [part.get("text", "") for part in item.get("summary") or ()]
    if len(summary) > 1:
        payload["summary"] = summary
    if follower is not None and follower.get("id"):
        payload["next"] = [follower.get("type"), follower["id"]]
    return tag(WIRE, json.dumps(payload, separators=(",", ":")))


def build_request_body(
    model_id: str,
    messages: Sequence[Message],
    *,
    system_prompt: str | None,
    tool_specs: Sequence[ToolSpec],
    tool_choice: dict[str, Any] | None,
    params: dict[str, Any],
    cache: str | None = None,
    cache_key: str | None = None,
    text_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of a streaming ``POST /responses``.

    Args:
        model_id: The model name.
        messages: Converse history, ending with a user message.
        system_prompt: Sent as ``instructions``, or ``None``.
        tool_specs: Tools the model may call (``strict: false`` function tools).
        tool_choice: Converse ``{"auto"|"any"|"tool"|"none": ...}``, or ``None``.
        params: Top-level fields merged last (``max_output_tokens``, ``reasoning``,
            ``store``...), except ``stream``. With ``store: false`` the request asks for
            ``reasoning.encrypted_content`` (else reasoning could not be sent back).
        cache: ``"long"`` adds ``prompt_cache_retention: "24h"`` and ``prompt_cache_key``.
        cache_key: A stable id of the conversation, sent as ``prompt_cache_key``.
        text_format: Sent as ``text.format`` (structured output), or ``None``.

    Raises:
        UsageError: The history holds content this wire cannot express.
    """
    body: dict[str, Any] = {"model": model_id, "input": _input_items(messages), "stream": True}
    if system_prompt:
        body["instructions"] = system_prompt
    if cache == "long":
        body["prompt_cache_retention"] = "24h"
        if cache_key:
            body["prompt_cache_key"] = cache_key
    if tool_specs:
        try:
            body["tools"] = [_tool_spec(spec) for spec in tool_specs]
        except _MALFORMED as exc:
            raise UsageError(f"malformed tool spec: {type(exc).__name__}: {exc}") from exc
        if tool_choice is not None:
            body["tool_choice"] = _tool_choice(tool_choice)
    if text_format is not None:
        body["text"] = {"format": text_format}
    body.update(params)
    body["stream"] = True  # the response parser needs SSE, whatever params say
    if body.get("store") is False:
        included = list(body.get("include") or [])
        if "reasoning.encrypted_content" not in included:
            body["include"] = [*included, "reasoning.encrypted_content"]
    return body


def _tool_spec(spec: ToolSpec) -> dict[str, Any]:
    # strict false: the API's default is strict, which refuses most hand-written schemas.
    return {
        "type": "function",
        "name": spec["name"],
        "description": spec["description"],
        "parameters": spec["inputSchema"]["json"],
        "strict": False,
    }


def _tool_choice(choice: dict[str, Any]) -> Any:
    if "any" in choice:
        return "required"
    if "tool" in choice:
        return {"type": "function", "name": choice["tool"]["name"]}
    if "none" in choice:
        return "none"
    return "auto"


def _input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for position, message in enumerate(messages):
        try:
            if message["role"] == "assistant":
                items.extend(_assistant_items(message["content"]))
            else:
                items.extend(_user_items(message["content"]))
        except _MALFORMED as exc:
            raise UsageError(
                f"cannot send messages[{position}] to the OpenAI Responses API "
                f"({type(exc).__name__}: {exc}); validate_history/repair_history can help"
            ) from exc
    return items


def _assistant_items(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    """One assistant turn: reasoning items, one message of its text, function calls."""
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    message: dict[str, Any] | None = None
    awaiting: tuple[str, str] | None = None  # (type, id) of the item a reasoning needs next
    pending_reasoning: dict[str, Any] | None = None
    for block in blocks:
        if "reasoningContent" in block:
            reasoning = _reasoning_item(block["reasoningContent"])
            if reasoning is not None:
                item, awaiting = reasoning
                pending_reasoning = item
            continue
        if "text" in block:
            if message is None:
                message = {"type": "message", "role": "assistant", "content": []}
                message["status"] = "completed"
                if pending_reasoning is not None:
                    items.append(pending_reasoning)
                    if awaiting is not None and awaiting[0] == "message":
                        message["id"] = awaiting[1]
                    pending_reasoning = awaiting = None
                items.append(message)
            texts.append(block["text"])
        elif "toolUse" in block:
            use = block["toolUse"]
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": use["toolUseId"],
                "name": use["name"],
                "arguments": json.dumps(use["input"]),
            }
            if pending_reasoning is not None:
                items.append(pending_reasoning)
                if awaiting is not None and awaiting[0] == "function_call":
                    call["id"] = awaiting[1]
                pending_reasoning = awaiting = None
            items.append(call)
        # a reasoning item left pending has nothing after it: the API would refuse it
    if message is not None:
        message["content"] = [{"type": "output_text", "text": "".join(texts), "annotations": []}]
    return items


def _reasoning_item(reasoning: Any) -> tuple[dict[str, Any], tuple[str, str] | None] | None:
    """The ``reasoning`` item of a block this wire tagged, and what must follow it."""
    text = reasoning.get("reasoningText") if isinstance(reasoning, dict) else None
    if not isinstance(text, dict):
        return None  # redactedContent: another provider's
    payload_text = untag(WIRE, text.get("signature"))
    if payload_text is None:
        return None  # another provider's reasoning: its token means nothing here
    payload = json.loads(payload_text)
    summaries = payload.get("summary")
    if summaries is None:
        summaries = [text["text"]] if text.get("text") else []
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": payload["id"],
        "summary": [{"type": "summary_text", "text": s} for s in summaries],
    }
    if payload.get("encrypted_content"):
        item["encrypted_content"] = payload["encrypted_content"]
    following = payload.get("next")
    awaiting = (str(following[0]), str(following[1])) if following else None
    return item, awaiting


def _user_items(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    """Tool results first (they answer the previous turn's calls), then the user turn."""
    outputs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if "toolResult" in block:
            result = block["toolResult"]
            outputs.append(
                {
                    "type": "function_call_output",
                    "call_id": result["toolUseId"],
                    "output": _tool_output(result),
                }
            )
        elif "text" in block:
            parts.append({"type": "input_text", "text": block["text"]})
        elif "image" in block:
            parts.append(_image_part(block["image"]))
        elif "document" in block:
            parts.append(_document_part(block["document"]))
    if parts:
        outputs.append({"type": "message", "role": "user", "content": parts})
    return outputs


def _tool_output(result: Any) -> Any:
    pieces: list[dict[str, Any]] = []
    for item in result.get("content", []):
        if "text" in item:
            pieces.append({"type": "input_text", "text": item["text"]})
        elif "json" in item:
            pieces.append({"type": "input_text", "text": json.dumps(item["json"])})
        elif "image" in item:
            pieces.append(_image_part(item["image"]))
        elif "document" in item:
            pieces.append(_document_part(item["document"]))
    if result.get("status") == "error":
        first = pieces[0] if pieces and pieces[0]["type"] == "input_text" else None
        if first is not None:
            first["text"] = f"Error: {first['text']}"
        else:
            pieces.insert(0, {"type": "input_text", "text": "Error"})
    if all(piece["type"] == "input_text" for piece in pieces):
        return "\n".join(piece["text"] for piece in pieces)  # the form every server takes
    return pieces


def _base64(data: Any) -> str:
    if isinstance(data, str):  # already base64 (a history loaded from JSON)
        return data
    return base64.b64encode(data).decode("ascii")


def _image_part(image: dict[str, Any]) -> dict[str, Any]:
    fmt = str(image.get("format", "png")).lower()
    mime = _IMAGE_TYPES.get(fmt, f"image/{fmt}")
    encoded = _base64(image["source"]["bytes"])
    return {"type": "input_image", "image_url": f"data:{mime};base64,{encoded}", "detail": "auto"}


def _document_part(document: dict[str, Any]) -> dict[str, Any]:
    fmt = str(document.get("format", "txt")).lower()
    name = str(document.get("name", "document"))
    data = document["source"]["bytes"]
    if fmt in _TEXT_DOCUMENTS:
        if isinstance(data, str):
            data = base64.b64decode(data)
        text = data.decode("utf-8", errors="replace")
        return {"type": "input_text", "text": f"[document {name}]\n{text}"}
    mime = _FILE_TYPES.get(fmt, "application/octet-stream")
    filename = name if "." in name else f"{name}.{fmt}"
    return {
        "type": "input_file",
        "filename": filename,
        "file_data": f"data:{mime};base64,{_base64(data)}",
    }
