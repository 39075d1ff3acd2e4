"""A local fake of the Gemini API (``generateContent``), for tests and benchmarks.

``POST <prefix>/models/{model}:streamGenerateContent?alt=sse`` answers each scripted
:class:`ServerTurn` the way the Gemini API does: Server-Sent Events (``data: {...}`` lines
ending in ``\\r\\n\\r\\n``), each one ``GenerateContentResponse`` with
``candidates[0].content.parts`` continuing the answer:

* ``thought: true`` text parts for the turn's ``reasoning``, then ``text`` parts, then one
  whole ``functionCall`` part per tool call (``id`` only when the scripted call has one:
  Gemini 2.x sends none); ``finishReason`` (``STOP``, or the turn's ``stop_reason``) and
  ``usageMetadata`` ride on the last chunk; every chunk carries ``usageMetadata`` with the
  prompt count, ``modelVersion`` and ``responseId``;
* thought signatures (``signatures=True``, the default): the first ``functionCall`` of an
  answer, or its last text part, carries a ``thoughtSignature`` unique to the response;
  :meth:`GeminiServer.issued` says whether a signature is one it sent;
* ``stop_reason="prompt:SAFETY"`` (any ``blockReason``): one chunk with
  ``promptFeedback.blockReason`` and no candidates, as for a blocked prompt;
* ``:streamGenerateContent`` without ``alt=sse``: a JSON array of the same responses;
  ``:generateContent``: one JSON response;
* a turn with ``status != 200``: the Google RPC error body ``{"error": {"code", "message",
  "status", "details"}}``; a 429 with ``retry_after`` carries a ``google.rpc.RetryInfo``
  ``retryDelay`` (Gemini sends no ``Retry-After`` header); a 400 ``INVALID_ARGUMENT``
  with ``error_type="API_KEY_INVALID"`` is Gemini's bad-key answer;
* a turn with status 200 *and* ``error_type``: the content, then a ``data: {"error": ...}``
  event instead of the finishing chunk.

Refused before the model runs (the turn then answers the next request), as the real API
does: a request without ``x-goog-api-key`` (403 ``PERMISSION_DENIED``), a key other than
``api_key`` when one is set (400 ``API_KEY_INVALID``), and what
:func:`~agent_sync.testing._gemini_rules.gemini_problem` finds (400 ``INVALID_ARGUMENT``).

Frame counts (``stall_after`` etc.) count SSE events, from 0.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._gemini_rules import gemini_problem
from ._http_server import ScriptedServer, ServerTurn, TurnSpec, WireHandler

__all__ = ["GeminiServer"]

_STATES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)


class GeminiServer(ScriptedServer):
    """Protocol-faithful Gemini API fake. See the module docstring.

    Args:
        turns: Scripted responses, one per request.
        api_key: The only key accepted (``None``: any non-empty key).
        signatures: Sign the first function call (or the last text part) of each answer.
        model_version: The ``modelVersion`` reported in chunks.
    """

    provider = "gemini"

    def __init__(
        self,
        turns: Iterable[TurnSpec] = (),
        *,
        api_key: str | None = None,
        signatures: bool = True,
        model_version: str = "gemini-test-001",
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(turns, host=host)
        self.api_key = api_key
        self.signatures = signatures
        self.model_version = model_version
        self._responses = itertools.count(1)
        self._issued: set[str] = set()
        self._issued_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The ``base_url`` to give a client: ``http://127.0.0.1:<port>/v1beta``."""
        return f"{self.base_url}/v1beta"

    def issued(self, signature: str) -> bool:
        """Whether ``signature`` is a thought signature this server sent."""
        with self._issued_lock:
            return signature in self._issued

    # -- ScriptedServer hooks --

    def accepts(self, method: str, path: str) -> bool:
        route = urlsplit(path).path
        return (
            method == "POST"
            and "/models/" in route
            and route.endswith((":streamGenerateContent", ":generateContent"))
        )

    def render_error(self, turn: ServerTurn, path: str) -> tuple[bytes, str]:
        return json.dumps(_error_body(turn)).encode(), "application/json; charset=UTF-8"

    def error_headers(self, turn: ServerTurn) -> dict[str, str]:
        return {}  # Gemini says how long to wait in the body (RetryInfo), not in a header

    def corrupt_frame(self) -> bytes:
        return b'data: {"candidates": [{"content": {"parts": [{"text": "x"\r\n\r\n'

    def respond(self, handler: WireHandler, turn: ServerTurn, request: Any, path: str) -> None:
        refusal = self._refusal(handler, request, path)
        if refusal is not None:
            with self._lock:  # refused before the model ran: the turn answers the next request
                self._turns.appendleft(turn)
            status, body = refusal
            handler.send_body(status, json.dumps(body).encode(), "application/json")
            return
        url = urlsplit(path)
        if url.path.endswith(":generateContent") or "sse" not in parse_qs(url.query).get("alt", []):
            chunks = self._chunks(turn)
            whole: Any = chunks if url.path.endswith(":streamGenerateContent") else _merged(chunks)
            handler.send_body(200, json.dumps(whole).encode(), "application/json; charset=UTF-8")
            return
        super().respond(handler, turn, request, path)

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        frames = [_sse(chunk) for chunk in self._chunks(turn)]
        if turn.error_type is not None:
            frames[-1] = _sse({"error": _error_object(turn.error_message, 500, "INTERNAL")})
        return frames

    # -- helpers --

    def _refusal(
        self, handler: WireHandler, request: Any, path: str
    ) -> tuple[int, dict[str, Any]] | None:
        key = (
            handler.headers.get("x-goog-api-key")
            or parse_qs(urlsplit(path).query).get("key", [""])[0]
        )
        if not key:
            return 403, {"error": _error_object(_NO_KEY, 403, "PERMISSION_DENIED")}
        if self.api_key is not None and key != self.api_key:
            error = _error_object("API key not valid. Please pass a valid API key.", 400,
                                  "INVALID_ARGUMENT", reason="API_KEY_INVALID")  # fmt: skip
            return 400, {"error": error}
        model = urlsplit(path).path.rsplit("/", 1)[-1].split(":", 1)[0]
        problem = gemini_problem(request, model=model, issued=self.issued)
        if problem is not None:
            return 400, {"error": _error_object(problem, 400, "INVALID_ARGUMENT")}
        return None

    def _sign(self, number: int) -> str:
        signature = base64.b64encode(f"gemini-test-signature-{number:06d}".encode()).decode()
        with self._issued_lock:
            self._issued.add(signature)
        return signature

    def _chunks(self, turn: ServerTurn) -> list[dict[str, Any]]:
        """The answer's ``GenerateContentResponse`` chunks."""
        number = next(self._responses)
        usage = turn.derived_usage()
        prompt = usage.get("inputTokens", 0)
        head = {"modelVersion": self.model_version, "responseId": f"resp-test-{number:06d}"}
        stop = turn.stop_reason or "STOP"
        if stop.startswith("prompt:"):
            blocked = {"blockReason": stop.split(":", 1)[1]}
            return [{"promptFeedback": blocked, "usageMetadata": _usage(usage), **head}]
        parts: list[dict[str, Any]] = []
        size = max(1, turn.chunk_size)
        if turn.reasoning:
            parts.extend(
                {"text": turn.reasoning[i : i + size], "thought": True}
                for i in range(0, len(turn.reasoning), size)
            )
        parts.extend({"text": piece} for piece in turn.text_chunks())
        for index, call in enumerate(turn.tool_calls):
            function: dict[str, Any] = {"name": call["name"]}
            if call.get("id"):
                function["id"] = call["id"]
            function["args"] = json.loads(turn.tool_input_json(index))
            parts.append({"functionCall": function})
        if self.signatures:
            signed = next((p for p in parts if "functionCall" in p), None)
            if signed is None:
                signed = next((p for p in reversed(parts) if not p.get("thought")), None)
            if signed is not None:
                signed["thoughtSignature"] = self._sign(number)
        if not parts:
            parts.append({"text": ""})
        chunks: list[dict[str, Any]] = [
            {
                "candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}],
                "usageMetadata": {"promptTokenCount": prompt, "totalTokenCount": prompt},
                **head,
            }
            for part in parts
        ]
        chunks[-1]["candidates"][0]["finishReason"] = stop
        chunks[-1]["usageMetadata"] = _usage(usage)
        return chunks


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\r\n\r\n"


def _merged(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The chunks of a streamed answer as the one response ``:generateContent`` returns."""
    merged = dict(chunks[-1])
    if "candidates" in merged:
        parts = [p for chunk in chunks for p in chunk["candidates"][0]["content"]["parts"]]
        candidate = dict(merged["candidates"][0])
        candidate["content"] = {"parts": parts, "role": "model"}
        merged["candidates"] = [candidate]
    return merged


def _usage(usage: dict[str, int]) -> dict[str, Any]:
    prompt = usage.get("inputTokens", 0)
    output = usage.get("outputTokens", 0)
    wire: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + usage.get("reasoningTokens", 0),
    }
    if "reasoningTokens" in usage:
        wire["thoughtsTokenCount"] = usage["reasoningTokens"]
    if "cacheReadInputTokens" in usage:
        wire["cachedContentTokenCount"] = usage["cacheReadInputTokens"]
    return wire


def _error_object(
    message: str, code: int, status: str, *, reason: str | None = None, delay: float | None = None
) -> dict[str, Any]:
    details: list[dict[str, Any]] = []
    if reason is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                        "domain": "googleapis.com",
                        "metadata": {"service": "generativelanguage.googleapis.com"}})  # fmt: skip
    if delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": f"{delay:g}s"})  # fmt: skip
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return error


def _error_body(turn: ServerTurn) -> dict[str, Any]:
    status = _STATES.get(turn.status, "INTERNAL" if turn.status >= 500 else "FAILED_PRECONDITION")
    reason = turn.error_type if turn.error_type else None
    delay = turn.retry_after if turn.status == 429 else None
    return {"error": _error_object(turn.error_message, turn.status, status, reason=reason,
                                   delay=delay)}  # fmt: skip
