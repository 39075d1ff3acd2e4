"""The one place where Gemini failures become agent_sync errors.

Gemini reports a failure as an HTTP error status with a Google RPC error body
``{"error": {"code", "message", "status", "details": [...]}}`` (:func:`http_error`), the
same object in a ``data:`` event of a started stream (:func:`stream_error`), or a broken
connection, which ``requests`` raises (:func:`map_error`). Every call site runs inside one
:func:`mapped_errors` block (the rule is :func:`._wire.mapping`).

Rules:

* 429 / ``RESOURCE_EXHAUSTED`` is throttling; its wait comes from the body's
  ``google.rpc.RetryInfo`` ``retryDelay`` (``"37s"``), else a ``retry-after`` header;
* 500 ``INTERNAL``, 503 ``UNAVAILABLE`` (overloaded), 504 ``DEADLINE_EXCEEDED`` are
  retryable; a 400 ``INVALID_ARGUMENT`` reporting too many input tokens is a
  :class:`ContextWindowOverflowError` (the shared wording table);
* a bad key is a 400 with reason ``API_KEY_INVALID`` (Gemini's way), a missing or refused
  one a 401/403: not retryable, and the message says where the key comes from. The key is
  never in a message (:class:`ModelError` redacts registered secrets).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import requests

from .._redact import scrub_exception
from ..cancel import CancelScope
from ..errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
)
from ._wire import is_context_overflow, mapping, retry_after_seconds, shorten

__all__ = ["PROVIDER", "http_error", "map_error", "mapped_errors", "stream_error"]

PROVIDER = "gemini"

_MAX_ERROR_BODY = 2000
_RETRYABLE_STATES = frozenset({"INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED"})
_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_EXPIRED"})
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def mapped_errors(cancel: CancelScope) -> AbstractContextManager[None]:
    """The block every Gemini call site runs in (the rule is :func:`._wire.mapping`)."""
    return mapping(cancel, map_error)


def map_error(exc: Exception) -> ModelError:
    """Map a ``requests`` failure (or anything else the wire raised) to a :class:`ModelError`."""
    scrub_exception(exc)  # it becomes __cause__: a printed traceback shows its message too
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return ModelStreamError(
            f"the connection broke while streaming: {type(exc).__name__}",
            provider=PROVIDER,
            retryable=True,
        )
    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        kind = "timed out" if isinstance(exc, requests.Timeout) else "failed"
        return ModelConnectionError(
            f"connection to Gemini {kind}: {shorten(exc)}", provider=PROVIDER
        )
    return ModelError(f"request failed: {shorten(exc)}", provider=PROVIDER)


def http_error(status: int, text: str, headers: Mapping[str, str]) -> ModelError:
    """An error response (status >= 400, body ``text``) -> the most specific error."""
    error = _error_object(text)
    return _mapped(status, error, text[:_MAX_ERROR_BODY], headers)


def stream_error(error: Any) -> ModelError:
    """A ``data: {"error": ...}`` event inside a started stream."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    code = error.get("code")
    status = code if isinstance(code, int) else None
    mapped = _mapped(status, error, shorten(error.get("message"), 500), {})
    if isinstance(mapped, ModelHTTPError) and not isinstance(mapped, ModelThrottledError):
        if mapped.retryable or status is None:
            # Not an answer to the request: the stream itself failed.
            return ModelStreamError(mapped.message, provider=PROVIDER, retryable=mapped.retryable)
    return mapped


def _mapped(
    status: int | None, error: dict[str, Any], body: str, headers: Mapping[str, str]
) -> ModelError:
    message = str(error.get("message") or "").strip()
    state = str(error.get("status") or "")
    reasons = _detail_values(error, "reason")
    shown = f"{status} {state}".strip() if status is not None else state or "error"
    detail = f"Gemini returned {shown}: {message or body.strip() or 'no body'}"
    if status == 429 or state == "RESOURCE_EXHAUSTED":
        retry_after = _retry_delay(error)
        if retry_after is None:
            retry_after = retry_after_seconds(headers)
        return ModelThrottledError(
            detail, status=status, body=body, retry_after=retry_after, provider=PROVIDER
        )
    if (
        status in (401, 403)
        or state in ("UNAUTHENTICATED", "PERMISSION_DENIED")
        or (_AUTH_REASONS & set(reasons))
    ):
        detail = (
            f"Gemini refused the credentials ({shown}): {message or body}. "
            "Check the api_key argument or GEMINI_API_KEY."
        )
        return ModelHTTPError(detail, status=status, body=body, provider=PROVIDER,
                              retryable=False)  # fmt: skip
    if is_context_overflow(message):
        return ContextWindowOverflowError(detail, provider=PROVIDER)
    retryable = state in _RETRYABLE_STATES or None  # None: decided by the status
    return ModelHTTPError(
        detail,
        status=status,
        body=body,
        retry_after=retry_after_seconds(headers),
        provider=PROVIDER,
        retryable=retryable,
    )


def _error_object(text: str) -> dict[str, Any]:
    """The ``error`` object of a Google error body (a JSON list of them on some paths),
    or ``{"message": text}`` for anything else (a proxy's HTML page)."""
    try:
        payload = json.loads(text)
    except ValueError:
        return {"message": text.strip()[:500]}
    if isinstance(payload, list) and payload:
        payload = payload[0]
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    return error if isinstance(error, dict) else {"message": str(error)[:500]}


def _detail_values(error: dict[str, Any], key: str) -> list[str]:
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [str(d[key]) for d in details if isinstance(d, dict) and d.get(key) is not None]


def _retry_delay(error: dict[str, Any]) -> float | None:
    """``google.rpc.RetryInfo.retryDelay`` (a protobuf Duration, ``"37s"``) in seconds."""
    for delay in _detail_values(error, "retryDelay"):
        found = _DELAY.match(delay)
        if found:
            return float(found.group(1))
    return None
