"""Small helpers every provider's error mapping needs, written once."""

from __future__ import annotations

import email.utils
import time
from typing import Any

__all__ = ["retry_after_seconds", "shorten"]


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds the server asked us to wait, or ``None``.

    Reads ``retry-after-ms`` (Anthropic, OpenAI) first, then ``retry-after`` as delta
    seconds or an HTTP date. ``headers`` is any case-insensitive mapping with ``get``
    (httpx/requests headers) or botocore's lower-cased ``HTTPHeaders`` dict.
    """
    if not hasattr(headers, "get"):
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def shorten(value: object, limit: int = 300) -> str:
    """``str(value)``, cut to ``limit`` characters for error messages."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."
