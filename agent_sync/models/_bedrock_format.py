"""Bedrock Converse wire format: request building and response events.

The history is already Converse-shaped, so translation is mostly *cleaning*: histories
built with other providers (or cancelled mid-turn) may hold things Bedrock rejects, and a
rejected request is a dead conversation. :func:`build_request` therefore

* drops empty text blocks (``ValidationException: text field is blank``) and blocks of
  kinds Bedrock does not know;
* drops reasoning blocks without a signature (other providers' reasoning cannot be
  replayed to Bedrock);
* keeps only the keys Bedrock accepts in ``toolUse`` / ``toolResult`` blocks;
* turns ``toolUse``/``toolResult`` blocks into text when the request carries no tools
  (Bedrock rejects tool blocks without a ``toolConfig``).

With ``cache`` set, :func:`build_request` adds ``cachePoint`` blocks after the system
prompt, after the last tool spec and at the end of the last message before the newest
user message (the prefix that stays the same from call to call); ``"long"`` asks for the
one-hour ``ttl``.

Stream events from botocore already have the agent's :data:`StreamEvent` shapes;
:func:`normalize_event` keeps the known keys, and :func:`converse_to_events` turns a
non-streaming ``converse`` response into the same event sequence.

Nothing malformed escapes as a raw ``TypeError``/``KeyError``: a history this module
cannot translate is a :class:`~agent_sync.errors.UsageError` naming the message, and a
response it cannot read is a :class:`~agent_sync.errors.ModelStreamError`
(:func:`guard_events`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from ..errors import AgentSyncError, ModelStreamError, UsageError
from ..messages import Message, StreamEvent, ToolSpec
from ._wire import MALFORMED as _MALFORMED
from ._wire import shorten, signature_owner
from .base import CacheMode

__all__ = [
    "build_request",
    "cache_point",
    "converse_to_events",
    "guard_events",
    "normalize_event",
    "split_params",
]

logger = logging.getLogger(__name__)

_INFERENCE_KEYS = {
    "maxTokens": "maxTokens",
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "topP": "topP",
    "top_p": "topP",
    "stopSequences": "stopSequences",
    "stop_sequences": "stopSequences",
}
# Top-level Converse request members a user may set through **params.
_TOP_LEVEL_KEYS = {
    "additionalModelRequestFields": "additionalModelRequestFields",
    "additional_model_request_fields": "additionalModelRequestFields",
    "additionalModelResponseFieldPaths": "additionalModelResponseFieldPaths",
    "guardrailConfig": "guardrailConfig",
    "guardrail_config": "guardrailConfig",
    "performanceConfig": "performanceConfig",
    "requestMetadata": "requestMetadata",
    "promptVariables": "promptVariables",
    "serviceTier": "serviceTier",
    "inferenceConfig": "inferenceConfig",
}
_BLOCK_KINDS = frozenset(
    {
        "text",
        "image",
        "document",
        "video",
        "audio",
        "toolUse",
        "toolResult",
        "guardContent",
        "cachePoint",
        "reasoningContent",
        "citationsContent",
        "searchResult",
    }
)
_TOOL_RESULT_KINDS = frozenset({"json", "text", "image", "document", "video", "searchResult"})
_CACHE_TTL: dict[str, str] = {"long": "1h"}
_USAGE_KEYS = ("cacheReadInputTokens", "cacheWriteInputTokens")


def cache_point(cache: CacheMode) -> dict[str, Any]:
    """The ``cachePoint`` block for ``cache`` (``"long"``: ``ttl`` one hour)."""
    point: dict[str, Any] = {"type": "default"}
    if cache in _CACHE_TTL:
        point["ttl"] = _CACHE_TTL[cache]
    return {"cachePoint": point}


def split_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``params`` and arrange them as Converse request members.

    Args:
        params: ``max_tokens``/``maxTokens``, ``temperature``, ``top_p``/``topP``,
            ``stop_sequences``/``stopSequences`` and top-level Converse members such as
            ``additional_model_request_fields``.

    Returns:
        ``{"inferenceConfig": {...}, <other members>}`` (empty members omitted).

    Raises:
        UsageError: For a parameter Bedrock's Converse API does not have.
    """
    inference: dict[str, Any] = {}
    members: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        if key in _INFERENCE_KEYS:
            inference[_INFERENCE_KEYS[key]] = value
        elif key in _TOP_LEVEL_KEYS:
            name = _TOP_LEVEL_KEYS[key]
            if name == "inferenceConfig":
                inference.update(value)
            else:
                members[name] = value
        else:
            known = sorted(set(_INFERENCE_KEYS) | set(_TOP_LEVEL_KEYS))
            raise UsageError(
                f"unknown Bedrock parameter {key!r}; known: {', '.join(known)} "
                "(model-specific fields go in additional_model_request_fields)"
            )
    if inference:
        members["inferenceConfig"] = inference
    return members


def build_request(
    model_id: str,
    messages: Sequence[Message],
    system_prompt: str | None,
    tool_specs: Sequence[ToolSpec],
    tool_choice: Mapping[str, Any] | None,
    params: Mapping[str, Any],
    cache: CacheMode | None = None,
) -> dict[str, Any]:
    """Build the keyword arguments of ``converse`` / ``converse_stream``.

    Args:
        model_id: Bedrock model id or inference profile ARN.
        messages: Converse-shaped history, oldest first.
        system_prompt: System instructions, or ``None``.
        tool_specs: Tools the model may call.
        tool_choice: Converse ``toolChoice`` (``{"auto": {}}`` ...) or ``None``.
        params: Model and per-request parameters (see :func:`split_params`).
        cache: ``None`` (no cache points), ``"short"`` or ``"long"``: ``cachePoint``
            blocks after the system prompt, the last tool spec and the last block of
            ``messages[-2]``.

    Returns:
        The request, ready for botocore.

    Raises:
        UsageError: For an unknown parameter, or a history or tool spec that cannot be
            translated (a message that is not a dict, a ``toolUse`` without an id...).
    """
    with_tools = bool(tool_specs)
    request: dict[str, Any] = {
        "modelId": model_id,
        "messages": [_translate(i, m, with_tools) for i, m in enumerate(messages)],
    }
    if system_prompt:
        request["system"] = [{"text": system_prompt}]
    if with_tools:
        try:
            specs = [{"toolSpec": dict(s)} for s in tool_specs]
        except _MALFORMED as exc:
            raise UsageError(f"a tool spec cannot be sent to Bedrock: {exc!r}") from exc
        tool_config: dict[str, Any] = {"tools": specs}
        if tool_choice:
            tool_config["toolChoice"] = dict(tool_choice)
        request["toolConfig"] = tool_config
    request.update(split_params(params))
    if cache is not None:
        _add_cache_points(request, cache)
    return request


def _add_cache_points(request: dict[str, Any], cache: CacheMode) -> None:
    # The stable prefix ends at each of these points; Bedrock caches everything before a
    # point (at most four per request: we place three).
    if "system" in request:
        request["system"].append(cache_point(cache))
    if "toolConfig" in request:
        request["toolConfig"]["tools"].append(cache_point(cache))
    messages = request["messages"]
    if len(messages) >= 2:
        messages[-2]["content"].append(cache_point(cache))


def _translate(index: int, message: Message, with_tools: bool) -> dict[str, Any]:
    try:
        return _clean_message(message, with_tools)
    except _MALFORMED as exc:
        raise UsageError(
            f"messages[{index}] cannot be sent to Bedrock: {type(exc).__name__}: "
            f"{shorten(exc, 200)} (agent_sync.validate_history lists the problems)"
        ) from exc


def _clean_message(message: Message, with_tools: bool) -> dict[str, Any]:
    blocks = [b for b in (_clean_block(b, with_tools) for b in message["content"]) if b]
    if not blocks:  # Bedrock rejects empty content; keep the turn so roles still alternate
        blocks = [{"text": "(empty)"}]
    return {"role": message["role"], "content": blocks}


def _clean_block(block: Mapping[str, Any], with_tools: bool) -> dict[str, Any] | None:
    kind = next(iter(block), None)
    if len(block) != 1 or kind not in _BLOCK_KINDS:
        logger.debug("block_keys=<%s> | dropping a block Bedrock does not accept", list(block))
        return None
    value = block[kind]
    if kind == "text":
        return {"text": value} if isinstance(value, str) and value.strip() else None
    if kind == "reasoningContent":
        return _clean_reasoning(value)
    if kind == "toolUse":
        if not with_tools:
            name, args = value.get("name"), json.dumps(value.get("input", {}))
            return {"text": f"[called tool {name} with {args}]"}
        return {
            "toolUse": {
                "toolUseId": value["toolUseId"],
                "name": value["name"],
                "input": value.get("input") or {},
            }
        }
    if kind == "toolResult":
        return _clean_tool_result(value, with_tools)
    return {kind: value}


def _clean_reasoning(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    if "redactedContent" in value:
        return {"reasoningContent": {"redactedContent": value["redactedContent"]}}
    reasoning = value.get("reasoningText")
    if (
        isinstance(reasoning, Mapping)
        and reasoning.get("signature")
        and reasoning.get("text")
        and signature_owner(reasoning["signature"]) is None  # not another wire's (Gemini's)
    ):
        text = {"text": reasoning["text"], "signature": reasoning["signature"]}
        return {"reasoningContent": {"reasoningText": text}}
    return None  # unsigned reasoning (another provider's) cannot be replayed to Bedrock


def _clean_tool_result(value: Mapping[str, Any], with_tools: bool) -> dict[str, Any]:
    content = [
        dict(item)
        for item in value.get("content", [])
        if isinstance(item, Mapping)
        and len(item) == 1
        and next(iter(item)) in _TOOL_RESULT_KINDS
        and item.get("text", "x") != ""
    ]
    if not content:
        content = [{"text": "(no output)"}]
    status = value.get("status", "success")
    if not with_tools:
        pieces = [str(item.get("text", json.dumps(item.get("json")))) for item in content]
        return {"text": f"[tool result ({status}): {' '.join(pieces)}]"}
    return {"toolResult": {"toolUseId": value["toolUseId"], "content": content, "status": status}}


# --- response -----------------------------------------------------------------------------

_EVENT_KINDS = frozenset(
    {
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    }
)


def normalize_event(event: Mapping[str, Any]) -> StreamEvent | None:
    """Keep a botocore stream event in the agent's shapes; ``None`` for unknown events."""
    for kind, body in event.items():
        if kind not in _EVENT_KINDS:
            continue
        if kind == "metadata":
            return cast(
                StreamEvent, {"metadata": _metadata(body.get("usage"), body.get("metrics"))}
            )
        if kind == "messageStop":
            return {"messageStop": {"stopReason": str(body.get("stopReason", "end_turn"))}}
        if kind == "contentBlockStart" and "toolUse" not in body.get("start", {}):
            return None  # only tool-use starts matter; other kinds start with a delta
        return cast(StreamEvent, {kind: body})
    logger.debug("event_keys=<%s> | ignoring unknown stream event", list(event))
    return None


def _metadata(usage: Any, metrics: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if isinstance(usage, Mapping):
        inputs = int(usage.get("inputTokens", 0))
        outputs = int(usage.get("outputTokens", 0))
        total = int(usage.get("totalTokens", inputs + outputs))
        counts = {"inputTokens": inputs, "outputTokens": outputs, "totalTokens": total}
        # Bedrock reports the cache figures under the Converse names already; inputTokens
        # excludes the cached tokens (read or written), as on Anthropic.
        counts.update({k: int(usage[k]) for k in _USAGE_KEYS if usage.get(k) is not None})
        metadata["usage"] = counts
    if isinstance(metrics, Mapping):
        metadata["metrics"] = dict(metrics)
    return metadata


def guard_events(events: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    """Pass ``events`` through; a malformed response becomes a :class:`ModelStreamError`.

    The one guard of the response side: whatever shape the server sent, the parsers
    (:func:`normalize_event`, :func:`converse_to_events`) raise only agent_sync errors.
    """
    try:
        yield from events
    except _MALFORMED as exc:
        if isinstance(exc, AgentSyncError):
            raise
        raise ModelStreamError(
            f"Bedrock sent a response that cannot be read: {type(exc).__name__}: "
            f"{shorten(exc, 200)}",
            provider="bedrock",
            retryable=False,
        ) from exc


def converse_to_events(response: Mapping[str, Any]) -> Iterator[StreamEvent]:
    """Replay a non-streaming ``converse`` response as the stream events it stands for."""
    message = response.get("output", {}).get("message", {})
    yield {"messageStart": {"role": "assistant"}}
    for index, block in enumerate(message.get("content", [])):
        if "text" in block:
            text: Any = {"text": block["text"]}
            yield {"contentBlockDelta": {"contentBlockIndex": index, "delta": text}}
        elif "toolUse" in block:
            use = block["toolUse"]
            start: Any = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            yield {"contentBlockStart": {"contentBlockIndex": index, "start": start}}
            delta: Any = {"toolUse": {"input": json.dumps(use.get("input", {}))}}
            yield {"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}
        elif "reasoningContent" in block:
            yield from _reasoning_deltas(index, block["reasoningContent"])
        else:
            continue  # citations, images...: nothing the agent assembles
        yield {"contentBlockStop": {"contentBlockIndex": index}}
    yield {"messageStop": {"stopReason": str(response.get("stopReason", "end_turn"))}}
    metadata: Any = _metadata(response.get("usage"), response.get("metrics"))
    yield {"metadata": metadata}


def _reasoning_deltas(index: int, reasoning: Mapping[str, Any]) -> Iterator[StreamEvent]:
    pieces: list[dict[str, Any]] = []
    if "redactedContent" in reasoning:
        pieces.append({"redactedContent": reasoning["redactedContent"]})
    text = reasoning.get("reasoningText", {})
    if text.get("text"):
        pieces.append({"text": text["text"]})
    if text.get("signature"):
        pieces.append({"signature": text["signature"]})
    for piece in pieces:
        delta: Any = {"reasoningContent": piece}
        yield {"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}
