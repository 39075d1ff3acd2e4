"""The Gemini ``GenerateContentResponse`` stream as Converse stream events.

The request side is :mod:`._gemini_format` (it explains how thought signatures are kept).
Each SSE event of ``streamGenerateContent?alt=sse`` is one ``GenerateContentResponse``
whose ``candidates[0].content.parts`` continue the answer:

* ``text`` parts stream as one text block; ``thought: true`` parts as one reasoning block;
* each ``functionCall`` part (whole, never split) is one ``toolUse`` block, whose id is the
  call's ``id`` when Gemini sent one, else one made here (``gcall_<hex>``): the request
  side sends it back in the ``functionCall`` and its ``functionResponse``;
* a ``thoughtSignature`` becomes a reasoning block with empty text and the tagged signature:
  before the ``toolUse`` block of a signed call, after the text block of a signed text part
  (a signed thought keeps it in its own reasoning block);
* ``finishReason`` ends the message (:data:`FINISH_REASONS`); ``promptFeedback.blockReason``
  without candidates is a blocked prompt: an empty message stopped as ``content_filtered``;
* ``usageMetadata`` (repeated, cumulative) is kept and reported once at the end
  (:func:`converse_usage`).

Boundary rule: a chunk the translator cannot read raises
:class:`~agent_sync.errors.ModelStreamError` (the server's output).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..errors import ModelStreamError
from ..messages import StreamEvent, Usage
from ._gemini_format import WIRE
from ._reasoning import tag
from ._response import message_stop
from ._wire import MALFORMED as _MALFORMED

__all__ = ["FINISH_REASONS", "FILTERED", "ResponseTranslator", "converse_usage"]

PROVIDER = "gemini"

FILTERED = "content_filtered"
"""The stop reason of an answer (or a prompt) Gemini blocked."""

FINISH_REASONS = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    **dict.fromkeys(
        ("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE",
         "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR"),
        FILTERED,
    ),
}  # fmt: skip
"""Gemini ``finishReason`` -> Converse ``stopReason``; others pass through lower-cased."""

_BROKEN_CALLS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})
"""Finish reasons of a function call the model botched: a retryable stream error (another
try usually succeeds; the loop retries only before any content)."""


def converse_usage(usage: dict[str, Any]) -> Usage:
    """Gemini ``usageMetadata`` -> Converse usage.

    ``inputTokens`` is ``promptTokenCount``, which *includes* the cached tokens (as OpenAI's);
    ``outputTokens`` adds ``thoughtsTokenCount`` to ``candidatesTokenCount`` (thinking is
    billed as output) and ``reasoningTokens`` is ``thoughtsTokenCount``;
    ``cacheReadInputTokens`` is ``cachedContentTokenCount``; each only when reported.
    """
    prompt = int(usage.get("promptTokenCount") or 0)
    output = int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
    total = int(usage.get("totalTokenCount") or prompt + output)
    converse: Usage = {"inputTokens": prompt, "outputTokens": output, "totalTokens": total}
    cached = usage.get("cachedContentTokenCount")
    if cached is not None:
        converse["cacheReadInputTokens"] = int(cached)
    thoughts = usage.get("thoughtsTokenCount")
    if thoughts is not None:
        converse["reasoningTokens"] = int(thoughts)
    return converse


def _malformed(exc: BaseException) -> ModelStreamError:
    return ModelStreamError(
        f"malformed stream chunk from Gemini: {type(exc).__name__}: {exc}"[:500],
        provider=PROVIDER,
    )


class ResponseTranslator:
    """Turns one response's ``GenerateContentResponse`` chunks into Converse stream events.

    Not thread-safe: one per response. Feed every chunk to :meth:`add`, then call
    :meth:`finish` at the end of the body.

    Attributes:
        finished: Whether a ``finishReason`` (or a blocked prompt) has been seen.
    """

    __slots__ = ("_calls", "_index", "_open", "_open_kind", "_response", "_signature_after",
                 "_signed", "_started", "finished", "usage")  # fmt: skip

    def __init__(self) -> None:
        self._started = False
        self._index = 0  # the next content block index
        self._open: int | None = None  # the streaming text/reasoning block
        self._open_kind = ""
        self._signed = False  # the open reasoning block has its signature
        self._signature_after: str | None = None  # a signed text part's, after its block
        self._calls = 0
        self._response: dict[str, Any] = {}  # the first chunk: responseId, modelVersion
        self.finished = False
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        """Events for one chunk.

        Raises:
            ModelStreamError: The chunk cannot be read, or the model botched a call.
        """
        try:
            return self._add(chunk)
        except _MALFORMED as exc:
            raise _malformed(exc) from exc

    def finish(self) -> list[StreamEvent]:
        """Events that close the message (stop, usage) once the body has ended.

        Raises:
            ModelStreamError: The reported usage is not numbers.
        """
        try:
            out: list[StreamEvent] = []
            self._start(out)
            if not self.finished:
                self._stop(out, "end_turn")
            if self.usage is not None:
                out.append({"metadata": {"usage": converse_usage(self.usage)}})
            return out
        except _MALFORMED as exc:
            raise _malformed(exc) from exc

    # -- internals --

    def _start(self, out: list[StreamEvent]) -> None:
        if not self._started:
            self._started = True
            out.append({"messageStart": {"role": "assistant"}})

    def _add(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not self._started:
            self._response = chunk
        self._start(out)
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self.usage = usage
        candidates = chunk.get("candidates") or ()
        if not candidates:
            feedback = chunk.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason") and not self.finished:
                # the prompt was blocked: no answer at all
                self._stop(out, FILTERED, feedback["blockReason"])
            return out
        candidate = candidates[0]
        content = candidate.get("content") or {}
        for part in content.get("parts") or ():
            self._part(out, part)
        reason = candidate.get("finishReason")
        if reason and not self.finished:
            if reason in _BROKEN_CALLS:
                message = candidate.get("finishMessage") or reason
                raise ModelStreamError(
                    f"Gemini could not produce a valid function call ({reason}): {message}"[:500],
                    provider=PROVIDER,
                    retryable=True,
                )
            self._stop(out, FINISH_REASONS.get(reason, str(reason).lower()), reason)
        return out

    def _part(self, out: list[StreamEvent], part: dict[str, Any]) -> None:
        signature = part.get("thoughtSignature")
        if signature is not None and type(signature) is not str:  # noqa: E721
            raise TypeError(f"thoughtSignature is {type(signature).__name__}, not a string")
        if "functionCall" in part:
            self._close(out)
            if signature:
                self._signature_block(out, signature)
            self._call(out, part["functionCall"])
            return
        text = part.get("text")
        if text is None:
            return  # parts this agent does not use (executableCode, inlineData answers...)
        if type(text) is not str:  # noqa: E721
            raise TypeError(f"text part is {type(text).__name__}, not a string")
        if part.get("thought"):
            if self._open_kind != "reasoning" or self._signed:  # a signature ends its part
                self._close(out)
            if text or self._open is not None:
                self._piece(out, "reasoning", text)
            if signature:
                if self._open is None:
                    self._piece(out, "reasoning", "")
                self._signed = True
                tagged = tag(WIRE, signature)
                out.append(self._delta({"reasoningContent": {"signature": tagged}}))
            return
        if self._open_kind == "reasoning":
            self._close(out)
        if text:
            self._piece(out, "text", text)
        if signature:
            if self._open is None:
                self._signature_block(out, signature)  # an empty signed part: its own block
            else:
                self._signature_after = signature  # after the text, once its block closes

    def _piece(self, out: list[StreamEvent], kind: str, text: str) -> None:
        if self._open is None:
            self._open, self._open_kind, self._signed = self._index, kind, False
            self._index += 1
        delta: dict[str, Any] = (
            {"text": text} if kind == "text" else {"reasoningContent": {"text": text}}
        )
        out.append(self._delta(delta))

    def _delta(self, delta: dict[str, Any]) -> StreamEvent:
        return {"contentBlockDelta": {"contentBlockIndex": self._open, "delta": delta}}  # type: ignore[typeddict-item]

    def _close(self, out: list[StreamEvent]) -> None:
        if self._open is not None:
            out.append({"contentBlockStop": {"contentBlockIndex": self._open}})
            self._open, self._open_kind = None, ""
        if self._signature_after is not None:
            signature, self._signature_after = self._signature_after, None
            self._signature_block(out, signature)

    def _signature_block(self, out: list[StreamEvent], signature: str) -> None:
        index = self._index
        self._index += 1
        reasoning = {"text": "", "signature": tag(WIRE, signature)}
        out.append(
            {
                "contentBlockDelta": {
                    "contentBlockIndex": index,
                    "delta": {"reasoningContent": reasoning},  # type: ignore[typeddict-item]
                }
            }
        )
        out.append({"contentBlockStop": {"contentBlockIndex": index}})

    def _call(self, out: list[StreamEvent], call: dict[str, Any]) -> None:
        name = call["name"]
        if type(name) is not str or not name:  # noqa: E721
            raise TypeError("functionCall without a name")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"gcall_{uuid.uuid4().hex[:24]}"
        args = call.get("args")
        if args is None:
            args = {}
        index = self._index
        self._index += 1
        self._calls += 1
        out.append(
            {
                "contentBlockStart": {
                    "contentBlockIndex": index,
                    "start": {"toolUse": {"toolUseId": call_id, "name": name}},
                }
            }
        )
        out.append(
            {
                "contentBlockDelta": {
                    "contentBlockIndex": index,
                    "delta": {"toolUse": {"input": json.dumps(args)}},
                }
            }
        )
        out.append({"contentBlockStop": {"contentBlockIndex": index}})

    def _stop(self, out: list[StreamEvent], reason: str, wire_reason: Any = None) -> None:
        self.finished = True
        self._close(out)
        if self._calls and reason == "end_turn":
            reason = "tool_use"  # Gemini says STOP after function calls
        response = self._response
        out.append(
            message_stop(
                reason,
                provider_reason=wire_reason,
                response_id=response.get("responseId"),
                response_model=response.get("modelVersion"),
            )
        )
