"""Assembling model stream events into an assistant message.

:class:`MessageAssembler` is fed every :data:`~agent_sync.messages.StreamEvent` of one model
call, in order, and returns the user-facing delta (if any) for each, so the loop does one
dict lookup per event on its hot path. At the end it builds either

* the complete message (:meth:`MessageAssembler.finish`): text, reasoning and tool-use
  blocks in index order, tool input JSON parsed from its deltas; input that is not a JSON
  object is recorded in ``invalid_tool_inputs`` (the block keeps ``input: {}`` so the
  history stays valid for every provider, and the loop answers it with an error result), or
* the partial message after a cancel (:meth:`MessageAssembler.partial`): the text streamed
  so far and completed reasoning, no tool-use blocks (a half-received call can be neither
  run nor answered honestly).

The assembler is where every provider's stream enters the run, so it is the edge that makes
the model's output encodable (:mod:`agent_sync._encodable`): lone surrogates in text,
reasoning, tool ids and names are replaced, and tool input holding a non-finite number
(``NaN``, ``Infinity``, ``1e400``) is invalid input, answered with an error result the model
can act on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .._encodable import Unencodable, clean_text, parse_json
from ..errors import ModelStreamError
from ..events import ReasoningDelta, TextDelta
from ..messages import (
    OPTIONAL_USAGE_KEYS,
    ContentBlock,
    Message,
    MessageStopEvent,
    StreamEvent,
    Usage,
)

__all__ = ["EMPTY_RESPONSE_TEXT", "AssembledMessage", "MessageAssembler"]

EMPTY_RESPONSE_TEXT = "(empty response)"
"""Stored when a model ends a turn with no content: providers reject empty messages."""


@dataclass(kw_only=True)
class AssembledMessage:
    """The outcome of one model call.

    Attributes:
        message: The assistant message, ready for the history.
        stop_reason: The model's stop reason (``"end_turn"`` if it sent none).
        usage: Token usage reported by the stream, if any.
        invalid_tool_inputs: ``toolUseId`` -> why its input could not be used.
        tool_input_texts: ``toolUseId`` -> the input's JSON text as it streamed, where that
            text is the JSON of the block's ``input`` as it is (nothing was cleaned): the
            text of a typed answer without encoding its value again.
    """

    message: Message
    stop_reason: str
    usage: Usage | None
    invalid_tool_inputs: dict[str, str] = field(default_factory=dict)
    tool_input_texts: dict[str, str] = field(default_factory=dict)


class _Block:
    __slots__ = ("done", "kind", "name", "parts", "redacted", "signature", "tool_use_id")

    def __init__(self, kind: str, tool_use_id: str = "", name: str = "") -> None:
        self.kind = kind  # "text" | "toolUse" | "reasoning"
        self.parts: list[str] = []
        self.tool_use_id = tool_use_id
        self.name = name
        self.signature: str | None = None
        self.redacted: bytes | None = None
        self.done = False


class MessageAssembler:
    """Accumulates one model call's stream events. Not thread-safe (one per call)."""

    __slots__ = ("_blocks", "_emit", "_run_id", "first_text_at", "stop", "stop_reason", "usage")

    def __init__(self, *, emit_deltas: bool = True, run_id: str = "") -> None:
        """Args:
        emit_deltas: Return user-facing delta events from :meth:`add` (``invoke()``
            needs none, so it skips building one object per chunk).
        run_id: The run the deltas belong to.
        """
        self._blocks: dict[int, _Block] = {}
        self._emit = emit_deltas
        self._run_id = run_id
        self.stop_reason: str | None = None
        self.stop: MessageStopEvent | None = None
        """The stream's ``messageStop`` as it came (with what the provider said of its
        response: its own stop reason, id and model, for tracing)."""
        self.usage: Usage | None = None
        self.first_text_at: float | None = None

    def add(self, event: StreamEvent) -> TextDelta | ReasoningDelta | None:
        """Record one event; return the delta to show the user, if it carries one.

        Raises:
            ModelStreamError: The event contradicts earlier ones (e.g. text for a tool block).
        """
        delta_event = event.get("contentBlockDelta")
        if delta_event is not None:
            delta = delta_event["delta"]
            text = delta.get("text")
            if text is None:
                piece = delta.get("toolUse")
                if piece is None:
                    return self._add_other_delta(delta_event["contentBlockIndex"], delta)
                # the other hot path: a piece of a tool's input (a typed answer's, say)
                index = delta_event["contentBlockIndex"]
                block = self._blocks.get(index)
                if block is None or block.kind != "toolUse":
                    raise ModelStreamError(f"tool input delta for block {index} that is not a tool")
                block.parts.append(piece.get("input", ""))
                return None
            # the hot path: one text chunk
            index = delta_event["contentBlockIndex"]
            block = self._blocks.get(index)
            if block is None:
                block = self._blocks[index] = _Block("text")
                if self.first_text_at is None:
                    self.first_text_at = time.perf_counter()
            elif block.kind != "text":
                raise ModelStreamError(f"text delta for {block.kind} block {index}")
            text = clean_text(text)
            block.parts.append(text)
            return TextDelta(text=text, run_id=self._run_id) if text and self._emit else None
        start = event.get("contentBlockStart")
        if start is not None:
            tool = start["start"].get("toolUse")
            index = start["contentBlockIndex"]
            if tool is not None:
                tool_use_id, name = clean_text(tool["toolUseId"]), clean_text(tool["name"])
                self._blocks[index] = _Block("toolUse", tool_use_id, name)
            return None
        stop = event.get("contentBlockStop")
        if stop is not None:
            block = self._blocks.get(stop["contentBlockIndex"])
            if block is not None:
                block.done = True
            return None
        message_stop = event.get("messageStop")
        if message_stop is not None:
            self.stop = message_stop
            self.stop_reason = clean_text(message_stop.get("stopReason") or "end_turn")
            return None
        metadata = event.get("metadata")
        if metadata is not None and "usage" in metadata:
            self.usage = _normalise_usage(metadata["usage"])
        return None

    def _add_other_delta(self, index: int, delta: Any) -> ReasoningDelta | None:
        block = self._blocks.get(index)
        reasoning = delta.get("reasoningContent")
        if reasoning is not None:
            if block is None:
                block = self._blocks[index] = _Block("reasoning")
                if self.first_text_at is None:
                    self.first_text_at = time.perf_counter()
            elif block.kind != "reasoning":
                raise ModelStreamError(f"reasoning delta for {block.kind} block {index}")
            if "signature" in reasoning:
                block.signature = (block.signature or "") + clean_text(reasoning["signature"])
            if "redactedContent" in reasoning:
                block.redacted = reasoning["redactedContent"]
            piece = reasoning.get("text")
            if piece:
                piece = clean_text(piece)
                block.parts.append(piece)
                return ReasoningDelta(text=piece, run_id=self._run_id) if self._emit else None
        return None

    def finish(self) -> AssembledMessage:
        """The complete message once the stream has ended normally."""
        content: list[ContentBlock] = []
        invalid: dict[str, str] = {}
        texts: dict[str, str] = {}
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.kind == "toolUse":
                raw = "".join(block.parts)
                tool_input, problem, as_is = _parse_tool_input(raw)
                if problem is not None:
                    invalid[block.tool_use_id] = problem
                elif as_is:
                    texts[block.tool_use_id] = raw
                content.append(
                    {
                        "toolUse": {
                            "toolUseId": block.tool_use_id,
                            "name": block.name,
                            "input": tool_input,
                        }
                    }
                )
            else:
                _append_content(content, block)
        if not content:
            content.append({"text": EMPTY_RESPONSE_TEXT})
        return AssembledMessage(
            message={"role": "assistant", "content": content},
            stop_reason=self.stop_reason or "end_turn",
            usage=self.usage,
            invalid_tool_inputs=invalid,
            tool_input_texts=texts,
        )

    def set_text(self, index: int, text: str) -> None:
        """Replace what block ``index`` streamed (the output guardrails' released text,
        before :meth:`finish`: the history keeps only what they released): a text block's
        text, a reasoning block's text, a tool's input JSON. Reasoning whose text changed
        loses its signature (it no longer signs that text: the providers drop it)."""
        block = self._blocks.get(index)
        if block is None:
            return
        if block.kind == "reasoning" and "".join(block.parts) != text:
            block.signature = None
        block.parts = [text]

    def partial(self, closing_text: str) -> Message:
        """The message so far, for a cancelled call, ending with ``closing_text``.

        Keeps streamed text (even of an unfinished block) and completed reasoning; drops
        tool-use blocks and unfinished reasoning.
        """
        content: list[ContentBlock] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.kind == "text" or (block.kind == "reasoning" and block.done):
                _append_content(content, block)
        content.append({"text": closing_text})
        return {"role": "assistant", "content": content}


def _append_content(content: list[ContentBlock], block: _Block) -> None:
    text = "".join(block.parts)
    if block.kind == "text":
        if text.strip():  # providers reject blank text blocks
            content.append({"text": text})
        return
    if block.redacted is not None:
        content.append({"reasoningContent": {"redactedContent": block.redacted}})
        return
    reasoning: dict[str, Any] = {"text": text}
    if block.signature is not None:
        reasoning["signature"] = block.signature
    content.append({"reasoningContent": {"reasoningText": reasoning}})  # type: ignore[typeddict-item]


def _parse_tool_input(raw: str) -> tuple[dict[str, Any], str | None, bool]:
    """The input, why it cannot be used (or ``None``), and whether ``raw`` is its JSON as is."""
    if not raw.strip():
        return {}, None, False
    try:
        value, as_is = parse_json(raw, what="the tool input")
    except Unencodable as exc:  # too deep, or NaN
        return {}, str(exc), False
    except ValueError as exc:
        shown = raw if len(raw) <= 200 else raw[:200] + "..."
        return {}, f"the tool input is not valid JSON ({exc}): {shown}", False
    if not isinstance(value, dict):
        return {}, f"the tool input must be a JSON object, got {type(value).__name__}", False
    return value, None, as_is


def _normalise_usage(usage: Any) -> Usage:
    input_tokens = int(usage.get("inputTokens") or 0)
    output_tokens = int(usage.get("outputTokens") or 0)
    total = usage.get("totalTokens")
    normalised: dict[str, int] = {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": int(total) if total is not None else input_tokens + output_tokens,
    }
    for key in OPTIONAL_USAGE_KEYS:  # cache and reasoning counts: when the provider reports them
        value = usage.get(key)
        if value is not None:
            normalised[key] = int(value)
    return normalised  # type: ignore[return-value]
