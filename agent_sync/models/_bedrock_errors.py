"""The one place where botocore / urllib3 failures become agent_sync errors.

Every call site (the call, the event stream, closing it) runs inside one
:func:`mapped_errors` block (the rule is :func:`._wire.mapping`).

Bedrock reports the same failure two ways: as an HTTP error response before the stream
starts (botocore ``ClientError``, code ``ThrottlingException``), or as an exception message
inside the event stream (botocore ``EventStreamError``, code ``throttlingException``). Codes
are compared case-insensitively so both land on the same mapping.

``ServiceUnavailableException`` maps to :class:`ModelThrottledError` (status 503): Bedrock
sends it when the model is out of capacity, the same signal as Anthropic's 529
"overloaded", and callers that back off on throttling want to back off on it too.

A context overflow is recognised by the shared wording table
(:data:`._wire.CONTEXT_OVERFLOW_MARKERS`), whatever the error code: Bedrock says
"Input is too long" / "too many input tokens" in a ``ValidationException``, and a model
behind it may use its own wording. Messages carry Bedrock's request id when it sent one.
"""

from __future__ import annotations

import logging
import re
from contextlib import AbstractContextManager
from typing import Any

from botocore import exceptions as boto_errors
from botocore.eventstream import ParserError
from urllib3 import exceptions as urllib3_errors

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

__all__ = ["PROVIDER", "is_cache_rejection", "map_error", "mapped_errors"]

logger = logging.getLogger(__name__)

PROVIDER = "bedrock"
# code (lower case) -> (default HTTP status, retryable)
_CODES: dict[str, tuple[int, bool]] = {
    "throttlingexception": (429, True),
    "servicequotaexceededexception": (429, True),
    "modelnotreadyexception": (429, True),
    "serviceunavailableexception": (503, True),
    "internalserverexception": (500, True),
    "modeltimeoutexception": (408, True),
    "modelerrorexception": (424, False),
    "validationexception": (400, False),
    "resourcenotfoundexception": (404, False),
    "accessdeniedexception": (403, False),
    "unrecognizedclientexception": (403, False),
    "invalidsignatureexception": (403, False),
    "expiredtokenexception": (403, False),
    "modelstreamerrorexception": (200, True),
}
_AUTH_CODES = frozenset(
    {
        "accessdeniedexception",
        "unrecognizedclientexception",
        "invalidsignatureexception",
        "expiredtokenexception",
    }
)
_BODY_LIMIT = 2000
_CACHE_WORDS = re.compile(r"(?i)cache ?point|caching|\bttl\b")


def mapped_errors(cancel: CancelScope) -> AbstractContextManager[None]:
    """The block every Bedrock call site runs in (botocore / urllib3 errors leave it mapped by
    :func:`map_error`; the rule is :func:`._wire.mapping`)."""
    return mapping(cancel, map_error)


def map_error(exc: Exception) -> ModelError:
    """Translate a botocore/urllib3 failure into the matching :class:`ModelError`.

    Args:
        exc: What botocore, urllib3 or the socket raised.

    Returns:
        The error to raise (``raise map_error(exc) from exc``).
    """
    scrub_exception(exc)  # it becomes __cause__: a printed traceback shows its message too
    if isinstance(exc, boto_errors.ClientError):  # EventStreamError is a ClientError too
        return _map_client_error(exc)
    if isinstance(exc, ParserError):  # botocore's decoder or ours (._eventstream)
        return ModelStreamError(
            f"Bedrock sent a malformed event stream frame ({type(exc).__name__}: "
            f"{shorten(exc, 200)})",
            provider=PROVIDER,
        )
    if isinstance(exc, boto_errors.NoCredentialsError | boto_errors.PartialCredentialsError):
        return ModelError(
            "no usable AWS credentials: configure a profile, environment variables or "
            "pass boto_session=",
            provider=PROVIDER,
            retryable=False,
        )
    if isinstance(exc, boto_errors.ParamValidationError):
        return ModelError(
            f"Bedrock request rejected by botocore: {exc}", provider=PROVIDER, retryable=False
        )
    if isinstance(
        exc,
        boto_errors.HTTPClientError
        | urllib3_errors.HTTPError
        | boto_errors.ConnectionError
        | OSError,
    ):
        return ModelConnectionError(
            f"connection to Bedrock failed: {type(exc).__name__}: {exc}", provider=PROVIDER
        )
    return ModelError(
        f"Bedrock call failed: {type(exc).__name__}: {exc}", provider=PROVIDER, retryable=False
    )


def _map_client_error(exc: boto_errors.ClientError) -> ModelError:
    response: dict[str, Any] = getattr(exc, "response", {}) or {}
    error = response.get("Error", {})
    code = str(error.get("Code") or "UnknownError")
    message = str(error.get("Message") or "")[:_BODY_LIMIT]
    metadata = response.get("ResponseMetadata", {})
    mid_stream = isinstance(exc, boto_errors.EventStreamError)
    key = code.lower()
    default_status, retryable = _CODES.get(key, (None, None))
    status = default_status if mid_stream else metadata.get("HTTPStatusCode", default_status)
    if retryable is None:
        retryable = isinstance(status, int) and (status >= 500 or status in (408, 429))
    retry_after = retry_after_seconds(metadata.get("HTTPHeaders", {}))
    text = f"Bedrock {code}: {message}" if message else f"Bedrock {code}"
    text = with_request_id(text, metadata.get("RequestId") or None)
    logger.debug(
        "code=<%s>, status=<%s>, mid_stream=<%s> | bedrock error", code, status, mid_stream
    )

    if not retryable and is_context_overflow(message, code):
        return ContextWindowOverflowError(text, provider=PROVIDER, retryable=False)
    if key == "modelstreamerrorexception":
        return ModelStreamError(text, provider=PROVIDER, retryable=True)
    if key in ("throttlingexception", "serviceunavailableexception") or (
        status == 429 and retryable
    ):
        return ModelThrottledError(
            text,
            status=status,
            body=message,
            retry_after=retry_after,
            provider=PROVIDER,
        )
    if key in _AUTH_CODES:
        text += " (check the AWS credentials, the region and that model access is enabled)"
    return ModelHTTPError(
        text,
        status=status,
        body=message,
        retry_after=retry_after,
        provider=PROVIDER,
        retryable=retryable,
    )


def is_cache_rejection(exc: BaseException) -> bool:
    """Whether ``exc`` says the request's ``cachePoint`` blocks are not accepted.

    Either botocore's client-side validation (an older service model without
    ``cachePoint`` or ``ttl``) or a ``ValidationException`` from a model or region without
    prompt caching; both name the cache point (or its ``ttl``) in the message.
    """
    if isinstance(exc, boto_errors.ParamValidationError):
        message = str(exc)
    elif isinstance(exc, boto_errors.ClientError) and not isinstance(
        exc, boto_errors.EventStreamError
    ):
        error = (getattr(exc, "response", {}) or {}).get("Error", {})
        if str(error.get("Code", "")).lower() != "validationexception":
            return False
        message = str(error.get("Message") or "")
    else:
        return False
    return _CACHE_WORDS.search(message) is not None
