"""Small helpers every provider needs, written once.

* :func:`mapping`: the rule of every provider's error-mapping context manager;
* :class:`CacheRejection`: a server refused the prompt-cache fields, remembered per model;
* the wording table of context overflows, ``retry-after`` parsing, request ids;
* :data:`MALFORMED`: what the wire-format translators catch at their boundaries.
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..cancel import CancelledError, CancelScope
from ..errors import AgentSyncError, ModelError

__all__ = [
    "CONTEXT_OVERFLOW_MARKERS",
    "MALFORMED",
    "CacheRejection",
    "is_context_overflow",
    "mapping",
    "retry_after_seconds",
    "shorten",
    "with_request_id",
]

MALFORMED = (AttributeError, IndexError, KeyError, TypeError, ValueError)
"""What translating malformed content raises, in either direction (``ValueError`` covers
``json.dumps`` of a circular or oversized value): each translator turns it into a
``UsageError`` (the caller's history) or a ``ModelStreamError`` (the server's output)."""


@contextmanager
def mapping(cancel: CancelScope, map_error: Callable[[Exception], ModelError]) -> Iterator[None]:
    """Turn what a wire raises into agent_sync errors; each provider wraps it once.

    The rule, the same for every provider and every call site inside the block (sending,
    waiting for headers, reading the stream, closing the response):

    * once ``cancel`` is cancelled, whatever broke is the cancel: :class:`CancelledError`
      (an abort surfaces as a read or connect error, so say why);
    * agent_sync's own errors (a :class:`ModelError` built from the server's answer, a
      ``UsageError``) pass unchanged;
    * anything else is ``map_error(exc)``, raised ``from exc`` (``map_error`` redacts
      ``exc`` in place, as it becomes ``__cause__``).

    ``GeneratorExit`` and ``KeyboardInterrupt`` are not exceptions of the wire and pass.

    Args:
        cancel: The call's cancel scope.
        map_error: The provider's one mapping function.

    Raises:
        CancelledError: The scope was cancelled.
        agent_sync.errors.ModelError: The mapped failure.
    """
    try:
        yield
    except Exception as exc:
        if cancel.cancelled:
            raise CancelledError(cancel.reason or "cancelled") from exc
        if isinstance(exc, AgentSyncError):
            raise
        raise map_error(exc) from exc


class CacheRejection:
    """Whether a server refused the prompt-cache fields: remembered per model. Thread-safe.

    A provider checks :attr:`rejected` before building a request (and then sends no cache
    fields), and calls :meth:`remember` when a server's error names them; the request is
    then sent again at once without them. Only the first :meth:`remember` logs (DEBUG).

    Args:
        logger: The provider's logger (users filter on it).
    """

    __slots__ = ("_lock", "_logger", "_rejected")

    def __init__(self, logger: logging.Logger) -> None:
        self._lock = threading.Lock()
        self._logger = logger
        self._rejected = False

    @property
    def rejected(self) -> bool:
        """Whether a server of this model refused the cache fields."""
        return self._rejected

    def remember(self, message: str, *args: object) -> None:
        """Never send the cache fields again; log ``message % args`` the first time only."""
        with self._lock:
            first, self._rejected = not self._rejected, True
        if first:
            self._logger.debug(message, *args)


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
    # Gemini: 400 INVALID_ARGUMENT "The input token count (1200000) exceeds the maximum
    # number of tokens allowed (1048576)."
    "exceeds the maximum number of tokens allowed",
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
