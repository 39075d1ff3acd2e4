"""Converse requests in the Anthropic Messages API: :func:`build_body`. No I/O.

:func:`build_body` turns a :class:`~agent_sync.models.base.ModelRequest` into the JSON body
of ``POST /v1/messages``. It is forgiving where Anthropic is strict: blank text blocks are
dropped (the API rejects them), consecutive messages of one role are merged,
``toolResult`` blocks go first in their message (the API requires it), and reasoning
without a signature (from another provider) is dropped, since Anthropic cannot verify it.
A request without tools sends the history's tool calls and results as text: the API refuses
``tool_use``/``tool_result`` blocks in a request that defines no tools (as after a
structured-output call answered through the output tool, or tools since removed). The
answer's stream events are read by :mod:`._anthropic_stream`.

Prompt caching (``request.cache``, ``"short"``/``"long"``): ``cache_control`` on the system prompt,
the last tool spec and the last block of the message before the new prompt; ``"ttl": "1h"``
for ``"long"``.

Boundary rule: nothing malformed escapes as a raw ``TypeError``/``KeyError``/... A history
:func:`build_body` cannot express raises :class:`~agent_sync.errors.UsageError` naming the
message (the caller's input).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ModelError, UsageError
from ..messages import Message, ToolSpec
from ._wire import MALFORMED as _MALFORMED
from ._wire import signature_owner
from .base import CacheMode, ModelRequest

__all__ = ["CALL_OPTIONS", "build_body", "convert_messages"]

logger = logging.getLogger(__name__)

CALL_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})
"""Parameters that are SDK call options, not fields of the request body."""

_PARAM_ALIASES = {  # Converse inferenceConfig spellings -> Anthropic
    "maxTokens": "max_tokens",
    "topP": "top_p",
    "topK": "top_k",
    "stopSequences": "stop_sequences",
}

_IMAGE_TYPES = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "jpg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
_TEXT_DOCUMENTS = frozenset({"txt", "md", "csv", "html"})

_UNCACHEABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Blocks the API refuses a ``cache_control`` on."""


def build_body(
    request: ModelRequest,
    *,
    model_id: str,
    max_tokens: int,
    params: Mapping[str, Any],
    cache: CacheMode | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build the request body and the SDK call options.

    Args:
        request: The provider-neutral request.
        model_id: Anthropic model id.
        max_tokens: Default ``max_tokens`` (a ``max_tokens`` param overrides it).
        params: The model's own parameters; ``request.params`` are merged over them.
        cache: ``"short"``/``"long"`` adds the ``cache_control`` markers (the model passes
            ``request.cache``, or ``None`` once a server rejected them); ``None`` sends
            none.

    Returns:
        ``(body, options)``: the JSON body, and SDK options (``extra_headers``...).

    Raises:
        ModelError: A block cannot be expressed for Anthropic (e.g. a ``docx`` document).
        UsageError: The history or a tool spec is malformed (a non-string text, a block
            missing its fields); names the message.
    """
    merged: dict[str, Any] = {}
    for source in (params, request.params):
        for key, value in source.items():
            merged[_PARAM_ALIASES.get(key, key)] = value
    options = {key: merged.pop(key) for key in CALL_OPTIONS if key in merged}
    body: dict[str, Any] = {
        "model": model_id,
        "max_tokens": merged.pop("max_tokens", max_tokens),
        "messages": convert_messages(request.messages),
    }
    if not request.tool_specs:
        _tool_blocks_as_text(body["messages"])
    if request.system_prompt and request.system_prompt.strip():
        body["system"] = request.system_prompt
    if request.tool_specs:
        try:
            body["tools"] = [_tool(spec) for spec in request.tool_specs]
            if request.tool_choice:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        except _MALFORMED as exc:
            raise UsageError(
                f"malformed tool spec or tool_choice: {type(exc).__name__}: {exc}"
            ) from exc
    body.update(merged)
    if cache is not None:
        _mark_cache(body, cache)
    return body, options


def _mark_cache(body: dict[str, Any], cache: CacheMode) -> None:
    """Put ``cache_control`` on the system prompt, the last tool and the last prior block."""
    control: dict[str, str] = {"type": "ephemeral"}
    if cache == "long":
        control["ttl"] = "1h"
    if isinstance(body.get("system"), str):
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": control}]
    tools = body.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": dict(control)}
    messages = body["messages"]
    if len(messages) >= 2:  # the prefix before the new prompt: messages[-2]
        for block in reversed(messages[-2]["content"]):
            if block["type"] not in _UNCACHEABLE_BLOCKS:
                block["cache_control"] = dict(control)
                break


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec["name"], "input_schema": spec["inputSchema"]["json"]}
    if spec.get("description"):
        tool["description"] = spec["description"]
    return tool


def _tool_choice(choice: Mapping[str, Any]) -> dict[str, Any]:
    if "tool" in choice:
        return {"type": "tool", "name": choice["tool"]["name"]}
    if "any" in choice:
        return {"type": "any"}
    return {"type": "auto"}


def convert_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Converse messages -> Anthropic messages (merged by role, blank blocks dropped)."""
    converted: list[dict[str, Any]] = []
    message: Mapping[str, Any]
    for position, message in enumerate(messages):
        try:
            role = message["role"]
            blocks = [b for b in (_block(block) for block in message["content"]) if b is not None]
        except _MALFORMED as exc:
            raise UsageError(
                f"cannot send messages[{position}] to Anthropic ({type(exc).__name__}: {exc}); "
                "validate_history/repair_history can help"
            ) from exc
        if not blocks:
            continue  # Anthropic rejects empty messages; nothing of value is lost
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"].extend(blocks)
        else:
            converted.append({"role": role, "content": blocks})
    for merged in converted:
        content = merged["content"]
        if any(block["type"] == "tool_result" for block in content):
            # Anthropic requires tool results before any other block of the message.
            content.sort(key=lambda block: block["type"] != "tool_result")
    return converted


def _tool_blocks_as_text(messages: list[dict[str, Any]]) -> None:
    """Replace ``tool_use``/``tool_result`` blocks by text, in place (for a request without
    tools, which Anthropic refuses to send them in)."""
    for message in messages:
        message["content"] = [_as_text(block) for block in message["content"]]


def _as_text(block: dict[str, Any]) -> dict[str, Any]:
    kind = block["type"]
    if kind == "tool_use":
        arguments = json.dumps(block["input"], ensure_ascii=False)
        return {"type": "text", "text": f"[called tool {block['name']} with {arguments}]"}
    if kind == "tool_result":
        pieces = [
            item["text"] if item["type"] == "text" else f"[{item['type']}]"
            for item in block.get("content", ())
        ]
        status = "error" if block.get("is_error") else "result"
        return {"type": "text", "text": f"[tool {status}: {' '.join(pieces)}]"}
    return block


def _block(block: Mapping[str, Any]) -> dict[str, Any] | None:
    if "text" in block:
        text = block["text"]
        return {"type": "text", "text": text} if text.strip() else None
    if "toolUse" in block:
        use = block["toolUse"]
        return {
            "type": "tool_use",
            "id": use["toolUseId"],
            "name": use["name"],
            "input": use["input"],
        }
    if "toolResult" in block:
        return _tool_result(block["toolResult"])
    if "reasoningContent" in block:
        return _reasoning(block["reasoningContent"])
    if "image" in block:
        return _image(block["image"])
    if "document" in block:
        return _document(block["document"])
    logger.debug("block=<%s> | dropping block type anthropic does not take", ",".join(block))
    return None


def _tool_result(result: Mapping[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for item in result.get("content", ()):
        if "text" in item:
            if item["text"].strip():
                content.append({"type": "text", "text": item["text"]})
        elif "json" in item:
            content.append({"type": "text", "text": json.dumps(item["json"])})
        elif "image" in item:
            content.append(_image(item["image"]))
        elif "document" in item:
            content.append(_document(item["document"]))
    converted: dict[str, Any] = {"type": "tool_result", "tool_use_id": result["toolUseId"]}
    if content:
        converted["content"] = content
    if result.get("status") == "error":
        converted["is_error"] = True
    return converted


def _reasoning(reasoning: Mapping[str, Any]) -> dict[str, Any] | None:
    redacted = reasoning.get("redactedContent")
    if redacted is not None:
        data = redacted.decode("utf-8") if isinstance(redacted, bytes) else str(redacted)
        return {"type": "redacted_thinking", "data": data}
    text = reasoning.get("reasoningText") or {}
    if not text.get("signature") or signature_owner(text["signature"]) is not None:
        return None  # unsigned reasoning, or another wire's (Gemini's), would be rejected
    return {"type": "thinking", "thinking": text.get("text", ""), "signature": text["signature"]}


def _base64(data: Any) -> str:
    # bytes from the SDKs; a str is taken as already base64 (a history reloaded from JSON).
    return base64.b64encode(data).decode("ascii") if isinstance(data, bytes) else str(data)


def _image(image: Mapping[str, Any]) -> dict[str, Any]:
    media_type = _IMAGE_TYPES.get(str(image.get("format", "")).lower())
    data = image.get("source", {}).get("bytes")
    if media_type is None or data is None:
        raise ModelError(
            f"image format {image.get('format')!r} or source is not supported by Anthropic",
            provider="anthropic",
            retryable=False,
        )
    source = {"type": "base64", "media_type": media_type, "data": _base64(data)}
    return {"type": "image", "source": source}


def _document(document: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(document.get("format", "")).lower()
    data = document.get("source", {}).get("bytes")
    if data is None or (kind != "pdf" and kind not in _TEXT_DOCUMENTS):
        raise ModelError(
            f"document format {kind!r} is not supported by Anthropic (use pdf or text)",
            provider="anthropic",
            retryable=False,
        )
    if kind == "pdf":
        source = {"type": "base64", "media_type": "application/pdf", "data": _base64(data)}
    else:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        source = {"type": "text", "media_type": "text/plain", "data": text}
    converted: dict[str, Any] = {"type": "document", "source": source}
    if document.get("name"):
        converted["title"] = document["name"]
    return converted
