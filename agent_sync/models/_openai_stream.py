"""The OpenAI Chat Completions answer as Converse stream events: :class:`ChunkTranslator`.

The request side is :mod:`._openai_format`. Choices made for compatibility with the many
OpenAI-compatible servers:

* Tool calls are buffered by ``index`` and emitted as whole blocks when the choice
  finishes: servers differ in how they split them (interleaved indices, a name or id in a
  later fragment, Ollama's one-piece calls without ``index``), and the agent does not show
  tool input while it streams. Text and reasoning stream as they arrive.
* A ``finish_reason`` of ``"stop"`` with tool calls present is reported as ``tool_use``
  (vLLM and Ollama do this), so the agent runs the tools instead of dropping them.
* A whole ``chat.completion`` object (a server that ignores ``stream: true``) goes through
  the same translator as one big chunk: :func:`completion_as_chunk`.

Boundary rule: nothing malformed escapes as a raw ``TypeError``/``KeyError``/... A chunk
the translator cannot read raises :class:`~agent_sync.errors.ModelStreamError` (the
server's output), at the public entry points (:meth:`ChunkTranslator.add`/``finish``,
:func:`completion_as_chunk`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..errors import ModelStreamError
from ..messages import StreamEvent, Usage
from ._response import message_stop
from ._wire import MALFORMED as _MALFORMED

__all__ = ["ChunkTranslator", "completion_as_chunk", "converse_usage", "map_finish_reason"]

PROVIDER = "openai"

_FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}


def map_finish_reason(reason: str) -> str:
    """OpenAI ``finish_reason`` -> Converse ``stopReason`` (unknown reasons pass through)."""
    return _FINISH_REASONS.get(reason, reason)


def converse_usage(usage: dict[str, Any]) -> Usage:
    """OpenAI ``usage`` -> Converse usage.

    ``inputTokens`` is ``prompt_tokens``, which *includes* cached prompt tokens (OpenAI's
    meaning, kept as is). ``cacheReadInputTokens`` is added only when the server reports a
    cache figure: ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM, llama.cpp) or
    ``prompt_cache_hit_tokens`` (DeepSeek). Chat Completions reports no cache writes.
    ``reasoningTokens`` is ``completion_tokens_details.reasoning_tokens`` (counted in
    ``completion_tokens`` too), when reported.
    """
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    total = int(usage.get("total_tokens") or prompt + completion)
    converse: Usage = {"inputTokens": prompt, "outputTokens": completion, "totalTokens": total}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")
    if cached is not None:
        converse["cacheReadInputTokens"] = int(cached)
    output_details = usage.get("completion_tokens_details")
    if isinstance(output_details, dict) and output_details.get("reasoning_tokens") is not None:
        converse["reasoningTokens"] = int(output_details["reasoning_tokens"])
    return converse


def completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A whole ``chat.completion`` object as one ``chat.completion.chunk``.

    For servers that answer ``stream: true`` with plain JSON: the message becomes the
    chunk's ``delta`` (text, reasoning, tool calls), so :class:`ChunkTranslator` reads it
    like a stream that arrived in one piece.

    Raises:
        ModelStreamError: ``completion`` has no ``choices[0].message``.
    """
    try:
        choice = completion["choices"][0]
        message = choice["message"]
        delta = {key: message[key] for key in ("content", "reasoning_content", "reasoning")
                 if message.get(key)}  # fmt: skip
        calls = message.get("tool_calls")
        if calls:
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
        chunk: dict[str, Any] = {
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason") or "stop"}
            ]
        }
    except _MALFORMED as exc:
        raise _malformed(exc, what="JSON answer") from exc
    if isinstance(completion.get("usage"), dict):
        chunk["usage"] = completion["usage"]
    for key in ("id", "model"):
        if key in completion:
            chunk[key] = completion[key]
    return chunk


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not a string")
    return value


def _malformed(exc: BaseException, what: str = "stream chunk") -> ModelStreamError:
    return ModelStreamError(
        f"malformed {what} from the model server: {type(exc).__name__}: {exc}"[:500],
        provider=PROVIDER,
    )


class _ToolCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class ChunkTranslator:
    """Turns one response's ``chat.completion.chunk`` objects into Converse stream events.

    Not thread-safe: one per response. Feed every chunk to :meth:`add`, then call
    :meth:`finish` when the stream ends (``[DONE]`` or end of body).

    Attributes:
        finished: Whether a ``finish_reason`` has been seen.
    """

    __slots__ = (
        "_calls",
        "_next_index",
        "_open",
        "_open_kind",
        "_response",
        "_started",
        "finished",
        "usage",
    )

    def __init__(self) -> None:
        self._started = False
        self._next_index = 0
        self._open: int | None = None  # index of the streaming text/reasoning block
        self._open_kind = ""
        self._calls: dict[int, _ToolCall] = {}
        self._response: dict[str, Any] = {}  # the first chunk: the response's id and model
        self.finished = False
        self.usage: dict[str, int] | None = None

    def add(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        """Events for one chunk (usually exactly one).

        Raises:
            ModelStreamError: The chunk is not a chunk this translator can read.
        """
        try:
            return self._add(chunk)
        except _MALFORMED as exc:
            raise _malformed(exc) from exc

    def finish(self) -> list[StreamEvent]:
        """Events that close the message (stop, usage) once the stream has ended.

        Raises:
            ModelStreamError: The reported usage is not numbers.
        """
        try:
            return self._finish()
        except _MALFORMED as exc:
            raise _malformed(exc) from exc

    # -- internals --

    def _add(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        # A list, not a generator: this runs once per chunk on the hot path.
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            self._response = chunk
            out.append({"messageStart": {"role": "assistant"}})
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage  # some servers repeat it in every chunk: keep the last
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # n > 1 is not supported: the agent keeps one answer
            delta = choice.get("delta") or {}
            if len(delta) == 1 and "content" in delta:  # the common chunk: text only
                if delta["content"]:
                    self._stream_piece(out, "text", delta["content"])
            else:
                self._add_delta(out, delta)
            finish = choice.get("finish_reason")
            if finish and not self.finished:
                self._finish_choice(out, finish)
        return out

    def _finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            out.append({"messageStart": {"role": "assistant"}})
        if not self.finished:
            self._finish_choice(out, None)
        if self.usage is not None:
            out.append({"metadata": {"usage": converse_usage(self.usage)}})
        return out

    def _add_delta(self, out: list[StreamEvent], delta: dict[str, Any]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self._stream_piece(out, "reasoning", reasoning)
        content = delta.get("content")
        if content:
            self._stream_piece(out, "text", content)
        for call in delta.get("tool_calls") or ():
            self._add_tool_call(call)

    def _stream_piece(self, out: list[StreamEvent], kind: str, piece: str) -> None:
        if type(piece) is not str:  # noqa: E721 (exact and fast: str subclasses are rare)
            raise TypeError(f"{kind} delta is {type(piece).__name__}, not a string")
        if self._open is None or self._open_kind != kind:
            self._close_open(out)
            self._open = self._next_index
            self._open_kind = kind
            self._next_index += 1
        if kind == "text":
            out.append(
                {"contentBlockDelta": {"contentBlockIndex": self._open, "delta": {"text": piece}}}
            )
        else:
            out.append(
                {
                    "contentBlockDelta": {
                        "contentBlockIndex": self._open,
                        "delta": {"reasoningContent": {"text": piece}},
                    }
                }
            )

    def _close_open(self, out: list[StreamEvent]) -> None:
        if self._open is not None:
            out.append({"contentBlockStop": {"contentBlockIndex": self._open}})
            self._open = None

    def _add_tool_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):
            # Servers that omit "index" send each call whole, in order.
            index = max(self._calls, default=-1) + 1
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _ToolCall()
        if fragment.get("id"):
            call.id = _string(fragment["id"], "tool call id")
        function = fragment.get("function") or {}
        if function.get("name"):
            call.name = _string(function["name"], "tool call name")
        arguments = function.get("arguments")
        if arguments:
            call.arguments.append(
                arguments if isinstance(arguments, str) else json.dumps(arguments)
            )

    def _finish_choice(self, out: list[StreamEvent], finish: str | None) -> None:
        """Close the message; ``finish`` is the server's ``finish_reason`` (``None``: it
        sent none, taken as ``"stop"``)."""
        self.finished = True
        self._close_open(out)
        for position in sorted(self._calls):
            call = self._calls[position]
            index = self._next_index
            self._next_index += 1
            tool_use_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            out.append(
                {
                    "contentBlockStart": {
                        "contentBlockIndex": index,
                        "start": {"toolUse": {"toolUseId": tool_use_id, "name": call.name}},
                    }
                }
            )
            if call.arguments:
                out.append(
                    {
                        "contentBlockDelta": {
                            "contentBlockIndex": index,
                            "delta": {"toolUse": {"input": "".join(call.arguments)}},
                        }
                    }
                )
            out.append({"contentBlockStop": {"contentBlockIndex": index}})
        reason = map_finish_reason(finish or "stop")
        if self._calls and reason == "end_turn":
            reason = "tool_use"
        response = self._response
        out.append(
            message_stop(
                reason,
                provider_reason=finish,
                response_id=response.get("id"),
                response_model=response.get("model"),
            )
        )
