"""The Anthropic Messages API's stream as Converse stream events: :class:`EventTranslator`.

The request side is :mod:`._anthropic_format`. :class:`EventTranslator` turns the decoded
JSON of the stream's events (``message_start``, ``content_block_*``, ``message_delta``,
``message_stop``) into Converse :data:`~agent_sync.messages.StreamEvent` dicts, one call per
event on the hot path. It reads plain dicts, not the SDK's pydantic event models: building
those costs about a third of the time of iterating a stream, for objects we would at once
convert. A whole ``Message`` (a server that answers ``stream: true`` with JSON) goes through
the same translator as the events it stands for: :func:`message_events`.

Usage keeps Anthropic's meaning of ``input_tokens`` (the uncached rest of the prompt) and
adds ``cacheReadInputTokens``/``cacheWriteInputTokens`` when the server reports
``cache_read_input_tokens``/``cache_creation_input_tokens``.

Boundary rule: nothing malformed escapes as a raw ``TypeError``/``KeyError``/... An event
:meth:`EventTranslator.translate` cannot read raises
:class:`~agent_sync.errors.ModelStreamError` (the server's output).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any, TypeVar

from ..errors import ModelStreamError
from ..messages import StreamEvent, Usage
from ._response import message_stop
from ._wire import MALFORMED as _MALFORMED

__all__ = ["EventTranslator", "map_stop_reason", "message_events"]

logger = logging.getLogger(__name__)

_STOP_REASONS = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "content_filtered",
    # The answer was cut off by the window rather than by max_tokens: same remedy for users.
    "model_context_window_exceeded": "max_tokens",
}


def map_stop_reason(reason: str | None) -> str:
    """Anthropic stop reason -> Converse stop reason; unknown ones pass through as-is."""
    if reason is None:
        return "end_turn"
    return _STOP_REASONS.get(reason, reason)


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
        "_response",
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
        self._response: dict[str, Any] = {}  # message_start's message: its id and model
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
            self._response = event["message"]
            usage = self._response.get("usage")
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
            message_stop(
                map_stop_reason(self.stop_reason),
                provider_reason=self.stop_reason,
                response_id=self._response.get("id"),
                response_model=self._response.get("model"),
            ),
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
