"""A local fake of the OpenAI Responses API (``POST <any prefix>/responses``), for tests
and benchmarks.

Each scripted :class:`ServerTurn` is answered the way the API streams (``stream: true``):
Server-Sent Events with an ``event:`` line naming the type and a ``data:`` object carrying
it and a ``sequence_number``, in the API's order:

* ``response.created``, ``response.in_progress``;
* a turn with ``reasoning``: a ``reasoning`` item (``rs_...``): ``response.output_item.added``,
  ``response.reasoning_summary_part.added``, ``response.reasoning_summary_text.delta``
  pieces, ``...text.done``, ``...part.done``, ``response.output_item.done`` (with
  ``encrypted_content`` when the request's ``include`` asks for
  ``reasoning.encrypted_content``);
* a turn with text: a ``message`` item (``msg_...``): ``output_item.added``,
  ``response.content_part.added``, ``response.output_text.delta`` pieces,
  ``response.output_text.done``, ``response.content_part.done``, ``output_item.done``;
* each tool call: a ``function_call`` item (``fc_...``, its ``call_id`` the call's ``id``
  or ``call_<n>``): ``output_item.added``, ``response.function_call_arguments.delta``
  pieces, ``...arguments.done``, ``output_item.done``;
* ``response.completed`` with the whole response and its ``usage``; a turn whose
  ``stop_reason`` is ``"max_output_tokens"`` or ``"content_filter"`` ends with
  ``response.incomplete`` (``incomplete_details.reason``); a 200 turn with ``error_type``
  ends with ``response.failed`` (``error.code`` is the ``error_type``).

``stream: false`` gets the whole response object as JSON (so does ``stream: true`` with
``json_for_streams=True``, as some proxies answer). ``rejected_fields=[...]`` answers 400
"Unrecognized request argument supplied: <field>" to a request carrying one of those
top-level fields (``"text"`` for ``text.format``), without using up a turn, as a strict
compatible server does. A turn with ``status != 200``
gets OpenAI's error body ``{"error": {"message", "type", "param", "code"}}`` (with
``x-request-id`` and ``retry-after`` headers). Faults (``stall_after``, ``drop_after``...)
count SSE events from 0 (``response.created``).

The server refuses what the real API refuses (:mod:`._responses_rules`): an unknown role, a
``function_call_output`` for a call never made, a reasoning item it never issued or sent
without its following item, a strict tool schema that is not strict... with a 400 that does
not use up a turn. Usage: a turn's ``usage`` keys ``cacheReadInputTokens`` and
``reasoningTokens`` are reported as ``input_tokens_details.cached_tokens`` and
``output_tokens_details.reasoning_tokens``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ._http_server import ScriptedServer, ServerTurn, TurnSpec, WireHandler
from ._responses_rules import responses_problem
from .openai_server import _error_object

__all__ = ["ResponsesServer"]

_INCOMPLETE = ("max_output_tokens", "content_filter")


class ResponsesServer(ScriptedServer):
    """Protocol-faithful OpenAI Responses API fake. See the module docstring.

    Args:
        turns: Scripted responses, one per request.
        model: The ``model`` reported in responses.
        json_for_streams: Answer ``stream: true`` with the whole response as JSON.
        rejected_fields: Top-level request fields answered with a 400 naming the field.
    """

    provider = "openai-responses"

    def __init__(
        self,
        turns: Iterable[TurnSpec] = (),
        *,
        model: str = "gpt-test",
        host: str = "127.0.0.1",
        json_for_streams: bool = False,
        rejected_fields: Iterable[str] = (),
    ) -> None:
        super().__init__(turns, host=host)
        self.model = model
        self.json_for_streams = json_for_streams
        self.rejected_fields = tuple(rejected_fields)
        self._responses = 0
        self._errors = 0
        self._issued: dict[str, tuple[str, str | None]] = {}  # reasoning id -> (enc, next id)

    @property
    def url(self) -> str:
        """The ``base_url`` to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.base_url}/v1"

    # -- ScriptedServer hooks --

    def accepts(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?", 1)[0].endswith("/responses")

    def render_error(self, turn: ServerTurn, path: str) -> tuple[bytes, str]:
        return json.dumps({"error": _error_object(turn)}).encode(), "application/json"

    def error_headers(self, turn: ServerTurn) -> dict[str, str]:
        headers = super().error_headers(turn)
        with self._lock:
            self._errors += 1
            headers["x-request-id"] = f"req_resp{self._errors:04d}"
        return headers

    def corrupt_frame(self) -> bytes:
        return b'event: response.output_text.delta\ndata: {"type": "response.output_te\n\n'

    def respond(self, handler: WireHandler, turn: ServerTurn, request: Any, path: str) -> None:
        with self._lock:
            problem = responses_problem(request, dict(self._issued))
        rejected = [f for f in self.rejected_fields if isinstance(request, dict) and f in request]
        if rejected:
            problem = f"Unrecognized request argument supplied: {rejected[0]}"
        if problem is not None:
            with self._lock:  # refused before the model ran: the turn answers the next request
                self._turns.appendleft(turn)
            refusal = ServerTurn(status=400, error_message=problem)
            body = json.dumps({"error": _error_object(refusal)}).encode()
            handler.send_body(400, body, "application/json", self.error_headers(refusal))
            return
        if request.get("stream") is not True or self.json_for_streams:
            response = self._response(turn, request, self._next_number())
            handler.send_body(200, json.dumps(response).encode(), "application/json")
            return
        super().respond(handler, turn, request, path)

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        number = self._next_number()
        final = self._response(turn, request, number)
        frames: list[bytes] = []

        def emit(kind: str, **fields: Any) -> None:
            payload = {"type": kind, "sequence_number": len(frames), **fields}
            frames.append(_sse(kind, payload))

        started = {**final, "status": "in_progress", "output": [], "usage": None,
                   "incomplete_details": None, "error": None}  # fmt: skip
        emit("response.created", response=started)
        emit("response.in_progress", response=started)
        size = max(1, turn.chunk_size)
        for index, item in enumerate(final["output"]):
            kind = item["type"]
            emit("response.output_item.added", output_index=index, item=_in_progress(item))
            if kind == "reasoning":
                self._reasoning_frames(emit, index, item, size)
            elif kind == "message":
                self._message_frames(emit, index, item, turn)
            else:
                arguments = item["arguments"]
                for i in range(0, len(arguments), size):
                    emit("response.function_call_arguments.delta", item_id=item["id"],
                         output_index=index, delta=arguments[i : i + size])  # fmt: skip
                emit("response.function_call_arguments.done", item_id=item["id"],
                     output_index=index, arguments=arguments)  # fmt: skip
            emit("response.output_item.done", output_index=index, item=item)
        emit(f"response.{final['status']}", response=final)
        return frames

    # -- helpers --

    def _next_number(self) -> int:
        with self._lock:
            self._responses += 1
            return self._responses

    def _reasoning_frames(self, emit: Any, index: int, item: dict[str, Any], size: int) -> None:
        text = item["summary"][0]["text"] if item["summary"] else ""
        ids = {"item_id": item["id"], "output_index": index, "summary_index": 0}
        emit("response.reasoning_summary_part.added", **ids,
             part={"type": "summary_text", "text": ""})  # fmt: skip
        for i in range(0, len(text), size):
            emit("response.reasoning_summary_text.delta", **ids, delta=text[i : i + size])
        emit("response.reasoning_summary_text.done", **ids, text=text)
        emit("response.reasoning_summary_part.done", **ids,
             part={"type": "summary_text", "text": text})  # fmt: skip

    def _message_frames(
        self, emit: Any, index: int, item: dict[str, Any], turn: ServerTurn
    ) -> None:
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        part = item["content"][0]
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        emit("response.content_part.added", **ids, part=empty)
        for piece in turn.text_chunks():
            emit("response.output_text.delta", **ids, delta=piece, logprobs=[])
        emit("response.output_text.done", **ids, text=part["text"], logprobs=[])
        emit("response.content_part.done", **ids, part=part)

    def _response(self, turn: ServerTurn, request: Any, number: int) -> dict[str, Any]:
        """The whole response object of ``turn`` (what ``response.completed`` carries)."""
        include = request.get("include") or [] if isinstance(request, dict) else []
        output: list[dict[str, Any]] = []
        reasoning_id: str | None = None
        encrypted = ""
        if turn.reasoning:
            reasoning_id = f"rs_test{number:04d}"
            encrypted = "enc_" + base64.b64encode(turn.reasoning.encode()).decode()
            item: dict[str, Any] = {
                "id": reasoning_id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": turn.reasoning}],
                "status": "completed",
            }
            if "reasoning.encrypted_content" in include:
                item["encrypted_content"] = encrypted
            output.append(item)
        if turn.text:
            output.append(
                {
                    "id": f"msg_test{number:04d}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {
                            "type": "output_text",
                            "text": turn.text,
                            "annotations": [],
                            "logprobs": [],
                        }
                    ],  # fmt: skip
                }
            )
        for index, call in enumerate(turn.tool_calls):
            output.append(
                {
                    "id": f"fc_test{number:04d}_{index}",
                    "type": "function_call",
                    "call_id": call.get("id") or f"call_{number}_{index}",
                    "name": call["name"],
                    "arguments": turn.tool_input_json(index),
                    "status": "completed",
                }
            )
        if reasoning_id is not None:
            follower = output[1]["id"] if len(output) > 1 else None
            with self._lock:
                self._issued[reasoning_id] = (encrypted, follower)
        status, incomplete, error = "completed", None, None
        if turn.error_type is not None:
            status = "failed"
            error = {"code": turn.error_type, "message": turn.error_message}
        elif turn.stop_reason in _INCOMPLETE:
            status, incomplete = "incomplete", {"reason": turn.stop_reason}
        return {
            "id": f"resp_test{number:04d}",
            "object": "response",
            "created_at": 1700000000,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": request.get("instructions") if isinstance(request, dict) else None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": (request.get("tool_choice") if isinstance(request, dict) else None)
            or "auto",
            "tools": (request.get("tools") if isinstance(request, dict) else None) or [],
            "usage": None if error else _usage(turn),
        }


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as ``response.output_item.added`` shows it: nothing streamed yet."""
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    return {key: value for key, value in item.items() if key != "encrypted_content"} | {
        "summary": [],
        "status": "in_progress",
    }


def _usage(turn: ServerTurn) -> dict[str, Any]:
    usage = turn.derived_usage()
    prompt, completion = usage.get("inputTokens", 0), usage.get("outputTokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": usage.get("cacheReadInputTokens", 0),
            "cache_write_tokens": usage.get("cacheWriteInputTokens", 0),
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": usage.get("reasoningTokens", 0)},
        "total_tokens": prompt + completion,
    }


def _sse(kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":")).encode()
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
