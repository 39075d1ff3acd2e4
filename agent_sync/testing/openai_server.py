"""A local fake of an OpenAI-compatible Chat Completions server, for tests and benchmarks.

``POST <any prefix>/chat/completions`` answers each scripted :class:`ServerTurn` the way
OpenAI (and vLLM, Ollama, llama.cpp) do:

* ``stream: true``: Server-Sent Events, one ``data: {chunk}`` line per
  ``chat.completion.chunk`` (a role chunk, ``reasoning_content`` deltas if the turn has
  reasoning, ``content`` deltas, ``tool_calls`` deltas with ``index``/``id``/``type``/
  ``function.name`` then ``function.arguments`` fragments, a chunk with
  ``finish_reason``), the usage chunk with empty ``choices`` when the request asked for
  ``stream_options.include_usage``, then ``data: [DONE]``;
* ``stream: false``: one ``chat.completion`` JSON object;
* a turn with ``status != 200``: the OpenAI error body
  ``{"error": {"message", "type", "param", "code"}}`` (``code`` from ``error_type`` or
  derived: ``rate_limit_exceeded``, ``invalid_api_key``, ``context_length_exceeded``...);
* a turn with status 200 *and* ``error_type``: the content, then a mid-stream
  ``data: {"error": {...}}`` line instead of the finish chunk (as vLLM and proxies do);
* ``corrupt_after``: a ``data:`` line with malformed JSON.

Compatible servers' quirks, per server (constructor arguments):

* ``error_shape``: the error body as ``"openai"`` (with an ``x-request-id`` header, as
  OpenAI sends), ``"vllm"`` (top-level ``{"object": "error", "message", "type",
  "code": 400}``), ``"llama.cpp"`` (``{"error": {"code": 400, "message", "type"}}``),
  ``"ollama"`` (``{"error": {"message", "type", "param": null, "code": null}}``) or
  ``"litellm"`` (``{"error": {"message", "type": null, "param": null, "code": "400"}}``);
* ``json_for_streams=True``: answer ``stream: true`` with one ``chat.completion`` JSON
  object (LiteLLM's mocked responses do);
* ``rejected_fields``: request fields this server refuses, as strict servers do with
  fields they do not know: 400 ``Unrecognized request argument supplied: <field>``
  without using up a turn (the turn answers the next request).

Usage: a turn's ``usage`` key ``cacheReadInputTokens`` is reported as
``prompt_tokens_details.cached_tokens`` (``prompt_tokens`` is ``inputTokens``, which for
OpenAI includes the cached tokens), ``reasoningTokens`` as
``completion_tokens_details.reasoning_tokens`` (part of ``completion_tokens``).

Frame counts (``stall_after`` etc.) count SSE events; frame 0 is the role chunk (or the
``: keep-alive`` comment when ``comments=True``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from ._http_server import ScriptedServer, ServerTurn, TurnSpec, WireHandler
from ._output_rules import openai_problem

__all__ = ["ErrorShape", "OpenAIServer"]

ErrorShape = Literal["openai", "vllm", "llama.cpp", "ollama", "litellm"]
"""Whose error body :class:`OpenAIServer` sends; see the module docstring."""

_DERIVED_CODES = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


class OpenAIServer(ScriptedServer):
    """Protocol-faithful OpenAI Chat Completions fake. See the module docstring.

    Args:
        turns: Scripted responses, one per request.
        interleave_tool_calls: Send the argument fragments of parallel tool calls
            round-robin by ``index`` (as some servers do) instead of one call after another.
        comments: Start each stream with an SSE comment line (``: keep-alive``), as
            OpenRouter and some proxies do.
        model: The ``model`` reported in chunks.
        error_shape: Whose error body to send (see the module docstring).
        json_for_streams: Answer ``stream: true`` with a ``chat.completion`` JSON object.
        rejected_fields: Request fields answered with a 400 naming the field.
    """

    provider = "openai"

    def __init__(
        self,
        turns: Iterable[TurnSpec] = (),
        *,
        interleave_tool_calls: bool = False,
        comments: bool = False,
        model: str = "gpt-test",
        host: str = "127.0.0.1",
        error_shape: ErrorShape = "openai",
        json_for_streams: bool = False,
        rejected_fields: Iterable[str] = (),
    ) -> None:
        super().__init__(turns, host=host)
        self.interleave_tool_calls = interleave_tool_calls
        self.comments = comments
        self.model = model
        self.error_shape = error_shape
        self.json_for_streams = json_for_streams
        self.rejected_fields = tuple(rejected_fields)
        self._completions = 0
        self._errors = 0

    @property
    def url(self) -> str:
        """The ``base_url`` to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.base_url}/v1"

    # -- ScriptedServer hooks --

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?", 1)[0].endswith("/chat/completions")

    def render_error(self, turn: ServerTurn, path: str) -> tuple[bytes, str]:
        return json.dumps(self._error_body(turn)).encode(), "application/json"

    def error_headers(self, turn: ServerTurn) -> dict[str, str]:
        headers = super().error_headers(turn)
        if self.error_shape == "openai":
            with self._lock:
                self._errors += 1
                headers["x-request-id"] = f"req_test{self._errors:04d}"
        return headers

    def corrupt_frame(self) -> bytes:
        return b'data: {"id": "chatcmpl-corrupt", "choices": [{"delta": {"content": "x"\n\n'

    def respond(self, handler: WireHandler, turn: ServerTurn, request: Any, path: str) -> None:
        rejected = [f for f in self.rejected_fields if isinstance(request, dict) and f in request]
        if rejected:
            with self._lock:
                self._turns.appendleft(turn)  # this request is refused; the turn answers the next
            refusal = ServerTurn(
                status=400, error_message=f"Unrecognized request argument supplied: {rejected[0]}"
            )
            body = json.dumps(self._error_body(refusal)).encode()
            handler.send_body(400, body, "application/json", self.error_headers(refusal))
            return
        problem = openai_problem(request)
        if problem is not None:
            with self._lock:  # refused before the model ran: the turn answers the next request
                self._turns.appendleft(turn)
            refusal = ServerTurn(status=400, error_message=problem)
            body = json.dumps(self._error_body(refusal)).encode()
            handler.send_body(400, body, "application/json", self.error_headers(refusal))
            return
        if isinstance(request, dict) and (
            request.get("stream") is not True or self.json_for_streams
        ):
            body = json.dumps(self._completion(turn)).encode()
            handler.send_body(200, body, "application/json")
            return
        super().respond(handler, turn, request, path)

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        completion_id = self._next_id()
        include_usage = bool(
            isinstance(request, dict) and (request.get("stream_options") or {}).get("include_usage")
        )

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": self.model,
                "system_fingerprint": "fp_test",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            return _sse(payload)

        frames: list[bytes] = [b": keep-alive\n\n"] if self.comments else []
        frames.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        for kind, value in turn.layout():  # the tool calls come last, whatever the layout
            if kind in ("reasoning", "text"):
                key = "reasoning_content" if kind == "reasoning" else "content"
                frames.extend(chunk({key: piece}) for piece in turn.pieces(value))
        frames.extend(chunk({"tool_calls": [part]}) for part in self._tool_call_parts(turn))
        if turn.error_type is not None:
            frames.append(_sse({"error": _error_object(turn)}))
        else:
            frames.append(chunk({}, turn.stop_reason or _finish_reason(turn)))
            if include_usage:
                usage = turn.derived_usage()
                frames.append(
                    _sse(
                        {
                            "id": completion_id,
                            "object": "chat.completion.chunk",
                            "created": 1700000000,
                            "model": self.model,
                            "choices": [],
                            "usage": _openai_usage(usage),
                        }
                    )
                )
        frames.append(b"data: [DONE]\n\n")
        return frames

    # -- helpers --

    def _error_body(self, turn: ServerTurn) -> dict[str, Any]:
        error = _error_object(turn)
        shape = self.error_shape
        if shape == "vllm":
            return {"object": "error", "message": error["message"], "type": "BadRequestError",
                    "param": None, "code": turn.status}  # fmt: skip
        if shape == "llama.cpp":
            kind = turn.error_type or (
                "invalid_request_error" if turn.status < 500 else "server_error"
            )
            return {"error": {"code": turn.status, "message": error["message"], "type": kind}}
        if shape == "ollama":
            kind = "invalid_request_error" if turn.status < 500 else "api_error"
            return {"error": {"message": error["message"], "type": kind, "param": None,
                              "code": None}}  # fmt: skip
        if shape == "litellm":
            return {"error": {"message": error["message"], "type": None, "param": None,
                              "code": str(turn.status)}}  # fmt: skip
        return {"error": error}

    def _next_id(self) -> str:
        with self._lock:
            self._completions += 1
            return f"chatcmpl-test{self._completions:04d}"

    def _tool_call_parts(self, turn: ServerTurn) -> list[dict[str, Any]]:
        """``tool_calls`` delta items: a header per call, then argument fragments."""
        size = max(1, turn.chunk_size)
        per_call: list[list[dict[str, Any]]] = []
        for index, call in enumerate(turn.tool_calls):
            arguments = turn.tool_input_json(index)
            parts: list[dict[str, Any]] = [
                {
                    "index": index,
                    "id": call.get("id") or f"call_{index}_{len(self.requests):03d}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": ""},
                }
            ]
            parts.extend(
                {"index": index, "function": {"arguments": arguments[i : i + size]}}
                for i in range(0, len(arguments), size)
            )
            per_call.append(parts)
        if not self.interleave_tool_calls:
            return [part for parts in per_call for part in parts]
        interleaved: list[dict[str, Any]] = []
        for position in range(max((len(p) for p in per_call), default=0)):
            interleaved.extend(parts[position] for parts in per_call if position < len(parts))
        return interleaved

    def _completion(self, turn: ServerTurn) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id") or f"call_{index}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": turn.tool_input_json(index)},
                }
                for index, call in enumerate(turn.tool_calls)
            ]
        return {
            "id": self._next_id(),
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": turn.stop_reason or _finish_reason(turn),
                }
            ],
            "usage": _openai_usage(turn.derived_usage()),
        }


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _finish_reason(turn: ServerTurn) -> str:
    return "tool_calls" if turn.tool_calls else "stop"


def _openai_usage(usage: dict[str, int]) -> dict[str, Any]:
    prompt = usage.get("inputTokens", 0)
    completion = usage.get("outputTokens", 0)
    wire: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if "cacheReadInputTokens" in usage:
        wire["prompt_tokens_details"] = {"cached_tokens": usage["cacheReadInputTokens"]}
    if "reasoningTokens" in usage:
        wire["completion_tokens_details"] = {"reasoning_tokens": usage["reasoningTokens"]}
    return wire


def _error_object(turn: ServerTurn) -> dict[str, Any]:
    error_type, code = _DERIVED_CODES.get(
        turn.status, ("server_error", "server_error") if turn.status >= 500 else ("", "")
    )
    if turn.error_type is not None:
        code = turn.error_type
        if code == "context_length_exceeded":
            error_type = "invalid_request_error"
    return {"message": turn.error_message, "type": error_type or code, "param": None, "code": code}
