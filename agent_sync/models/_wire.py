"""Small helpers every provider's error mapping needs, written once."""

from __future__ import annotations

import email.utils
import time
from typing import Any

__all__ = [
    "CONTEXT_OVERFLOW_MARKERS",
    "is_context_overflow",
    "retry_after_seconds",
    "shorten",
    "with_request_id",
]

CONTEXT_OVERFLOW_MARKERS: tuple[str, ...] = (
    # OpenAI: code context_length_exceeded, "This model's maximum context length is ..."
    "context_length_exceeded",
    "string_above_max_length",
    # vLLM and OpenAI prose
    "maximum context length",
    # Anthropic (and Claude on Bedrock)
    "prompt is too long",
    # Bedrock Converse
    "input is too long",
    "too many input tokens",
    "too many total text bytes",
    "model_context_window_exceeded",
    # llama.cpp server: "request (6033 tokens) exceeds the available context size (4096
    # tokens)", type exceed_context_size_error on its Anthropic front end
    "exceeds the available context size",
    "exceed_context_size_error",
    # Ollama: "input length exceeds the context length", "... exceeds maximum context length"
    "exceeds the context length",
    "exceeds maximum context length",
    "exceeds the context window",
    # LiteLLM proxy: litellm.ContextWindowExceededError
    "contextwindowexceedederror",
    "context window exceeded",
    "context_window_exceeded",
)
"""Lower-case phrases (and error codes) that mean "the request does not fit the model's
context window", in every provider's and server's wording we know. One table for every
provider; extend it here, never in a provider."""


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


def is_context_overflow(*texts: str | None) -> bool:
    """Whether any of ``texts`` (an error message, code or type) reports a context overflow."""
    for text in texts:
        if text:
            lowered = text.lower()
            if any(marker in lowered for marker in CONTEXT_OVERFLOW_MARKERS):
                return True
    return False


def with_request_id(text: str, request_id: str | None) -> str:
    """``text`` plus ``" (request-id X)"`` when the server sent one; no placeholder."""
    return f"{text} (request-id {request_id})" if request_id else text


def shorten(value: object, limit: int = 300) -> str:
    """``str(value)``, cut to ``limit`` characters for error messages."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."
