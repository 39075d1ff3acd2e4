"""A local fake of Bedrock's Converse API speaking the real wire protocol.

``POST /model/{modelId}/converse-stream`` answers with an AWS event stream
(``application/vnd.amazon.eventstream``): binary messages of

    prelude (total length, headers length: two big-endian uint32) + prelude CRC32
    + headers (``:event-type``, ``:content-type``, ``:message-type``, ...)
    + JSON payload + message CRC32

one per HTTP chunk. ``POST /model/{modelId}/converse`` answers with the JSON of a
non-streaming Converse response. Errors look like the service's: a JSON
``{"message": ...}`` body with an ``x-amzn-ErrorType`` header before the stream starts, or
an ``exception`` message inside the stream (``exception_type``/``exception_after`` of a
:class:`BedrockTurn`). Use it with a real boto3 client::

    with BedrockServer(["Hello!"]) as server:
        model = BedrockModel("test-model", endpoint_url=server.base_url,
                             boto_session=fake_session)
"""

from __future__ import annotations

import json
import re
import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ._http_server import ScriptedServer, ServerTurn, TurnSpec, WireHandler
from ._output_rules import bedrock_problem

__all__ = ["BedrockServer", "BedrockTurn", "encode_message"]

_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)(\?.*)?$")
_STRING_HEADER = 7
_ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


@dataclass(kw_only=True)
class BedrockTurn(ServerTurn):
    """A :class:`ServerTurn` that can also end in a mid-stream exception message.

    Attributes:
        exception_type: Event-stream exception to send (``"throttlingException"``,
            ``"modelStreamErrorException"``, ``"validationException"``, ...).
        exception_after: Frames sent before the exception (default 1: after messageStart).
        signature: Signature of the reasoning block, if ``reasoning`` is set.
    """

    exception_type: str | None = None
    exception_after: int = 1
    signature: str = "sig-0"


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """Encode one event-stream message (string headers only).

    Args:
        headers: Header names and string values, e.g. ``{":event-type": "messageStart"}``.
        payload: The message body.

    Returns:
        The message bytes, both CRCs included.
    """
    encoded = b"".join(
        struct.pack(">B", len(name))
        + name.encode()
        + struct.pack(">BH", _STRING_HEADER, len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude))
    body = head + encoded + payload
    return body + struct.pack(">I", zlib.crc32(body))


def _event(event_type: str, payload: Mapping[str, Any]) -> bytes:
    # The service pads payloads with a "p" field so lengths do not leak content.
    padded = {**payload, "p": "abcdefghijklmnopqrstuvwxyz"[: 1 + len(event_type) % 20]}
    headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, json.dumps(padded).encode())


def _exception(exception_type: str, message: str) -> bytes:
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


class BedrockServer(ScriptedServer):
    """Fake Bedrock runtime (Converse and ConverseStream). See the module docstring.

    Turns given as dicts may use the :class:`BedrockTurn` extra keys.
    """

    provider: ClassVar[str] = "bedrock"
    content_type: ClassVar[str] = "application/vnd.amazon.eventstream"

    def __init__(self, turns: Iterable[TurnSpec] = (), *, host: str = "127.0.0.1") -> None:
        super().__init__((), host=host)
        self.add_turns(*turns)

    def add_turns(self, *turns: TurnSpec) -> None:
        """Queue more scripted responses (dicts may use :class:`BedrockTurn` keys)."""
        super().add_turns(*(BedrockTurn.of(t) for t in turns))

    def accepts(self, method: str, path: str) -> bool:
        """Converse and ConverseStream calls."""
        return method == "POST" and _PATH.match(path) is not None

    def respond(self, handler: WireHandler, turn: ServerTurn, request: Any, path: str) -> None:
        """Stream for ``converse-stream``; a JSON document for ``converse``."""
        problem = bedrock_problem(request)
        if problem is not None:
            refusal = ServerTurn(status=400, error_message=problem)
            body, content_type = self.render_error(refusal, path)
            handler.send_body(400, body, content_type, self.error_headers(refusal))
            return
        match = _PATH.match(path)
        if match is not None and match.group("op") == "converse":
            body = json.dumps(self.converse_body(turn)).encode()
            handler.send_body(200, body, "application/json", {"x-amzn-requestid": "req-1"})
            return
        super().respond(handler, turn, request, path)

    def stream_headers(self) -> dict[str, str]:
        """Every Bedrock answer carries its request id, as the real API's do."""
        return {"x-amzn-RequestId": str(uuid.uuid4())}

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        """messageStart, reasoning, text, tool calls, messageStop, metadata."""
        frames = [_event("messageStart", {"role": "assistant"})]
        for index, (kind, value) in enumerate(
            block for block in turn.layout() if block[0] != "reasoning" or block[1]
        ):
            if kind == "reasoning":
                for piece in turn.pieces(value):
                    frames.append(_delta(index, {"reasoningContent": {"text": piece}}))
                signature = getattr(turn, "signature", "sig-0")
                frames.append(_delta(index, {"reasoningContent": {"signature": signature}}))
            elif kind == "text":
                frames.extend(_delta(index, {"text": piece}) for piece in turn.pieces(value))
            else:
                call = turn.tool_calls[value]
                start = {"toolUse": {"toolUseId": _tool_id(call, value), "name": call["name"]}}
                frames.append(
                    _event("contentBlockStart", {"contentBlockIndex": index, "start": start})
                )
                for piece in turn.pieces(turn.tool_input_json(value)):
                    frames.append(_delta(index, {"toolUse": {"input": piece}}))
            frames.append(_event("contentBlockStop", {"contentBlockIndex": index}))
        frames.append(_event("messageStop", {"stopReason": _stop_reason(turn)}))
        frames.append(_event("metadata", {"usage": _usage(turn), "metrics": {"latencyMs": 42}}))
        exception_type = getattr(turn, "exception_type", None)
        if exception_type:
            cut = min(getattr(turn, "exception_after", 1), len(frames))
            frames = [*frames[:cut], _exception(exception_type, turn.error_message)]
        return frames

    def render_error(self, turn: ServerTurn, path: str) -> tuple[bytes, str]:
        """``{"message": ...}`` as the service sends it."""
        return json.dumps({"message": turn.error_message}).encode(), "application/json"

    def error_headers(self, turn: ServerTurn) -> dict[str, str]:
        """``x-amzn-ErrorType`` (and ``retry-after`` when scripted)."""
        error_type = turn.error_type or _ERROR_TYPES.get(turn.status, "InternalServerException")
        headers = super().error_headers(turn)
        headers["x-amzn-ErrorType"] = (
            f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        )
        headers["x-amzn-RequestId"] = "req-error"
        return headers

    def corrupt_frame(self) -> bytes:
        """A well-framed message whose message CRC is wrong."""
        frame = bytearray(_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {}}))
        frame[-1] ^= 0xFF
        return bytes(frame)

    def converse_body(self, turn: ServerTurn) -> dict[str, Any]:
        """The non-streaming ``converse`` response for ``turn``."""
        content: list[dict[str, Any]] = []
        if turn.reasoning:
            signature = getattr(turn, "signature", "sig-0")
            content.append(
                {
                    "reasoningContent": {
                        "reasoningText": {"text": turn.reasoning, "signature": signature}
                    }
                }
            )
        if turn.text:
            content.append({"text": turn.text})
        for number, call in enumerate(turn.tool_calls):
            use = {
                "toolUseId": _tool_id(call, number),
                "name": call["name"],
                "input": call.get("input", {}),
            }
            content.append({"toolUse": use})
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": _stop_reason(turn),
            "usage": _usage(turn),
            "metrics": {"latencyMs": 42},
        }


def _delta(index: int, delta: Mapping[str, Any]) -> bytes:
    return _event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})


def _tool_id(call: Mapping[str, Any], number: int) -> str:
    return str(call.get("id") or f"tooluse_{number:04d}")


def _stop_reason(turn: ServerTurn) -> str:
    if turn.stop_reason:
        return turn.stop_reason
    return "tool_use" if turn.tool_calls else "end_turn"


def _usage(turn: ServerTurn) -> dict[str, int]:
    # Sent as scripted (cacheReadInputTokens / cacheWriteInputTokens included, and
    # wrong types too, to test clients); only a missing total is derived.
    usage = turn.derived_usage()
    if "totalTokens" not in usage:
        usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"]
    return usage
