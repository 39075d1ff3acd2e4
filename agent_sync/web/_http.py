"""The chat routes' view of HTTP, the same under Flask and Django.

Each adapter turns its framework's request into a :class:`WebRequest` and a
:class:`WebResponse` back into its framework's response; everything between (parsing,
checking, the routes themselves) is written once, here and in :mod:`._routes`.

What comes in is checked at the edge: a body over :data:`MAX_BODY_BYTES`, a body that is
not a JSON object, a field of the wrong type: each is a :class:`BadRequest`, answered 400
with ``{"error": "bad_request", "message"}`` before anything is touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "MAX_BODY_BYTES",
    "BadRequest",
    "WebRequest",
    "WebResponse",
    "check_id",
    "content_type_of",
    "error_response",
    "json_response",
    "optional_str",
    "parse_json_body",
    "read_limited",
    "required_str",
]

MAX_BODY_BYTES: Final = 1024 * 1024
"""The largest request body the routes read (1 MiB); larger ones get 400."""

_MAX_ID_CHARS: Final = 256


class BadRequest(Exception):
    """A request the routes refuse with 400 (its message is shown to the client)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class WebRequest:
    """A request as the routes read it."""

    native: Any
    """The framework's request object (what ``authorize`` receives)."""
    body: bytes = b""
    """The body, at most ``MAX_BODY_BYTES + 1`` bytes (read no further)."""
    oversized: bool = False
    """The declared ``Content-Length`` is over ``MAX_BODY_BYTES`` (the body was not read)."""
    content_type: str = ""
    """The ``Content-Type`` header, lower-cased, without parameters."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Headers the routes read, by lower-case name (``last-event-id``)."""
    query: Mapping[str, str] = field(default_factory=dict)
    """Query parameters (the first value of each)."""
    environ: Mapping[str, Any] = field(default_factory=dict)
    """The WSGI environ (to find the client socket)."""


@dataclass
class WebResponse:
    """An answer: JSON, nothing (204), or a stream of bytes with a ``close()``."""

    status: int
    body: bytes | Iterable[bytes] = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, data: Mapping[str, Any]) -> WebResponse:
    """A JSON answer."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return WebResponse(status, payload.encode(), "application/json")


def error_response(status: int, error: str, message: str, **extra: Any) -> WebResponse:
    """``{"error", "message", ...}`` with ``status``."""
    return json_response(status, {"error": error, "message": message, **extra})


def content_type_of(header: str | None) -> str:
    """A ``Content-Type`` header's media type, lower-cased, without parameters."""
    return (header or "").split(";", 1)[0].strip().lower()


def read_limited(stream: Any, declared: int | None) -> tuple[bytes, bool]:
    """Read a request body, at most ``MAX_BODY_BYTES + 1`` bytes: ``(body, oversized)``.

    A declared length over the limit is not read at all.
    """
    if declared is not None and declared > MAX_BODY_BYTES:
        return b"", True
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_BODY_BYTES:
        chunk = stream.read(MAX_BODY_BYTES + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def parse_json_body(request: WebRequest, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object (``{}`` for an empty optional body).

    Raises:
        BadRequest: Too large, not JSON (or not declared ``application/json``: a
            cross-site form cannot send that without the browser asking first), not an
            object.
    """
    body = request.body
    if request.oversized or len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes")
    if not body.strip():
        if required:
            raise BadRequest("the body must be a JSON object")
        return {}
    if request.content_type != "application/json":
        raise BadRequest("the body must be sent as Content-Type: application/json")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def required_str(data: Mapping[str, Any], name: str, *, is_id: bool = False) -> str:
    """A non-empty string field.

    Raises:
        BadRequest: Missing, not a string, empty, or (an id) too long or with control
            characters.
    """
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name!r} must be a non-empty string")
    if is_id:
        check_id(value, name)
    return value


def optional_str(data: Mapping[str, Any], name: str) -> str | None:
    """A string field that may be missing or null.

    Raises:
        BadRequest: Present and not a string.
    """
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name!r} must be a string")
    return value


def check_id(value: str, name: str) -> str:
    """An id from a client: at most 256 characters, no control characters.

    Raises:
        BadRequest: It is not.
    """
    if len(value) > _MAX_ID_CHARS or not value.isprintable():
        raise BadRequest(f"{name!r} must be at most {_MAX_ID_CHARS} printable characters")
    return value
