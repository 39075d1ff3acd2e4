"""The one place where Anthropic SDK / httpx2 failures become agent_sync errors.

Anthropic reports the same failure two ways: as an HTTP error response before the stream
starts (the SDK's ``APIStatusError``, status 429, 529...), or as an ``event: error`` inside
a 200 stream (or the error object of a JSON answer), which :func:`error_event` wraps as an
``APIStatusError`` with status 200 so both go through :func:`map_error`. Mid-stream, the
error type stands in for the status: ``overloaded_error`` is 529 and ``rate_limit_error``
429, both :class:`ModelThrottledError`, as before the stream.

Every call site (the request, the JSON answer, the event stream, closing the response)
runs inside one :func:`mapped_errors` block, the only place where SDK / httpx2 exceptions
become agent_sync errors (the rule is :func:`._wire.mapping`).

Rules:

* the SDK exception is redacted in place (:func:`agent_sync._redact.scrub_exception`)
  before mapping: it becomes ``__cause__``, and a printed traceback shows its message too.
  Messages are built from the provider's error body and status, never from request
  headers;
* a context overflow is recognised by the shared wording table
  (:func:`._wire.is_context_overflow`), whatever the error type, except on 401/403;
* messages carry Anthropic's request id when it sent one (:func:`._wire.with_request_id`).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager

import anthropic
import httpx2

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
from ._wire import is_context_overflow, mapping, retry_after_seconds, shorten, with_request_id

__all__ = ["PROVIDER", "error_event", "map_error", "mapped_errors", "rejects_cache"]

PROVIDER = "anthropic"

_CACHE_REJECTION_STATUSES = frozenset({400, 422})


def mapped_errors(cancel: CancelScope) -> AbstractContextManager[None]:
    """The block every Anthropic call site runs in (SDK / httpx2 errors leave it mapped by
    :func:`map_error`; the rule is :func:`._wire.mapping`)."""
    return mapping(cancel, map_error)


def rejects_cache(error: anthropic.APIStatusError) -> bool:
    """Whether ``error`` is a server refusing the ``cache_control`` markers (a 400/422
    naming them)."""
    text = f"{error.message} {error.body}"
    return error.status_code in _CACHE_REJECTION_STATUSES and "cache_control" in text


def error_event(data: str, response: httpx2.Response) -> anthropic.APIStatusError:
    """An ``event: error`` in a 200 stream, as the SDK reports it (then :func:`map_error`)."""
    try:
        payload: object = json.loads(data)
    except ValueError:
        payload = data
    return anthropic.APIStatusError(f"stream error: {data[:300]}", response=response, body=payload)


def map_error(exc: Exception) -> ModelError:
    """Map an SDK / httpx2 / stream-decoding exception to a :class:`ModelError`.

    The one place where Anthropic failures are translated. Messages are built from the
    provider's error body and status, never from request headers (no API key).

    Args:
        exc: What the SDK call or the stream iteration raised.

    Returns:
        The error to raise (``raise map_error(exc) from exc``).
    """
    scrub_exception(exc)  # it becomes __cause__: a printed traceback shows its message too
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc)
    if isinstance(exc, (anthropic.APITimeoutError, httpx2.TimeoutException)):
        return ModelConnectionError("timed out talking to Anthropic", provider=PROVIDER)
    if isinstance(exc, httpx2.RemoteProtocolError):
        return ModelStreamError(
            f"the Anthropic response was cut off: {shorten(exc)}",
            provider=PROVIDER,
            retryable=True,
        )
    if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
        return ModelConnectionError(
            f"connection to Anthropic failed: {shorten(exc.__cause__ or exc)}", provider=PROVIDER
        )
    if isinstance(exc, (ValueError, AttributeError, KeyError, TypeError)):
        # Malformed SSE data (JSON that does not parse or has the wrong shape).
        return ModelStreamError(
            f"malformed Anthropic stream event: {shorten(exc)}", provider=PROVIDER
        )
    return ModelError(f"Anthropic call failed: {type(exc).__name__}", provider=PROVIDER)


def _status_error(exc: anthropic.APIStatusError) -> ModelError:
    status = exc.status_code
    error_type = exc.type or ""
    detail = exc.api_message or shorten(exc.body)
    request_id = exc.request_id
    text = with_request_id(f"Anthropic {status} {error_type}: {detail}", request_id)
    body = shorten(exc.body, 2000)
    retry_after = retry_after_seconds(exc.response.headers)
    if status == 200:  # an `event: error` in the middle of a 200 stream
        status = {"overloaded_error": 529, "rate_limit_error": 429}.get(error_type, status)
        if status == 200:
            retryable = error_type in ("api_error", "timeout_error")
            if is_context_overflow(detail, error_type, str(exc.body)):
                return ContextWindowOverflowError(text, provider=PROVIDER)
            return ModelStreamError(
                with_request_id(f"Anthropic stream error {error_type}: {detail}", request_id),
                provider=PROVIDER,
                retryable=retryable,
            )
    if status in (429, 529) or error_type in ("rate_limit_error", "overloaded_error"):
        return ModelThrottledError(
            text, status=status, body=body, retry_after=retry_after, provider=PROVIDER
        )
    if status not in (401, 403) and is_context_overflow(detail, error_type, str(exc.body)):
        # One wording table for every provider and server (llama.cpp, vLLM, LiteLLM...).
        return ContextWindowOverflowError(text, provider=PROVIDER)
    if status in (401, 403):
        hint = "check the API key" if status == 401 else "the key lacks permission"
        return ModelHTTPError(
            f"{text}; {hint} (ANTHROPIC_API_KEY or client_args['api_key'])",
            status=status,
            body=body,
            provider=PROVIDER,
            retryable=False,
        )
    return ModelHTTPError(
        text,
        status=status,
        body=body,
        retry_after=retry_after,
        provider=PROVIDER,
        retryable=True if status >= 500 else None,  # None: the shared retryable-status list
    )
