"""Converse requests in the Gemini ``generateContent`` wire format: :func:`build_request_body`.

The answer's ``GenerateContentResponse`` chunks are read by :mod:`._gemini_stream`.

Mapping (the table is in ``docs/providers/gemini.md``):

* ``system_prompt`` -> ``systemInstruction``; ``user``/``assistant`` -> ``user``/``model``
  contents; text, image and document blocks -> ``text`` and ``inlineData`` parts.
* ``toolUse`` -> a ``functionCall`` part (``id`` = the ``toolUseId``); ``toolResult`` -> a
  ``functionResponse`` part naming the call it answers (its ``name``, found in the history,
  and ``id``), with ``{"output": ...}`` or ``{"error": ...}`` as its ``response``.
* Thought signatures. Gemini signs parts (a ``functionCall``, the last text part, a thought
  summary) with an opaque ``thoughtSignature`` that must come back on the same part (Gemini
  3 refuses a function call of the current turn without it). The stream reader stores one
  as a ``reasoningContent`` block whose signature is tagged ``"gemini:<signature>"``
  (:mod:`._reasoning`: the other wires drop tagged signatures): with thought
  text, it is a signed thought part; with empty text, it is the signature of the part that
  follows it (of the one before it when none follows). Untagged reasoning (another
  provider's, or an unsigned thought summary) is not sent: Gemini could not verify it.
  A ``functionCall`` without a signature of Gemini's (another provider's call, in a
  conversation that switched wires) gets Google's documented placeholder
  (:data:`SKIP_SIGNATURE`), which Gemini 3 accepts in place of a signature.

Boundary rule: a history the translator cannot express raises
:class:`~agent_sync.errors.UsageError` naming the message (the caller's input).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UsageError
from ..messages import ContentBlock, Message, ToolSpec
from ._reasoning import untag
from ._wire import MALFORMED as _MALFORMED

__all__ = [
    "GENERATION_FIELDS",
    "WIRE",
    "SKIP_SIGNATURE",
    "TOP_LEVEL_FIELDS",
    "build_request_body",
]

WIRE = "gemini"
"""The tag of a Gemini thought signature stored in a history (see the module docstring)."""

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""Google's documented stand-in for a function call Gemini did not sign."""

TOP_LEVEL_FIELDS = frozenset(
    {"safetySettings", "safety_settings", "cachedContent", "cached_content", "labels",
     "toolConfig", "tool_config", "tools", "systemInstruction", "system_instruction"}
)  # fmt: skip
"""``**params`` sent as top-level request fields; every other param goes in
``generationConfig`` (``temperature``, ``maxOutputTokens``, ``thinkingConfig``...)."""

GENERATION_FIELDS = {"max_tokens": "maxOutputTokens", "stop": "stopSequences"}
"""Other wires' names for ``generationConfig`` fields, accepted as aliases."""

_IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg",
                "gif": "image/gif", "webp": "image/webp", "heic": "image/heic",
                "heif": "image/heif"}  # fmt: skip
_DOCUMENT_TYPES = {"pdf": "application/pdf", "txt": "text/plain", "md": "text/markdown",
                   "html": "text/html", "csv": "text/csv", "xml": "text/xml"}  # fmt: skip


def build_request_body(
    messages: Sequence[Message],
    *,
    system_prompt: str | None,
    tool_specs: Sequence[ToolSpec],
    tool_choice: dict[str, Any] | None,
    params: Mapping[str, Any],
    json_schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST .../models/{model}:streamGenerateContent?alt=sse``.

    Args:
        messages: Converse history, ending with a user message.
        system_prompt: System instructions, or ``None``.
        tool_specs: Tools the model may call.
        tool_choice: Converse ``{"auto"|"any"|"tool": ...}``, or ``None``.
        params: :data:`TOP_LEVEL_FIELDS` go top level, a ``generationConfig`` dict is
            merged, everything else goes in ``generationConfig`` (``max_tokens`` and
            ``stop`` are accepted for ``maxOutputTokens``/``stopSequences``).
        json_schema: Ask for a JSON answer matching it (``responseMimeType`` and
            ``responseJsonSchema``), or ``None``.

    Raises:
        UsageError: The history holds content this wire cannot express; names the message.
    """
    body: dict[str, Any] = {"contents": _contents(messages)}
    if system_prompt:
        body["systemInstruction"] = {"parts": [{"text": system_prompt}]}
    if tool_specs:
        try:
            declarations = [_declaration(spec) for spec in tool_specs]
        except _MALFORMED as exc:
            raise UsageError(f"malformed tool spec: {type(exc).__name__}: {exc}") from exc
        body["tools"] = [{"functionDeclarations": declarations}]
        if tool_choice is not None:
            body["toolConfig"] = {"functionCallingConfig": _calling_config(tool_choice)}
    generation: dict[str, Any] = {}
    if json_schema is not None:
        generation["responseMimeType"] = "application/json"
        generation["responseJsonSchema"] = json_schema
    for name, value in params.items():
        if name == "tools" and isinstance(value, list):
            body["tools"] = [*body.get("tools", ()), *value]  # googleSearch, codeExecution...
        elif name in TOP_LEVEL_FIELDS:
            body[name] = value
        elif name in ("generationConfig", "generation_config") and isinstance(value, dict):
            generation.update(value)
        else:
            generation[GENERATION_FIELDS.get(name, name)] = value
    if generation:
        body["generationConfig"] = generation
    return body


def _declaration(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec["name"],
        "description": spec["description"],
        "parametersJsonSchema": spec["inputSchema"]["json"],
    }


def _calling_config(choice: dict[str, Any]) -> dict[str, Any]:
    if "any" in choice:
        return {"mode": "ANY"}
    if "tool" in choice:
        return {"mode": "ANY", "allowedFunctionNames": [choice["tool"]["name"]]}
    if "none" in choice:
        return {"mode": "NONE"}
    return {"mode": "AUTO"}


def _contents(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Converse history -> Gemini ``contents``.

    Raises:
        UsageError: naming the first message that cannot be translated.
    """
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # toolUseId -> function name, for the functionResponses
    for position, message in enumerate(messages):
        try:
            if message["role"] == "assistant":
                parts = _model_parts(message["content"], names)
                role = "model"
            else:
                parts = _user_parts(message["content"], names)
                role = "user"
        except _MALFORMED as exc:
            raise UsageError(
                f"cannot send messages[{position}] to Gemini ({type(exc).__name__}: {exc}); "
                "validate_history/repair_history can help"
            ) from exc
        if parts:
            contents.append({"role": role, "parts": parts})
    return contents


def _model_parts(blocks: Sequence[ContentBlock], names: dict[str, str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    pending: str | None = None  # a signature waiting for the part that follows it
    for block in blocks:
        if "reasoningContent" in block:
            signature, thought = _gemini_reasoning(block["reasoningContent"])
            if signature is None:
                continue  # another wire's reasoning, or unsigned: Gemini cannot verify it
            if thought:
                if pending is not None:  # a part's own signature: the pending one went before
                    _sign_last(parts, pending)
                    pending = None
                parts.append({"text": thought, "thought": True, "thoughtSignature": signature})
                continue
            if pending is not None:
                _sign_last(parts, pending)  # two in a row: the first was its part's last
            pending = signature
            continue
        part: dict[str, Any]
        if "text" in block:
            part = {"text": block["text"]}
        elif "toolUse" in block:
            use = block["toolUse"]
            names[use["toolUseId"]] = use["name"]
            call = {"id": use["toolUseId"], "name": use["name"], "args": dict(use["input"])}
            part = {"functionCall": call}
        else:
            continue  # images and documents are user content on every wire
        if pending is not None:
            part["thoughtSignature"] = pending
            pending = None
        parts.append(part)
    if pending is not None:
        _sign_last(parts, pending)
    _sign_function_calls(parts)
    return parts


def _gemini_reasoning(reasoning: Mapping[str, Any]) -> tuple[str | None, str]:
    """``(signature, thought text)`` of a reasoning block Gemini signed, else ``(None, "")``."""
    text = reasoning.get("reasoningText")
    if not isinstance(text, Mapping):
        return None, ""
    signature = untag(WIRE, text.get("signature"))
    if signature is None:
        return None, ""
    return signature, str(text.get("text") or "")


def _sign_last(parts: list[dict[str, Any]], signature: str) -> None:
    if parts and "thoughtSignature" not in parts[-1]:
        parts[-1]["thoughtSignature"] = signature


def _sign_function_calls(parts: list[dict[str, Any]]) -> None:
    """The first ``functionCall`` of a model turn carries a signature (Gemini 3 checks it):
    one Gemini did not make gets the documented placeholder."""
    for part in parts:
        if "functionCall" in part:
            part.setdefault("thoughtSignature", SKIP_SIGNATURE)
            return


def _user_parts(blocks: Sequence[ContentBlock], names: dict[str, str]) -> list[dict[str, Any]]:
    """Function responses first (they answer the previous model turn), then the user's parts."""
    responses: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if "toolResult" in block:
            result = block["toolResult"]
            tool_use_id = result["toolUseId"]
            response = {
                "id": tool_use_id,
                "name": names.get(tool_use_id, "unknown_tool"),
                "response": _response(result),
            }
            responses.append({"functionResponse": response})
        elif "text" in block:
            parts.append({"text": block["text"]})
        elif "image" in block:
            parts.append(_image_part(block["image"]))
        elif "document" in block:
            parts.append(_document_part(block["document"]))
    return responses + parts


def _response(result: Mapping[str, Any]) -> dict[str, Any]:
    """A ``toolResult`` as a ``functionResponse.response`` object: ``{"output": ...}`` or
    ``{"error": ...}`` (the keys Gemini's documentation names)."""
    values: list[Any] = []
    for item in result.get("content", []):
        if "text" in item:
            values.append(item["text"])
        elif "json" in item:
            values.append(item["json"])
        elif "image" in item:  # Gemini 2.x function responses carry no media
            image = item["image"]
            fmt = image.get("format", "image") if isinstance(image, dict) else "image"
            values.append(f"[{fmt} image not shown: function responses take no images here]")
    if len(values) == 1:
        value: Any = values[0]
    elif all(isinstance(v, str) for v in values):
        value = "\n".join(values)
    else:
        value = values
    key = "error" if result.get("status") == "error" else "output"
    return {key: value}


def _encoded(data: Any) -> str:
    """``source.bytes`` as base64 text (a history loaded from JSON already holds base64)."""
    if isinstance(data, str):
        return data
    return base64.b64encode(bytes(data)).decode("ascii")


def _image_part(image: Mapping[str, Any]) -> dict[str, Any]:
    fmt = str(image.get("format", "png")).lower()
    data = image.get("source", {}).get("bytes", b"")
    mime = _IMAGE_TYPES.get(fmt, f"image/{fmt}")
    return {"inlineData": {"mimeType": mime, "data": _encoded(data)}}


def _document_part(document: Mapping[str, Any]) -> dict[str, Any]:
    fmt = str(document.get("format", "txt")).lower()
    name = document.get("name", "document")
    data = document.get("source", {}).get("bytes", b"")
    mime = _DOCUMENT_TYPES.get(fmt)
    if mime is not None:
        return {"inlineData": {"mimeType": mime, "data": _encoded(data)}}
    # doc, docx, xls, xlsx: Gemini reads no Office files inline; say so rather than fail.
    return {"text": f"[document {name} ({fmt}) not shown: Gemini takes no {fmt} files inline]"}
