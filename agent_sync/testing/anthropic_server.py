"""A local, protocol-faithful Anthropic Messages API server for tests and benchmarks.

``POST /v1/messages`` with ``"stream": true`` answers with the real server-sent event
sequence (``message_start`` with usage, ``content_block_start``/``delta``/``stop`` for text,
``tool_use`` with ``input_json_delta``, ``thinking`` with ``thinking_delta`` and
``signature_delta``, ``redacted_thinking``, ``ping``, ``message_delta`` with the stop reason
and output usage, ``message_stop``). Faults come from :class:`ServerTurn` (stalls, drops,
corrupt frames, error statuses with ``retry-after``) plus :class:`AnthropicTurn`'s
``error_event_after`` (an ``event: error`` mid-stream, e.g. ``overloaded_error``).

Like the real API, it rejects requests Anthropic rejects (blank text blocks, empty
messages, tool results after other blocks) with a 400 ``invalid_request_error``, so tests
catch translation mistakes the real service would.

Third-party front ends are scripted too: ``json_answer`` answers a stream request with one
``200 application/json`` Message (LiteLLM's mocked responses), ``error_body`` sends any
error shape (llama.cpp's, an OpenAI-style ``{"error": {...}}``), ``reject_cache_control``
refuses ``cache_control`` markers like a server that does not know them, and usage may
carry cache figures (``cacheReadInputTokens``/``cacheWriteInputTokens`` in ``usage`` are
sent as ``cache_read_input_tokens``/``cache_creation_input_tokens``).

Example::

    with AnthropicServer(["Hello!", {"tool_calls": [{"name": "f", "input": {}}]}]) as server:
        model = AnthropicModel("claude-x", client_args={"base_url": server.base_url,
                                                        "api_key": "test"})
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._http_server import ScriptedServer, ServerTurn, TurnSpec
from ._output_rules import anthropic_problem

__all__ = ["AnthropicServer", "AnthropicTurn"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass(kw_only=True)
class AnthropicTurn(ServerTurn):
    """A :class:`ServerTurn` with Anthropic-only features.

    Attributes:
        error_event_after: After that many frames, send ``event: error`` (type
            ``error_type``, default ``overloaded_error``; message ``error_message``) and end.
        signature: The ``signature_delta`` sent after reasoning.
        redacted_thinking: If set, a ``redacted_thinking`` block with this data comes first.
        stop_sequence: The ``stop_sequence`` reported with ``stop_reason="stop_sequence"``.
        ping: Send a ``ping`` event after the first block starts, as the API does.
        json_answer: Answer the stream request with the whole Message as one
            ``200 application/json`` body (as LiteLLM's ``/v1/messages`` does).
        error_body: The exact JSON error body to send with ``status`` (any shape),
            instead of Anthropic's ``{"type": "error", "error": {...}}``; with
            ``json_answer``, the exact 200 JSON answer instead of the Message.
        delta_usage: Usage fields (Anthropic names) sent in ``message_delta``: the API may
            update input and cache figures there.
    """

    error_event_after: int | None = None
    signature: str = "c2lnbmF0dXJl"
    redacted_thinking: str | None = None
    stop_sequence: str | None = None
    ping: bool = True
    json_answer: bool = False
    error_body: Any = None
    delta_usage: dict[str, int] | None = None


class AnthropicServer(ScriptedServer):
    """Fake Anthropic Messages API (SSE streaming). See the module docstring.

    Args:
        turns: Scripted responses, one per ``/v1/messages`` call (``str``, dict of
            :class:`AnthropicTurn` attributes, or a turn).
        host: Interface to bind (loopback).
        reject_cache_control: Answer any request carrying ``cache_control`` with a 400
            naming the field (a server that does not support prompt caching); such a
            request consumes no scripted turn.
        max_messages: Refuse a request with more messages than this as the API refuses
            one over the model's context window (400 ``invalid_request_error``, "prompt
            is too long: N tokens > M maximum"); it consumes no scripted turn.
        max_chars: The same for a request whose JSON body is longer than this.
    """

    provider = "anthropic"
    content_type = "text/event-stream; charset=utf-8"

    def __init__(
        self,
        turns: Iterable[TurnSpec] = (),
        *,
        host: str = "127.0.0.1",
        reject_cache_control: bool = False,
        max_messages: int | None = None,
        max_chars: int | None = None,
    ) -> None:
        super().__init__((AnthropicTurn.of(t) for t in turns), host=host)
        self.reject_cache_control = reject_cache_control
        self.max_messages = max_messages
        self.max_chars = max_chars
        self.refused_too_long = 0

    def add_turns(self, *turns: TurnSpec) -> None:
        """Queue more scripted responses."""
        super().add_turns(*(AnthropicTurn.of(t) for t in turns))

    # -- ScriptedServer hooks --

    def accepts(self, method: str, path: str) -> bool:
        """``POST /v1/messages`` (with or without a query string)."""
        return method == "POST" and path.split("?", 1)[0] == "/v1/messages"

    def respond(self, handler: Any, turn: ServerTurn, request: Any, path: str) -> None:
        """Validate the request like the API does, then stream ``turn``."""
        if self.reject_cache_control and '"cache_control"' in json.dumps(request):
            with self._lock:  # not this request's turn: the client re-sends without them
                self._turns.appendleft(turn)
            message = "system.0.cache_control: Extra inputs are not permitted"
            body = _error_body("invalid_request_error", message)
            handler.send_body(400, body, "application/json", {"request-id": _request_id()})
            return
        if self._too_long(request):
            with self._lock:  # not this request's turn: the client sends a shorter one
                self._turns.appendleft(turn)
                self.refused_too_long += 1
            size = len(json.dumps(request)) // 4
            message = f"prompt is too long: {size} tokens > {max(1, size - 1)} maximum"
            body = _error_body("invalid_request_error", message)
            handler.send_body(400, body, "application/json", {"request-id": _request_id()})
            return
        problem = _validate(request) or anthropic_problem(request)
        if problem is not None:
            body = _error_body("invalid_request_error", problem)
            handler.send_body(400, body, "application/json", {"request-id": _request_id()})
            return
        if isinstance(turn, AnthropicTurn) and turn.json_answer:
            answer = _message(request, turn) if turn.error_body is None else turn.error_body
            body = json.dumps(answer).encode()
            handler.send_body(200, body, "application/json", {"request-id": _request_id()})
            return
        super().respond(handler, turn, request, path)

    def _too_long(self, request: Any) -> bool:
        if not isinstance(request, dict):
            return False
        messages = request.get("messages")
        if self.max_messages is not None and isinstance(messages, list):
            if len(messages) > self.max_messages:
                return True
        return self.max_chars is not None and len(json.dumps(request)) > self.max_chars

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        """The SSE events of ``turn``, one frame per event."""
        extra = turn if isinstance(turn, AnthropicTurn) else AnthropicTurn()
        model = request.get("model", "claude-test") if isinstance(request, dict) else "?"
        usage = turn.derived_usage()
        frames = [_message_start(model, _wire_usage(usage, output=1))]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if extra.redacted_thinking is not None:
            blocks.append(({"type": "redacted_thinking", "data": extra.redacted_thinking}, []))
        for kind, value in turn.layout():
            size = max(1, turn.chunk_size) if turn.blocks else 16 if kind == "reasoning" else 12
            if kind == "reasoning":
                deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(value, size)]
                deltas.append({"type": "signature_delta", "signature": extra.signature})
                blocks.append(({"type": "thinking", "thinking": ""}, deltas))
            elif kind == "text":
                deltas = [{"type": "text_delta", "text": piece} for piece in turn.pieces(value)]
                blocks.append(({"type": "text", "text": ""}, deltas))
            else:
                call = turn.tool_calls[value]
                tool_id = call.get("id") or f"toolu_{uuid.uuid4().hex[:20]}"
                start = {"type": "tool_use", "id": tool_id, "name": call["name"], "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": piece}
                    for piece in _pieces(turn.tool_input_json(value), size)
                ]
                blocks.append((start, deltas))
        for index, (start, deltas) in enumerate(blocks):
            frames += _block(index, start, deltas)
        if extra.ping and len(frames) > 1:
            frames.insert(2, _event("ping", {"type": "ping"}))  # the API pings after a start
        stop_reason = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        stop_sequence = extra.stop_sequence if stop_reason == "stop_sequence" else None
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        output = {"output_tokens": usage["outputTokens"], **(extra.delta_usage or {})}
        frames.append(
            _event("message_delta", {"type": "message_delta", "delta": delta, "usage": output})
        )
        frames.append(_event("message_stop", {"type": "message_stop"}))
        if extra.error_event_after is not None:
            error_type = turn.error_type or "overloaded_error"
            error = {"type": error_type, "message": turn.error_message}
            frames = frames[: extra.error_event_after]
            frames.append(_event("error", {"type": "error", "error": error}))
        return frames

    def render_error(self, turn: ServerTurn, path: str) -> tuple[bytes, str]:
        """``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``.

        A turn's ``error_body`` is sent as is instead (another server's error shape).
        """
        if isinstance(turn, AnthropicTurn) and turn.error_body is not None:
            return json.dumps(turn.error_body).encode(), "application/json"
        error_type = turn.error_type or _ERROR_TYPES.get(turn.status, "api_error")
        return _error_body(error_type, turn.error_message), "application/json"

    def error_headers(self, turn: ServerTurn) -> dict[str, str]:
        """``request-id``, ``x-should-retry`` and ``retry-after`` as the API sends them."""
        headers = super().error_headers(turn)
        headers["request-id"] = _request_id()
        retry = turn.status in (408, 409, 429) or turn.status >= 500
        headers["x-should-retry"] = "true" if retry else "false"
        return headers

    def corrupt_frame(self) -> bytes:
        """An event whose JSON data is cut short."""
        return b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n'


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _wire_usage(usage: dict[str, int], *, output: int) -> dict[str, int]:
    """Converse-named usage -> the API's usage object (cache figures only when scripted)."""
    wire = {"input_tokens": usage["inputTokens"], "output_tokens": output}
    if "cacheReadInputTokens" in usage:
        wire["cache_read_input_tokens"] = usage["cacheReadInputTokens"]
    if "cacheWriteInputTokens" in usage:
        wire["cache_creation_input_tokens"] = usage["cacheWriteInputTokens"]
    return wire


def _message_start(model: str, usage: dict[str, int]) -> bytes:
    message: dict[str, Any] = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return _event("message_start", {"type": "message_start", "message": message})


def _message(request: Any, turn: AnthropicTurn) -> dict[str, Any]:
    """The whole Message a non-streaming answer carries (text, reasoning, tool calls)."""
    content: list[dict[str, Any]] = []
    if turn.reasoning is not None:
        content.append(
            {"type": "thinking", "thinking": turn.reasoning, "signature": turn.signature}
        )
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for position, call in enumerate(turn.tool_calls):
        tool_id = call.get("id") or f"toolu_{uuid.uuid4().hex[:20]}"
        tool_input = json.loads(turn.tool_input_json(position))
        content.append(
            {"type": "tool_use", "id": tool_id, "name": call["name"], "input": tool_input}
        )
    usage = turn.derived_usage()
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude-test") if isinstance(request, dict) else "?",
        "content": content,
        "stop_reason": turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {**_wire_usage(usage, output=usage["outputTokens"]), **(turn.delta_usage or {})},
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> list[bytes]:
    opening = {"type": "content_block_start", "index": index, "content_block": start}
    frames = [_event("content_block_start", opening)]
    for delta in deltas:
        data = {"type": "content_block_delta", "index": index, "delta": delta}
        frames.append(_event("content_block_delta", data))
    frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return frames


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


def _error_body(error_type: str, message: str) -> bytes:
    error = {"type": error_type, "message": message}
    return json.dumps({"type": "error", "error": error, "request_id": _request_id()}).encode()


def _validate(body: Any) -> str | None:
    """The subset of the API's request validation that translation mistakes trip."""
    if not isinstance(body, dict):
        return "request body must be JSON"
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            return f"{field}: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for number, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, str):
            if not content.strip():
                return f"messages.{number}: content must be non-empty"
            continue
        if not content:
            return f"messages.{number}: all messages must have non-empty content"
        seen_other = False
        for position, block in enumerate(content):
            where = f"messages.{number}.content.{position}"
            kind = block.get("type")
            if kind == "text" and not str(block.get("text", "")).strip():
                return f"{where}: text content blocks must contain non-whitespace text"
            if kind == "tool_result":
                if seen_other:
                    return f"{where}: tool_result blocks must come first in the message"
            else:
                seen_other = True
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not body.get("tools"):
        return "tool_choice may only be specified while providing tools"
    return None
