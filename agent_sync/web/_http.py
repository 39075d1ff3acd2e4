"""The chat routes' view of HTTP, the same under Flask and Django.

Each adapter turns its framework's request into a :class:`WebRequest` and a
:class:`WebResponse` back into its framework's response; everything between (parsing,
checking, the routes themselves) is written once, here and in :mod:`._routes`.

What comes in is checked at the edge, before anything is touched:

- every ``POST`` must declare ``Content-Type: application/json`` (an empty body or ``{}``
  is fine where the route needs nothing): anything else is answered 415. A cross-site
  form cannot send that type without the browser asking the server first (a CORS
  preflight), so no page elsewhere can stop or answer a user's run (:func:`require_json`);
- a body over :data:`MAX_BODY_BYTES`, one that is not a JSON object, nested deeper than
  :data:`MAX_JSON_DEPTH`, with a non-finite number (``NaN``, ``Infinity``, ``1e400``), a
  field of the wrong type: each is a :class:`BadRequest`, answered 400 with
  ``{"error": "bad_request", "message"}`` (:func:`parse_json_body`);
- an id (conversation, run, approval) must match :data:`ID_PATTERN`, so no crafted id can
  name a store key of another kind (``<run_id>:signals``) (:func:`check_id`).

What goes out is always valid UTF-8: a lone surrogate already stored in a history becomes
U+FFFD in the answer (:func:`utf8`), never an encoding error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "ID_PATTERN",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "BadRequest",
    "Refusal",
    "WebRequest",
    "WebResponse",
    "check_id",
    "check_label",
    "content_type_of",
    "error_response",
    "json_response",
    "optional_str",
    "parse_json_body",
    "read_limited",
    "require_json",
    "required_str",
    "utf8",
    "valid_id",
]

MAX_BODY_BYTES: Final = 1024 * 1024
"""The largest request body the routes read (1 MiB); larger ones get 400."""

MAX_JSON_DEPTH: Final = 100
"""The deepest nesting of arrays and objects a body may have; deeper ones get 400."""

_MAX_ID_CHARS: Final = 256

ID_PATTERN: Final = re.compile(rf"[A-Za-z0-9._~@+=-]{{1,{_MAX_ID_CHARS}}}")
"""What an id from a client must be (whole): 1 to 256 ASCII letters, digits and
``. _ ~ @ + = -``. No ``:`` (the stores' key separator), ``/``, ``{}``, glob characters,
whitespace or control characters; run ids (``run_<hex>``), the AI SDK's ids and UUIDs fit."""

JSON_CONTENT_TYPE: Final = "application/json"


class BadRequest(Exception):
    """A request the routes refuse before touching anything (its message is shown to the
    client): 400 ``bad_request`` unless ``status``/``error`` say otherwise."""

    def __init__(self, message: str, *, status: int = 400, error: str = "bad_request") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error = error


class Refusal(Exception):
    """A route's answer that is not a success, raised anywhere below a route and answered
    with :attr:`response` (an :func:`error_response`; add headers to it before raising)."""

    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.response = error_response(status, error, message, **extra)


@dataclass(frozen=True)
class WebRequest:
    """A request as the routes read it."""

    native: Any
    """The framework's request object (what ``authorize`` receives)."""
    method: str
    """The HTTP method, upper-case (every ``POST`` must be :func:`require_json`)."""
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
    return WebResponse(status, utf8(payload), "application/json")


def utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (a history stored before its input was made
    encodable) becomes U+FFFD instead of raising."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        # UTF-16 round trip: surrogate pairs join, lone surrogates become U+FFFD
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


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


def require_json(request: WebRequest) -> None:
    """Refuse a request not declared ``application/json`` (415), whatever its body: the
    routes ask it of every ``POST`` before anything else.

    Raises:
        BadRequest: With status 415.
    """
    if request.content_type != JSON_CONTENT_TYPE:
        raise BadRequest(
            "send the body as Content-Type: application/json ({} when there is nothing to say)",
            status=415,
            error="unsupported_media_type",
        )


def parse_json_body(request: WebRequest, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object (``{}`` for an empty optional body); its declared type
    was checked first (:func:`require_json`, for every ``POST``).

    Raises:
        BadRequest: Too large, not JSON, a non-finite number, nested deeper than
            :data:`MAX_JSON_DEPTH`, not an object.
    """
    body = request.body
    if request.oversized or len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes")
    if not body.strip():
        if required:
            raise BadRequest("the body must be a JSON object")
        return {}
    try:
        data = json.loads(body, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise BadRequest(f"the body is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except _NonFinite as exc:
        raise BadRequest(f"the body has a number that is not finite: {exc}") from None
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    if _depth(data) > MAX_JSON_DEPTH:
        raise BadRequest(f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    return data


class _NonFinite(Exception):
    """A ``NaN``, ``Infinity`` or out-of-range number in a body (not a ``ValueError``, so
    the message says what is wrong)."""


def _no_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise _NonFinite(text[:40])
    return value


def _depth(data: object) -> int:
    """How deeply ``data`` nests lists and dicts (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[object]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


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


def valid_id(value: object) -> bool:
    """Whether ``value`` is an id a client may send (:data:`ID_PATTERN`)."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def check_label(value: str, name: str) -> str:
    """A client's label that names nothing stored (the AI SDK's message ids, its
    ``trigger``): at most 256 printable characters, any of them (an app's own
    ``generateId`` may use ``:``).

    Raises:
        BadRequest: It is not.
    """
    if not value or len(value) > _MAX_ID_CHARS or not value.isprintable():
        raise BadRequest(f"{name!r} must be 1 to {_MAX_ID_CHARS} printable characters")
    return value


def check_id(value: str, name: str) -> str:
    """An id from a client: :data:`ID_PATTERN` (no whitespace, no ``:``, at most 256).

    Raises:
        BadRequest: It is not.
    """
    if not valid_id(value):
        raise BadRequest(
            f"{name!r} must be 1 to {_MAX_ID_CHARS} ASCII letters, digits or . _ ~ @ + = -"
        )
    return value
