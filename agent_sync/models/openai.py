"""``OpenAIModel``: any OpenAI-compatible Chat Completions server, over ``requests``.

Works with OpenAI, vLLM, Ollama, llama.cpp's server, LM Studio and proxies that speak
``POST {base_url}/chat/completions`` with ``stream: true`` (Server-Sent Events).

Cancellation reaches blocked I/O: the session's transport is
:class:`~agent_sync.models._urllib3_abort.AbortableHTTPAdapter`, and each request is wrapped
in :func:`~agent_sync.models._urllib3_abort.abort_on_cancel`, so ``agent.cancel()`` shuts
down this request's socket while it connects, waits for headers or reads a silent stream.
Other requests sharing the session are not touched.

No retries here: the agent's retry policy retries the errors this module marks
``retryable`` (mapped in one place, :func:`_map_error`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import requests

from ..cancel import CancelledError, CancelScope
from ..errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
)
from ..messages import StreamEvent
from ._openai_format import ChunkTranslator, build_request_body
from ._sse import iter_sse
from ._urllib3_abort import AbortableHTTPAdapter, RequestAbort, abort_on_cancel
from ._wire import retry_after_seconds, shorten
from .base import ModelRequest

__all__ = ["OpenAIModel"]

logger = logging.getLogger(__name__)

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = (10.0, 120.0)
"""(connect, read) seconds. The read timeout bounds the silence *between* chunks."""

_MAX_ERROR_BODY = 2000
_DRAIN_TIMEOUT = 0.5
_CONTEXT_CODES = ("context_length_exceeded", "string_above_max_length")
_CONTEXT_PHRASES = ("maximum context length", "context window", "too many tokens", "context_length")
_KEY_PATTERN = re.compile(r"\b(sk-[A-Za-z0-9*_\-]{3,})")


class OpenAIModel:
    """A chat model served by an OpenAI-compatible Chat Completions endpoint.

    Thread-safety: one instance may serve several agents in several threads at once; each
    call uses its own connection from the session's pool, and a cancel aborts only the
    call it belongs to.

    Example::

        model = OpenAIModel("gpt-4o-mini", temperature=0)             # OpenAI
        local = OpenAIModel("llama3.1", base_url="http://localhost:11434/v1")  # Ollama

    Args:
        model_id: The model name the server expects.
        base_url: Endpoint root; requests go to ``{base_url}/chat/completions``.
        api_key: Bearer token; defaults to the ``OPENAI_API_KEY`` environment variable.
            Local servers usually need none. Never logged nor shown in reprs or errors.
        session: A ``requests.Session`` to use (its ``http(s)://`` adapters are replaced by
            abortable ones, keeping their pool sizes); a new one per model by default.
        timeout: ``(connect, read)`` seconds, or one number for both. ``read`` is the
            longest silence tolerated between two chunks.
        headers: Extra HTTP headers (e.g. ``{"OpenAI-Organization": ...}``).
        **params: Request fields sent with every call (``temperature``, ``max_tokens``,
            ``top_p``, ``stop``, ``seed``...), overridden by per-call ``request.params``.
    """

    provider = PROVIDER

    def __init__(
        self,
        model_id: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        session: requests.Session | None = None,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        headers: dict[str, str] | None = None,
        **params: Any,
    ) -> None:
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.timeout = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        self.params = dict(params)
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"accept": "text/event-stream", **(headers or {})}
        self._owns_session = session is None
        self.session = session if session is not None else requests.Session()
        _mount_abortable(self.session)

    def __repr__(self) -> str:
        return f"OpenAIModel(model_id={self.model_id!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the session (and its pooled connections) if this model created it."""
        if self._owns_session:
            self.session.close()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Send ``request`` and yield Converse stream events as chunks arrive.

        Cancel: ``cancel.cancel()`` from any thread shuts this call's socket down at once
        (connecting, before headers, or mid-stream); the generator then raises
        :class:`~agent_sync.cancel.CancelledError`. Closing the generator early releases
        the connection.

        Args:
            request: The conversation, system prompt and tools.
            cancel: The invocation's cancel scope.

        Yields:
            ``messageStart``, content block events, ``messageStop``, then ``metadata``.

        Raises:
            ModelError: The call failed; ``retryable`` says whether a retry may help.
            CancelledError: ``cancel`` was cancelled during the call.
        """
        body = build_request_body(
            self.model_id,
            request.messages,
            system_prompt=request.system_prompt,
            tool_specs=request.tool_specs,
            tool_choice=request.tool_choice,
            params={**self.params, **request.params},
        )
        cancel.raise_if_cancelled()
        started = time.monotonic()
        with abort_on_cancel(cancel) as abort:
            response = self._send(body, abort, cancel)
            try:
                logger.info(
                    "model=<%s>, status=<%d>, headers_ms=<%d> | openai response started",
                    self.model_id,
                    response.status_code,
                    (time.monotonic() - started) * 1000,
                )
                yield from self._events(response, abort, cancel)
            finally:
                response.close()

    # -- internals --

    def _send(
        self, body: dict[str, Any], abort: RequestAbort, cancel: CancelScope
    ) -> requests.Response:
        headers = dict(self._headers)
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        try:
            with abort.capture():
                response = self.session.post(
                    self.url, json=body, headers=headers, stream=True, timeout=self.timeout
                )
        except requests.RequestException as exc:
            self._raise(exc, abort, cancel)
        if response.status_code >= 400:
            try:
                text = response.text  # small JSON error body; aborted by cancel like the rest
            except requests.RequestException as exc:
                self._raise(exc, abort, cancel)
            finally:
                response.close()
            raise _http_error(response.status_code, text, response.headers, self._api_key)
        return response

    def _events(
        self, response: requests.Response, abort: RequestAbort, cancel: CancelScope
    ) -> Iterator[StreamEvent]:
        translator = ChunkTranslator()
        done = False
        try:
            chunks = response.iter_content(chunk_size=None)
            for sse in iter_sse(chunks):
                data = sse.data
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError as exc:
                    raise ModelStreamError(
                        f"malformed data line in the stream: {data[:200]!r}", provider=PROVIDER
                    ) from exc
                if not isinstance(chunk, dict):
                    raise ModelStreamError("stream chunk is not a JSON object", provider=PROVIDER)
                if "error" in chunk:
                    raise _stream_error(chunk["error"], self._api_key)
                yield from translator.add(chunk)
            if done:
                _drain(response, chunks)
        except requests.RequestException as exc:
            if not translator.finished:
                self._raise(exc, abort, cancel)
            # The answer was complete; only the tail (usage, [DONE]) was lost.
            logger.debug("error=<%s> | stream broke after finish_reason, ignoring", exc)
            done = True
        cancel.raise_if_cancelled()
        if not done and not translator.finished:
            raise ModelStreamError(
                "the stream ended before the response was complete (no finish_reason, no [DONE])",
                provider=PROVIDER,
                retryable=True,
            )
        yield from translator.finish()

    def _raise(self, exc: Exception, abort: RequestAbort, cancel: CancelScope) -> NoReturn:
        """Map a ``requests`` failure (or our own abort) to the error to raise."""
        if abort.aborted or cancel.cancelled:
            raise CancelledError(cancel.reason or "cancelled") from exc
        raise _map_error(exc) from exc


def _drain(response: requests.Response, chunks: Iterator[bytes]) -> None:
    """Read the end of the body after ``[DONE]`` so the connection goes back to the pool.

    The end is normally already buffered; a server that keeps the body open after
    ``[DONE]`` gets ``_DRAIN_TIMEOUT`` seconds, then the connection is discarded instead of
    reused (urllib3 sets the read timeout again on the next request).
    """
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    if sock is not None:
        sock.settimeout(_DRAIN_TIMEOUT)
    try:
        for _ in chunks:
            pass
    except requests.RequestException:
        logger.debug("server kept the body open after [DONE]; dropping the connection")


def _mount_abortable(session: requests.Session) -> None:
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


def _map_error(exc: Exception) -> ModelError:
    """The one place where ``requests`` exceptions become agent_sync errors."""
    if isinstance(exc, ModelError):
        return exc
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


def _http_error(status: int, text: str, headers: Any, api_key: str | None) -> ModelError:
    """An error response -> the most specific :class:`ModelHTTPError`."""
    body = _redact(text[:_MAX_ERROR_BODY], api_key)
    message, code = _error_fields(text, api_key)
    retry_after = retry_after_seconds(headers)
    detail = f"openai-compatible server returned {status}: {message or body or 'no body'}"
    lowered = f"{code} {message}".lower()
    if status == 429 or "rate_limit" in (code or ""):
        if code == "insufficient_quota":
            # A 429 that waiting will not fix: the account is out of credit.
            return ModelHTTPError(detail, status=status, body=body, provider=PROVIDER,
                                  retryable=False)  # fmt: skip
        return ModelThrottledError(
            detail, status=status, body=body, retry_after=retry_after, provider=PROVIDER
        )
    if status in (400, 413) and (
        code in _CONTEXT_CODES or any(p in lowered for p in _CONTEXT_PHRASES)
    ):
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


def _stream_error(error: Any, api_key: str | None) -> ModelError:
    """A ``data: {"error": ...}`` line in the middle of a stream."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = _redact(str(error.get("message") or "unknown error"), api_key)
    code = str(error.get("code") or error.get("type") or "")
    detail = f"the model server reported an error mid-stream: {message} ({code or 'no code'})"
    if "rate_limit" in code or code in ("429", "overloaded", "overloaded_error"):
        return ModelThrottledError(detail, status=None, body=message, provider=PROVIDER)
    retryable = code in ("server_error", "internal_error", "500", "502", "503")
    return ModelStreamError(detail, provider=PROVIDER, retryable=retryable)


def _error_fields(text: str, api_key: str | None) -> tuple[str, str | None]:
    """``(message, code)`` of an OpenAI error body (or of a bare ``{"message"}``/text)."""
    try:
        payload = json.loads(text)
    except ValueError:
        return _redact(text.strip()[:500], api_key), None
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if not isinstance(error, dict):
        return _redact(str(error)[:500], api_key), None
    code = error.get("code") or error.get("type")
    return _redact(str(error.get("message") or ""), api_key), str(code) if code else None


def _redact(text: str, api_key: str | None) -> str:
    # OpenAI echoes a masked key ("Incorrect API key provided: sk-ab***yz") in 401 bodies.
    if api_key:
        text = text.replace(api_key, "***")
    return _KEY_PATTERN.sub("sk-***", text)
