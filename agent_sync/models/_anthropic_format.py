"""Translation between Converse shapes and the Anthropic Messages API.

Two directions, no I/O:

* :func:`build_body` turns a :class:`~agent_sync.models.base.ModelRequest` into the JSON
  body of ``POST /v1/messages``. It is forgiving where Anthropic is strict: blank text
  blocks are dropped (the API rejects them), consecutive messages of one role are merged,
  ``toolResult`` blocks go first in their message (the API requires it), and reasoning
  without a signature (from another provider) is dropped, since Anthropic cannot verify it.
  A request without tools sends the history's tool calls and results as text: the API
  refuses ``tool_use``/``tool_result`` blocks in a request that defines no tools (as after
  a structured-output call answered through the output tool, or tools since removed).
* :class:`EventTranslator` turns the decoded JSON of the stream's events
  (``message_start``, ``content_block_*``, ``message_delta``, ``message_stop``) into
  Converse :data:`~agent_sync.messages.StreamEvent` dicts, one call per event on the hot
  path. It reads plain dicts, not the SDK's pydantic event models: building those costs
  about a third of the time of iterating a stream, for objects we would at once convert.
  A whole ``Message`` (a server that answers ``stream: true`` with JSON) goes through the
  same translator as the events it stands for: :func:`message_events`.

Prompt caching (``request.cache``, DESIGN.md 4b): ``cache_control`` on the system prompt,
the last tool spec and the last block of the message before the new prompt; ``"ttl": "1h"``
for ``"long"``. Usage keeps Anthropic's meaning of ``input_tokens`` (the uncached rest of the
prompt) and adds ``cacheReadInputTokens``/``cacheWriteInputTokens`` when the server reports
``cache_read_input_tokens``/``cache_creation_input_tokens``.

Boundary rule: nothing malformed escapes as a raw ``TypeError``/``KeyError``/... A history
:func:`build_body` cannot express raises :class:`~agent_sync.errors.UsageError` naming the
message (the caller's input); an event :meth:`EventTranslator.translate` cannot read raises
:class:`~agent_sync.errors.ModelStreamError` (the server's output).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import ModelError, ModelStreamError, UsageError
from ..messages import Message, StreamEvent, ToolSpec, Usage
from .base import CacheMode, ModelRequest

__all__ = [
    "CALL_OPTIONS",
    "EventTranslator",
    "build_body",
    "map_stop_reason",
    "message_events",
]

logger = logging.getLogger(__name__)

CALL_OPTIONS = frozenset({"extra_headers", "extra_query", "timeout"})
"""Parameters that are SDK call options, not fields of the request body."""

_PARAM_ALIASES = {  # Converse inferenceConfig spellings -> Anthropic
    "maxTokens": "max_tokens",
    "topP": "top_p",
    "topK": "top_k",
    "stopSequences": "stop_sequences",
}

_STOP_REASONS = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "content_filtered",
    # The answer was cut off by the window rather than by max_tokens: same remedy for users.
    "model_context_window_exceeded": "max_tokens",
}

_IMAGE_TYPES = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "jpg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
_TEXT_DOCUMENTS = frozenset({"txt", "md", "csv", "html"})

_MALFORMED = (AttributeError, IndexError, KeyError, TypeError, ValueError)
"""What translating malformed content raises (``ValueError`` covers ``json.dumps`` of a
circular or oversized value)."""

_UNCACHEABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Blocks the API refuses a ``cache_control`` on."""


def map_stop_reason(reason: str | None) -> str:
    """Anthropic stop reason -> Converse stop reason; unknown ones pass through as-is."""
    if reason is None:
        return "end_turn"
    return _STOP_REASONS.get(reason, reason)


# --- request -----------------------------------------------------------------------------


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
    if not text.get("signature"):
        return None  # unsigned reasoning (another provider's) would be rejected
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


# --- response stream ---------------------------------------------------------------------


class EventTranslator:
    """Anthropic raw stream events -> Converse stream events. One per model call.

    Attributes:
        finished: ``message_stop`` was seen (a stream ending without it was truncated).
        stop_reason: Anthropic's raw stop reason, once ``message_delta`` reported it.
    """

    __slots__ = (
        "_cache_read",
        "_cache_write",
        "_ignored",
        "_input_tokens",
        "_output_tokens",
        "_started",
        "finished",
        "stop_reason",
    )

    def __init__(self) -> None:
        self._ignored: set[int] = set()  # indexes of block types we do not surface
        self._input_tokens = 0
        self._output_tokens = 0
        self._cache_read: int | None = None  # None: the server did not report it
        self._cache_write: int | None = None
        self._started = time.monotonic()
        self.finished = False
        self.stop_reason: str | None = None

    def translate(self, event: dict[str, Any]) -> Iterable[StreamEvent]:
        """The Converse events for one Anthropic event (often one, sometimes none).

        Raises:
            agent_sync.errors.ModelStreamError: The event is malformed (wrong shape or
                types); never a raw ``KeyError``/``TypeError``.
        """
        try:
            return self._translate(event)
        except _MALFORMED as exc:
            raise ModelStreamError(
                f"malformed Anthropic stream event: {type(exc).__name__}: {exc}"[:500],
                provider="anthropic",
            ) from exc

    def _usage(self, usage: Any) -> None:
        # message_start carries the input figures; message_delta may update any of them.
        if usage is None:
            return
        self._input_tokens = _tokens(usage, "input_tokens", self._input_tokens)
        self._output_tokens = _tokens(usage, "output_tokens", self._output_tokens)
        self._cache_read = _tokens(usage, "cache_read_input_tokens", self._cache_read)
        self._cache_write = _tokens(usage, "cache_creation_input_tokens", self._cache_write)

    def _translate(self, event: dict[str, Any]) -> Iterable[StreamEvent]:
        kind = event["type"]
        if kind == "content_block_delta":
            index = event["index"]
            if self._ignored and index in self._ignored:
                return ()
            return self._delta(index, event["delta"])
        if kind == "content_block_start":
            return self._start(event["index"], event["content_block"])
        if kind == "content_block_stop":
            index = event["index"]
            if index in self._ignored:
                return ()
            return ({"contentBlockStop": {"contentBlockIndex": index}},)
        if kind == "message_start":
            usage = event["message"].get("usage")
            self._usage(usage)
            if usage is None:
                return ({"messageStart": {"role": "assistant"}},)
            # the input figures now, so a call cancelled mid-stream still counts them
            # (the assembler keeps the last usage: message_stop's replaces this one)
            return (
                {"messageStart": {"role": "assistant"}},
                {"metadata": {"usage": self._counts()}},
            )
        if kind == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason") or self.stop_reason
            self._usage(event.get("usage"))
            return ()
        if kind == "message_stop":
            self.finished = True
            return self._stop()
        logger.debug("event=<%s> | ignoring unknown anthropic stream event", kind)
        return ()

    def _delta(self, index: int, delta: dict[str, Any]) -> Iterable[StreamEvent]:
        kind = delta["type"]
        if kind == "text_delta":
            return (_delta(index, {"text": delta["text"]}),)
        if kind == "input_json_delta":
            return (_delta(index, {"toolUse": {"input": delta["partial_json"]}}),)
        if kind == "thinking_delta":
            return (_delta(index, {"reasoningContent": {"text": delta["thinking"]}}),)
        if kind == "signature_delta":
            return (_delta(index, {"reasoningContent": {"signature": delta["signature"]}}),)
        return ()  # citations and future delta types: not part of the Converse text

    def _start(self, index: int, block: dict[str, Any]) -> Iterable[StreamEvent]:
        kind = block["type"]
        if kind == "text":
            text = block.get("text")
            return (_delta(index, {"text": text}),) if text else ()
        if kind == "tool_use":
            start: StreamEvent = {
                "contentBlockStart": {
                    "contentBlockIndex": index,
                    "start": {"toolUse": {"toolUseId": block["id"], "name": block["name"]}},
                }
            }
            if block.get("input"):  # normally {} with the JSON in deltas; proxies may differ
                whole = json.dumps(block["input"])
                return (start, _delta(index, {"toolUse": {"input": whole}}))
            return (start,)
        if kind == "thinking":
            reasoning: dict[str, Any] = {}
            if block.get("thinking"):
                reasoning["text"] = block["thinking"]
            if block.get("signature"):
                reasoning["signature"] = block["signature"]
            # A delta even when empty: it declares the block as reasoning for the assembler.
            return (_delta(index, {"reasoningContent": reasoning or {"text": ""}}),)
        if kind == "redacted_thinking":
            redacted = {"redactedContent": block["data"].encode("utf-8")}
            return (_delta(index, {"reasoningContent": redacted}),)
        self._ignored.add(index)  # server tools and other blocks the loop cannot act on
        logger.debug("block_type=<%s> | ignoring anthropic content block", kind)
        return ()

    def _counts(self) -> Usage:
        # inputTokens is Anthropic's input_tokens: the prompt tokens *not* read from or
        # written to the cache. totalTokens counts every token the call processed.
        cached = (self._cache_read or 0) + (self._cache_write or 0)
        usage: Usage = {
            "inputTokens": self._input_tokens,
            "outputTokens": self._output_tokens,
            "totalTokens": self._input_tokens + cached + self._output_tokens,
        }
        if self._cache_read is not None:
            usage["cacheReadInputTokens"] = self._cache_read
        if self._cache_write is not None:
            usage["cacheWriteInputTokens"] = self._cache_write
        return usage

    def _stop(self) -> Iterable[StreamEvent]:
        latency_ms = int((time.monotonic() - self._started) * 1000)
        return (
            {"messageStop": {"stopReason": map_stop_reason(self.stop_reason)}},
            {"metadata": {"usage": self._counts(), "metrics": {"latencyMs": latency_ms}}},
        )


def _delta(index: int, delta: Any) -> StreamEvent:
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}


_T = TypeVar("_T", int, "int | None")


def _tokens(usage: Any, name: str, default: _T) -> int | _T:
    value = usage.get(name) if usage else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"usage {name} is {value!r}, not a token count")
    return int(value)


def message_events(message: Any) -> list[dict[str, Any]]:
    """The stream events a whole ``Message`` (``"type": "message"``) stands for.

    For servers that answer ``stream: true`` with one ``200 application/json`` Message
    (LiteLLM's ``/v1/messages`` with a mocked response): its text, tool calls, reasoning,
    stop reason and usage go through :class:`EventTranslator` like a stream would.

    Raises:
        agent_sync.errors.ModelStreamError: ``message`` is not a Message.
    """
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise ModelStreamError(
            f"JSON answer is not an Anthropic Message: {str(message)[:200]}",
            provider="anthropic",
        )
    usage = message.get("usage") or {}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": usage}}]
    for index, block in enumerate(message["content"]):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": message.get("stop_reason")}
    events.append({"type": "message_delta", "delta": delta, "usage": None})
    events.append({"type": "message_stop"})
    return events
