"""The plumbing every ``requests``-based wire shares (OpenAI's two, Gemini's): abortable
adapters on a session, credential headers registered for redaction, draining a finished
stream so its connection goes back to the pool, and telling a JSON answer from SSE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests

from .._redact import register_secret
from ._abort.requests import AbortableHTTPAdapter
from ._abort.urllib3 import RequestAbort

__all__ = [
    "drain",
    "is_json_answer",
    "mount_abortable",
    "post_streaming",
    "register_header_secrets",
]

logger = logging.getLogger(__name__)

_DRAIN_TIMEOUT = 0.5
_CREDENTIAL_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie")


def is_json_answer(response: requests.Response) -> bool:
    """Whether a streaming request was answered with one JSON document instead of SSE."""
    content_type = response.headers.get("content-type", "").lower()
    return "json" in content_type and "event-stream" not in content_type


def drain(response: requests.Response, chunks: Iterator[bytes]) -> None:
    """Read the end of the body after the stream's last event so the connection goes back
    to the pool.

    The end is normally already buffered; a server that keeps the body open gets
    ``_DRAIN_TIMEOUT`` seconds, then the connection is discarded instead of reused
    (urllib3 sets the read timeout again on the next request).
    """
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    if sock is not None:
        sock.settimeout(_DRAIN_TIMEOUT)
    try:
        for _ in chunks:
            pass
    except requests.RequestException:
        logger.debug("server kept the body open after the last event; dropping the connection")


def mount_abortable(session: requests.Session) -> None:
    """Replace the session's ``http(s)://`` adapters by abortable ones (pool sizes kept)."""
    for prefix in ("http://", "https://"):
        current = session.adapters.get(prefix)
        if isinstance(current, AbortableHTTPAdapter):
            continue
        # Retries off: the agent's policy retries, cancel-aware and counted once.
        if isinstance(current, requests.adapters.HTTPAdapter):
            # Keep the pool sizes the caller configured (requests keeps them private).
            adapter = AbortableHTTPAdapter(
                pool_connections=getattr(current, "_pool_connections", 10),
                pool_maxsize=getattr(current, "_pool_maxsize", 10),
                pool_block=getattr(current, "_pool_block", False),
                max_retries=0,
            )
        else:
            adapter = AbortableHTTPAdapter(max_retries=0)
        session.mount(prefix, adapter)


def register_header_secrets(headers: Mapping[str, Any]) -> None:
    """Register the values of credential-looking headers (``api-key``, ``Authorization``)."""
    for name, value in headers.items():
        if isinstance(value, str) and any(w in name.lower() for w in _CREDENTIAL_HEADER_WORDS):
            register_secret(value)
            register_secret(value.split()[-1] if value.split() else None)  # "Bearer <token>"


def post_streaming(
    session: requests.Session,
    url: str,
    body: dict[str, Any],
    headers: Mapping[str, str],
    timeout: Any,
    abort: RequestAbort,
    http_error: Callable[[int, str, Any], Exception],
) -> requests.Response:
    """``POST`` ``body`` as JSON, streaming; an error status raises the wire's mapped error
    (``http_error(status, body text, headers)``). Runs inside the caller's error mapping and
    ``abort_on_cancel`` block."""
    with abort.capture():  # a stale pooled connection is re-sent by the pool itself
        response = session.post(url, json=body, headers=dict(headers), stream=True, timeout=timeout)
    if response.status_code >= 400:
        try:
            text = response.text  # small JSON error body; aborted by cancel like the rest
        finally:
            response.close()
        raise http_error(response.status_code, text, response.headers)
    return response
