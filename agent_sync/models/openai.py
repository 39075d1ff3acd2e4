"""``OpenAIModel``: any OpenAI-compatible Chat Completions server, over ``requests``.

Works with OpenAI, vLLM, Ollama, llama.cpp's server, LM Studio and proxies that speak
``POST {base_url}/chat/completions`` with ``stream: true`` (Server-Sent Events).

Cancellation reaches blocked I/O: the session's transport is
:class:`~agent_sync.models._abort.requests.AbortableHTTPAdapter`, and each request is
wrapped in :func:`~agent_sync.models._abort.urllib3.abort_on_cancel`, so
``agent.cancel()`` shuts down this request's socket while it connects, waits for headers
or reads a silent stream. Other requests sharing the session are not touched.

No retries here: the agent's retry policy retries the errors this module marks
``retryable`` (mapped in one place, the :func:`~._openai_errors.mapped_errors` block
around every call site). Two re-sends happen at once, inside one call, because they are
not failures of the server:

* a *stale pooled connection* (the server closed a keep-alive connection, as llama.cpp
  does after a stream) is re-sent by the abortable pool itself, without back-off and not
  counted as a retry (the rule, shared with Bedrock, is in
  :mod:`~agent_sync.models._abort.urllib3`);
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
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests

from .._redact import register_secret
from ..cancel import CancelScope
from ..errors import ModelError, ModelHTTPError, ModelStreamError
from ..messages import StreamEvent
from ._abort.requests import AbortableHTTPAdapter
from ._abort.urllib3 import RequestAbort, abort_on_cancel
from ._openai_errors import (
    PROVIDER,
    http_error,
    mapped_errors,
    rejects_cache_fields,
    stream_error,
)
from ._openai_format import CACHE_FIELDS, build_request_body
from ._openai_stream import ChunkTranslator, completion_as_chunk
from ._sse import iter_sse
from ._wire import CacheRejection
from .base import ModelRequest

__all__ = ["OpenAIModel"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = (10.0, 120.0)
"""(connect, read) seconds. The read timeout bounds the silence *between* chunks."""

_DRAIN_TIMEOUT = 0.5
_CREDENTIAL_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie")


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
        self._cache_rejection = CacheRejection(logger)
        _mount_abortable(self.session)
        # OpenAI itself refuses a request without a key: say so before sending anything
        # (local servers at another base_url usually need none).
        self._no_credentials = (
            not self._api_key
            and urlsplit(self.base_url).hostname == urlsplit(DEFAULT_BASE_URL).hostname
            and not any(
                name.lower() == "authorization" for name in (*self._headers, *self.session.headers)
            )
        )

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
        if self._no_credentials:
            raise ModelError(
                "no OpenAI API key: set the OPENAI_API_KEY environment variable or pass "
                "api_key= (nothing was sent; a local server at another base_url needs none)",
                provider=PROVIDER,
                retryable=False,
            )
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
        if self._cache_rejection.rejected:
            body = _without_cache_fields(body)
        cancel.raise_if_cancelled()
        started = time.monotonic()
        with abort_on_cancel(cancel) as abort, mapped_errors(cancel):
            try:
                response = self._send(body, abort)
            except ModelHTTPError as exc:
                sent = [name for name in CACHE_FIELDS if name in body]
                if not rejects_cache_fields(sent, exc):
                    raise
                self._cache_rejection.remember(
                    "model=<%s>, fields=<%s> | server rejected the prompt cache fields; "
                    "sending requests without them",
                    self.model_id,
                    ",".join(sent),
                )
                response = self._send(_without_cache_fields(body), abort)
            try:
                logger.info(
                    "model=<%s>, status=<%d>, headers_ms=<%d> | openai response started",
                    self.model_id,
                    response.status_code,
                    (time.monotonic() - started) * 1000,
                )
                content_type = response.headers.get("content-type", "").lower()
                if "json" in content_type and "event-stream" not in content_type:
                    yield from self._json_answer(response, cancel)
                else:
                    yield from self._events(response, cancel)
            finally:
                response.close()

    # -- internals (each runs inside the caller's mapped_errors block) --

    def _send(self, body: dict[str, Any], abort: RequestAbort) -> requests.Response:
        headers = dict(self._headers)
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        with abort.capture():  # a stale pooled connection is re-sent by the pool itself
            response = self.session.post(
                self.url, json=body, headers=headers, stream=True, timeout=self.timeout
            )
        if response.status_code >= 400:
            try:
                text = response.text  # small JSON error body; aborted by cancel like the rest
            finally:
                response.close()
            raise http_error(response.status_code, text, response.headers)
        return response

    def _json_answer(
        self, response: requests.Response, cancel: CancelScope
    ) -> Iterator[StreamEvent]:
        """A ``200 application/json`` answer to ``stream: true``: the whole message at once."""
        text = response.text
        cancel.raise_if_cancelled()
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise ModelStreamError(
                f"malformed JSON answer: {text[:200]!r}", provider=PROVIDER
            ) from exc
        if isinstance(payload, dict) and "error" in payload:
            raise stream_error(payload["error"])
        if not isinstance(payload, dict):
            raise ModelStreamError("JSON answer is not an object", provider=PROVIDER)
        logger.debug("model=<%s> | server answered a stream request with JSON", self.model_id)
        translator = ChunkTranslator()
        yield from translator.add(completion_as_chunk(payload))
        yield from translator.finish()

    def _events(self, response: requests.Response, cancel: CancelScope) -> Iterator[StreamEvent]:
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
                    raise stream_error(chunk["error"])
                yield from translator.add(chunk)
            if done:
                _drain(response, chunks)
        except requests.RequestException as exc:
            if not translator.finished:
                raise  # mapped by the caller's block
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
