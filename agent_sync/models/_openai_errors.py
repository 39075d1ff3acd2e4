"""The one place where ``requests`` failures and error answers become agent_sync errors.

An OpenAI-compatible server reports a failure three ways: an HTTP error status before the
stream starts (:func:`http_error`), a ``data: {"error": ...}`` line inside a 200 stream or
the error object of a JSON answer (:func:`stream_error`), or a broken connection, which
``requests`` raises (:func:`map_error`). Every call site (sending, reading an error body
or a JSON answer, reading the stream, closing the response) runs inside one
:func:`mapped_errors` block (the rule is :func:`._wire.mapping`).

Rules:

* the ``requests`` exception is redacted in place before mapping (it becomes
  ``__cause__``); secrets in an error body need no care here: :class:`ModelError` redacts
  on construction;
* error bodies come in many shapes (OpenAI, LiteLLM, Ollama, llama.cpp, vLLM; see
  :func:`_error_fields`); a context overflow is recognised by the shared wording table
  (:func:`._wire.is_context_overflow`), except on 401/403;
* messages carry the server's ``x-request-id`` when it sent one.
"""

from __future__ import annotations

import json
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
from ._wire import (
    is_context_overflow,
    mapping,
    retry_after_seconds,
    shorten,
    with_request_id,
)

__all__ = [
    "PROVIDER",
    "http_error",
    "map_error",
    "mapped_errors",
    "rejects_cache_fields",
    "stream_error",
]

PROVIDER = "openai"

_MAX_ERROR_BODY = 2000
_CACHE_REJECTION_STATUSES = (400, 422)


def mapped_errors(cancel: CancelScope) -> AbstractContextManager[None]:
    """The block every OpenAI call site runs in (``requests`` errors leave it mapped by
    :func:`map_error`; the rule is :func:`._wire.mapping`)."""
    return mapping(cancel, map_error)


def map_error(exc: Exception) -> ModelError:
    """Map a ``requests`` failure (or anything else the wire raised) to a :class:`ModelError`.

    Args:
        exc: What ``requests`` (or the response reading) raised.

    Returns:
        The error to raise (``raise map_error(exc) from exc``).
    """
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
            f"connection to the model server {kind}: {shorten(exc)}", provider=PROVIDER
        )
    return ModelError(f"request failed: {shorten(exc)}", provider=PROVIDER)


def http_error(status: int, text: str, headers: Mapping[str, str]) -> ModelError:
    """An error response (status >= 400, body ``text``) -> the most specific error."""
    body = text[:_MAX_ERROR_BODY]
    message, code, kind = _error_fields(text)
    retry_after = retry_after_seconds(headers)
    detail = with_request_id(
        f"openai-compatible server returned {status}: {message or body.strip() or 'no body'}",
        headers.get("x-request-id"),
    )
    if status == 429 or "rate_limit" in f"{code} {kind}":
        if "insufficient_quota" in (code, kind):
            # A 429 that waiting will not fix: the account is out of credit.
            return ModelHTTPError(detail, status=status, body=body, provider=PROVIDER,
                                  retryable=False)  # fmt: skip
        return ModelThrottledError(
            detail, status=status, body=body, retry_after=retry_after, provider=PROVIDER
        )
    if status not in (401, 403) and is_context_overflow(message, code, kind):
        return ContextWindowOverflowError(detail, provider=PROVIDER)
    if status in (401, 403):
        detail = (
            f"openai-compatible server refused the credentials ({status}): {message or body}. "
            "Check the api_key argument or OPENAI_API_KEY."
        )
        return ModelHTTPError(detail, status=status, body=body, provider=PROVIDER,
                              retryable=False)  # fmt: skip
    return ModelHTTPError(
        detail, status=status, body=body, retry_after=retry_after, provider=PROVIDER
    )


def stream_error(error: Any) -> ModelError:
    """A ``data: {"error": ...}`` line in the middle of a stream (or a JSON answer)."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = str(error.get("message") or "unknown error")
    code = str(error.get("code") or error.get("type") or "")
    detail = f"the model server reported an error mid-stream: {message} ({code or 'no code'})"
    if is_context_overflow(message, code, str(error.get("type") or "")):
        return ContextWindowOverflowError(detail, provider=PROVIDER)
    if "rate_limit" in code or code in ("429", "overloaded", "overloaded_error"):
        return ModelThrottledError(detail, status=None, body=message, provider=PROVIDER)
    retryable = code in ("server_error", "internal_error", "500", "502", "503")
    return ModelStreamError(detail, provider=PROVIDER, retryable=retryable)


def rejects_cache_fields(sent: list[str], error: ModelHTTPError) -> bool:
    """Whether ``error`` is a server refusing the cache fields ``sent`` (a 400/422 naming
    one of them)."""
    text = f"{error.message} {error.body or ''}"
    return error.status in _CACHE_REJECTION_STATUSES and any(name in text for name in sent)


def _error_fields(text: str) -> tuple[str, str, str]:
    """``(message, code, type)`` of an error body, ``""`` for what it lacks.

    Shapes: OpenAI/LiteLLM/Ollama ``{"error": {"message", "type", "code"}}`` (llama.cpp
    and vLLM put the status number in ``code``), vLLM's older top-level
    ``{"object": "error", "message", ...}``, ``{"error": "text"}``, or plain text.
    """
    try:
        payload = json.loads(text)
    except ValueError:
        return text.strip()[:500], "", ""
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if not isinstance(error, dict):
        return str(error)[:500], "", ""
    code, kind = error.get("code"), error.get("type")
    return (
        str(error.get("message") or ""),
        str(code) if code is not None else "",
        str(kind) if kind is not None else "",
    )
