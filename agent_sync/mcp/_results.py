"""An MCP ``CallToolResult`` as the agent's ``toolResult`` content.

* text -> ``{"text"}``;
* an image (png, jpeg, gif, webp) -> ``{"image": {"format", "source": {"bytes"}}}`` (the
  providers that take no images in tool results put a text placeholder in its place); an
  image of another type, audio, and binary resources -> a text line saying what was left out;
* ``structuredContent`` -> ``{"json"}`` (a text block that only repeats it as JSON, which the
  protocol asks servers to add for old clients, is dropped: the model gets it once);
* a resource link -> a text line with its name, URI, type and description; an embedded text
  resource -> its URI and text;
* ``isError`` -> status ``"error"``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

import mcp_types as types

__all__ = ["tool_result"]

_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def tool_result(
    result: types.CallToolResult, mask: Callable[[str], str] | None = None
) -> dict[str, Any]:
    """``{"status", "content"}`` for the executor (which checks and cleans each piece).

    ``mask`` masks the server's own secrets (its secret ``env=``/``headers=`` values) in
    every text and JSON string, should the server echo one back.
    """
    structured = result.structured_content
    content: list[dict[str, Any]] = []
    for block in result.content:
        piece = _piece(block)
        if structured is not None and "text" in piece and _same_json(piece["text"], structured):
            continue
        content.append(piece)
    if structured is not None:
        content.append({"json": structured})
    if mask is not None:
        content = [_masked(piece, mask) for piece in content]
    if not content:
        content.append({"text": "(no output)"})
    return {"status": "error" if result.is_error else "success", "content": content}


def _masked(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {key: _masked(item, mask) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, mask) for item in value]
    return value  # numbers, bools, None, an image's bytes


def _piece(block: object) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"text": block.text}
    if isinstance(block, types.ImageContent):
        return _image(block)
    if isinstance(block, types.AudioContent):
        return {"text": f"[audio ({block.mime_type}, {_size(block.data)}) not shown]"}
    if isinstance(block, types.ResourceLink):
        return {"text": _link(block)}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return {"text": f"Resource {resource.uri}:\n{resource.text}"}
        kind = resource.mime_type or "binary"
        return {"text": f"[resource {resource.uri} ({kind}) not shown]"}
    return {"text": f"[{type(block).__name__} content not shown]"}


def _image(block: types.ImageContent) -> dict[str, Any]:
    fmt = _IMAGE_FORMATS.get(block.mime_type.lower())
    if fmt is not None:
        try:
            data = base64.b64decode(block.data, validate=True)
        except (binascii.Error, ValueError):
            return {"text": f"[image ({block.mime_type}) with invalid base64 data not shown]"}
        return {"image": {"format": fmt, "source": {"bytes": data}}}
    return {"text": f"[image ({block.mime_type}, {_size(block.data)}) not shown: unsupported type]"}


def _link(link: types.ResourceLink) -> str:
    text = f"Resource link: {link.title or link.name} <{link.uri}>"
    if link.mime_type:
        text += f" ({link.mime_type})"
    if link.description:
        text += f": {link.description}"
    return text


def _size(data: str) -> str:
    return f"{len(data) * 3 // 4} bytes"


def _same_json(text: str, value: Any) -> bool:
    """Whether ``text`` is the text copy of the structured content ``value``: ``value``
    written as JSON, or, for a result the SDKs wrap as ``{"result": x}``, ``x`` itself."""
    candidates = [value]
    if isinstance(value, dict) and set(value) == {"result"}:
        if value["result"] == text:
            return True
        candidates.append(value["result"])
    try:
        return json.loads(text) in candidates
    except (ValueError, RecursionError):
        return False
