"""Converse requests in the OpenAI Chat Completions wire format: :func:`build_request_body`.

The answer's ``chat.completion.chunk`` objects are read by :mod:`._openai_stream`.

Choices made for compatibility with the many OpenAI-compatible servers:

* ``reasoningContent`` blocks are dropped from requests: most servers reject unknown
  message fields, and none accept another provider's reasoning signature.
* Tool results go first in a user turn, as ``tool`` messages (they must follow the
  assistant's tool calls); text-only user content is sent as a plain string, the form
  every compatible server accepts.

Boundary rule: nothing malformed escapes as a raw ``TypeError``/``KeyError``/... A history
the request translator cannot express raises :class:`~agent_sync.errors.UsageError` (the
caller's input), at the public entry point :func:`build_request_body`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..messages import ContentBlock, Message, ToolSpec
from ._wire import MALFORMED as _MALFORMED

__all__ = ["CACHE_FIELDS", "build_request_body"]

CACHE_FIELDS = ("prompt_cache_retention", "prompt_cache_key")
"""Request fields :func:`build_request_body` adds for ``cache="long"``; a server that
rejects them gets requests without them (see ``OpenAIModel``)."""

_IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg",
                "gif": "image/gif", "webp": "image/webp"}  # fmt: skip


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
    response_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of a streaming ``POST /chat/completions``.

    Args:
        model_id: The server's model name.
        messages: Converse history, ending with a user message.
        system_prompt: System instructions, or ``None``.
        tool_specs: Tools the model may call.
        tool_choice: Converse ``{"auto"|"any"|"tool": ...}``, or ``None``.
        params: Passed through as top-level fields (``temperature``, ``max_tokens``...),
            after the fields built here, so a caller can override them (except ``stream``;
            ``stream_options=None`` removes that field for servers that reject it).
        cache: ``"long"`` adds ``prompt_cache_retention: "24h"`` (and ``prompt_cache_key``
            when ``cache_key`` is set); ``"short"`` and ``None`` add nothing (OpenAI caches
            prefixes automatically).
        cache_key: A stable id of the conversation, sent as ``prompt_cache_key``.
        response_format: Sent as ``response_format`` (structured output), or ``None``.

    Returns:
        The request body.

    Raises:
        UsageError: The history holds content this wire cannot express (a non-string
            text, a malformed block); names the message and block.
    """
    wire = _wire_messages(system_prompt, messages)
    body: dict[str, Any] = {
        "model": model_id,
        "messages": wire,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
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
    if response_format is not None:
        body["response_format"] = response_format
    body.update(params)
    body["stream"] = True  # the response parser needs SSE, whatever params say
    if body.get("stream_options", True) is None:
        del body["stream_options"]  # stream_options=None: for servers that reject the field
    return body


def _tool_spec(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["inputSchema"]["json"],
        },
    }


def _wire_messages(system_prompt: str | None, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Converse history -> Chat Completions messages.

    Raises:
        UsageError: naming the first message that cannot be translated.
    """
    wire: list[dict[str, Any]] = []
    if system_prompt:
        wire.append({"role": "system", "content": system_prompt})
    for position, message in enumerate(messages):
        try:
            if message["role"] == "assistant":
                assistant = _assistant_message(message["content"])
                if assistant is not None:
                    wire.append(assistant)
            else:
                wire.extend(_user_messages(message["content"]))
        except _MALFORMED as exc:
            raise UsageError(
                f"cannot send messages[{position}] to an openai-compatible server "
                f"({type(exc).__name__}: {exc}); validate_history/repair_history can help"
            ) from exc
    return wire


def _tool_choice(choice: dict[str, Any]) -> Any:
    if "any" in choice:
        return "required"
    if "tool" in choice:
        return {"type": "function", "function": {"name": choice["tool"]["name"]}}
    if "none" in choice:
        return "none"
    return "auto"


def _assistant_message(blocks: Sequence[ContentBlock]) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if "text" in block:
            texts.append(block["text"])
        elif "toolUse" in block:
            use = block["toolUse"]
            calls.append(
                {
                    "id": use["toolUseId"],
                    "type": "function",
                    "function": {"name": use["name"], "arguments": json.dumps(use["input"])},
                }
            )
        # reasoningContent (and anything else) is dropped: see the module docstring.
    if not texts and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _user_messages(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    """Tool results first (they must follow the assistant's tool calls), then the user turn."""
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if "toolResult" in block:
            result = block["toolResult"]
            tool_messages.append(
                {
                    "role": "tool",
                    "tool_call_id": result["toolUseId"],
                    "content": _tool_result_text(result),
                }
            )
        elif "text" in block:
            parts.append({"type": "text", "text": block["text"]})
        elif "image" in block:
            parts.append(_image_part(block["image"]))
        elif "document" in block:
            document = block["document"]
            name = document.get("name", "document")
            data = document.get("source", {}).get("bytes", b"")
            text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)
            parts.append({"type": "text", "text": f"[document {name}]\n{text}"})
    messages = tool_messages
    if parts:
        if all(part["type"] == "text" for part in parts):
            # Plain string content: the form every compatible server accepts.
            content: Any = "\n".join(part["text"] for part in parts)
        else:
            content = parts
        messages.append({"role": "user", "content": content})
    return messages


def _tool_result_text(result: Any) -> str:
    pieces: list[str] = []
    for item in result.get("content", []):
        if "text" in item:
            pieces.append(item["text"])
        elif "json" in item:
            pieces.append(json.dumps(item["json"]))
        elif "image" in item:  # Chat Completions tool messages carry text only
            fmt = item["image"].get("format", "image") if isinstance(item["image"], dict) else ""
            pieces.append(f"[{fmt} image not shown: this API takes no images in tool results]")
    text = "\n".join(pieces)
    if result.get("status") == "error":
        # Chat Completions has no error flag on tool messages: say it in the text.
        return f"Error: {text}" if text else "Error"
    return text


def _image_part(image: dict[str, Any]) -> dict[str, Any]:
    fmt = str(image.get("format", "png")).lower()
    data = image.get("source", {}).get("bytes", b"")
    if isinstance(data, str):  # already base64 (e.g. a history loaded from JSON)
        encoded = data
    else:
        encoded = base64.b64encode(data).decode("ascii")
    mime = _IMAGE_TYPES.get(fmt, f"image/{fmt}")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}}
