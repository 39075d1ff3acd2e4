"""``OpenAIModel``: any OpenAI-compatible Chat Completions server, over ``requests``.

Works with OpenAI, vLLM, Ollama, llama.cpp's server, LM Studio and proxies that speak
``POST {base_url}/chat/completions`` with ``stream: true`` (Server-Sent Events).

Cancellation reaches blocked I/O: the session's transport is
:class:`~agent_sync.models._urllib3_abort.AbortableHTTPAdapter`, and each request is wrapped
in :func:`~agent_sync.models._urllib3_abort.abort_on_cancel`, so ``agent.cancel()`` shuts
down this request's socket while it connects, waits for headers or reads a silent stream.
Other requests sharing the session are not touched.

No retries here: the agent's retry policy retries the errors this module marks
``retryable`` (mapped in one place, :func:`_map_error`). Two re-sends happen at once,
inside one call, because they are not failures of the server:

* a *stale pooled connection* (the server closed a keep-alive connection, as llama.cpp
  does after a stream) is re-sent by the abortable pool itself, without back-off and not
  counted as a retry (the rule, shared with Bedrock, is in
  :mod:`~agent_sync.models._urllib3_abort`);
* prompt-cache fields (``prompt_cache_retention``/``prompt_cache_key``) that the server
  rejects with a 400 naming them are dropped, remembered per model, and the request is
  sent again without them.

Tolerated: a ``200 application/json`` ``chat.completion`` answer to ``stream: true``
(LiteLLM's mocked responses, some proxies) is taken as the whole message.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import requests

from .._redact import register_secret, scrub_exception
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
from ._openai_format import CACHE_FIELDS, ChunkTranslator, build_request_body, completion_as_chunk
from ._sse import iter_sse
from ._urllib3_abort import AbortableHTTPAdapter, RequestAbort, abort_on_cancel
from ._wire import is_context_overflow, retry_after_seconds, shorten, with_request_id
from .base import ModelRequest

__all__ = ["OpenAIModel"]

logger = logging.getLogger(__name__)

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = (10.0, 120.0)
"""(connect, read) seconds. The read timeout bounds the silence *between* chunks."""

_MAX_ERROR_BODY = 2000
_DRAIN_TIMEOUT = 0.5
_CREDENTIAL_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie")
_REJECTION_STATUSES = (400, 422)


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
        # Every credential we were given or resolved: errors and logs redact them by value.
        register_secret(self._api_key)
        _register_header_secrets(self._headers)
        _register_header_secrets(self.session.headers)
        self._lock = threading.Lock()
        self._cache_fields_rejected = False
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
            cache=request.cache,
            cache_key=request.cache_key,
        )
        if self._cache_fields_rejected:
            body = _without_cache_fields(body)
        cancel.raise_if_cancelled()
        started = time.monotonic()
        with abort_on_cancel(cancel) as abort:
            try:
                response = self._send(body, abort, cancel)
            except ModelHTTPError as exc:
                if not self._rejects_cache_fields(body, exc):
                    raise
                response = self._send(_without_cache_fields(body), abort, cancel)
            try:
                logger.info(
                    "model=<%s>, status=<%d>, headers_ms=<%d> | openai response started",
                    self.model_id,
                    response.status_code,
                    (time.monotonic() - started) * 1000,
                )
                content_type = response.headers.get("content-type", "").lower()
                if "json" in content_type and "event-stream" not in content_type:
                    yield from self._json_answer(response, abort, cancel)
                else:
                    yield from self._events(response, abort, cancel)
            finally:
                response.close()

    # -- internals --

    def _rejects_cache_fields(self, body: dict[str, Any], error: ModelHTTPError) -> bool:
        """Whether ``error`` is the server refusing the cache fields ``body`` carries.

        The first time, remembers it for this model (thread-safe) and logs at DEBUG.
        """
        sent = [name for name in CACHE_FIELDS if name in body]
        text = f"{error.message} {error.body or ''}"
        if error.status not in _REJECTION_STATUSES or not any(name in text for name in sent):
            return False
        with self._lock:
            first, self._cache_fields_rejected = not self._cache_fields_rejected, True
        if first:
            logger.debug(
                "model=<%s>, fields=<%s> | server rejected the prompt cache fields; "
                "sending requests without them",
                self.model_id,
                ",".join(sent),
            )
        return True

    def _send(
        self, body: dict[str, Any], abort: RequestAbort, cancel: CancelScope
    ) -> requests.Response:
        headers = dict(self._headers)
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        try:
            with abort.capture():  # a stale pooled connection is re-sent by the pool itself
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
            raise _http_error(response.status_code, text, response.headers)
        return response

    def _json_answer(
        self, response: requests.Response, abort: RequestAbort, cancel: CancelScope
    ) -> Iterator[StreamEvent]:
        """A ``200 application/json`` answer to ``stream: true``: the whole message at once."""
        try:
            text = response.text
        except requests.RequestException as exc:
            self._raise(exc, abort, cancel)
        cancel.raise_if_cancelled()
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise ModelStreamError(
                f"malformed JSON answer: {text[:200]!r}", provider=PROVIDER
            ) from exc
        if isinstance(payload, dict) and "error" in payload:
            raise _stream_error(payload["error"])
        if not isinstance(payload, dict):
            raise ModelStreamError("JSON answer is not an object", provider=PROVIDER)
        logger.debug("model=<%s> | server answered a stream request with JSON", self.model_id)
        translator = ChunkTranslator()
        yield from translator.add(completion_as_chunk(payload))
        yield from translator.finish()

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
                    raise _stream_error(chunk["error"])
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


def _register_header_secrets(headers: Mapping[str, Any]) -> None:
    """Register the values of credential-looking headers (``api-key``, ``Authorization``)."""
    for name, value in headers.items():
        if isinstance(value, str) and any(w in name.lower() for w in _CREDENTIAL_HEADER_WORDS):
            register_secret(value)
            register_secret(value.split()[-1] if value.split() else None)  # "Bearer <token>"


def _without_cache_fields(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name not in CACHE_FIELDS}


def _map_error(exc: Exception) -> ModelError:
    """The one place where ``requests`` exceptions become agent_sync errors."""
    if isinstance(exc, ModelError):
        return exc
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


def _http_error(status: int, text: str, headers: Any) -> ModelError:
    """An error response -> the most specific :class:`ModelHTTPError`.

    Secrets in the body need no care here: :class:`ModelError` redacts on construction.
    """
    body = text[:_MAX_ERROR_BODY]
    message, code, kind = _error_fields(text)
    retry_after = retry_after_seconds(headers)
    detail = with_request_id(
        f"openai-compatible server returned {status}: {message or body.strip() or 'no body'}",
        headers.get("x-request-id") if hasattr(headers, "get") else None,
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


def _stream_error(error: Any) -> ModelError:
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
