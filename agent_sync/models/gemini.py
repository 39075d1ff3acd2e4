"""``GeminiModel``: Google's Gemini API (``streamGenerateContent``), over ``requests``.

``POST {base_url}/models/{model}:streamGenerateContent?alt=sse`` with the key in the
``x-goog-api-key`` header; each Server-Sent Event is one ``GenerateContentResponse``. The
request format is :mod:`._gemini_format`, the answer :mod:`._gemini_stream`, the errors
:mod:`._gemini_errors`. The ``google-genai`` SDK is not used (nor needed).

Cancellation reaches blocked I/O as for :class:`~agent_sync.models.OpenAIModel`: the
session's transport is :class:`~agent_sync.models._abort.requests.AbortableHTTPAdapter` and
each request runs in :func:`~agent_sync.models._abort.urllib3.abort_on_cancel`, so
``agent.cancel()`` shuts this request's socket down while it connects, waits for headers
or reads a silent stream.

No retries here: the agent's retry policy retries what :mod:`._gemini_errors` marks
``retryable``. Re-sent at once, inside one call: a stale pooled connection (by the pool),
and a structured-output request whose ``responseJsonSchema`` the server refuses (a 400
naming it; remembered per model, then the output is asked through a forced output tool).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import requests

from .._redact import register_secret
from ..cancel import CancelScope
from ..errors import ModelError, ModelHTTPError, ModelStreamError
from ..messages import StreamEvent
from ._abort.urllib3 import RequestAbort, abort_on_cancel
from ._gemini_errors import PROVIDER, http_error, mapped_errors, stream_error
from ._gemini_format import build_request_body
from ._gemini_stream import ResponseTranslator
from ._http import mount_abortable, post_streaming, register_header_secrets
from ._output import with_output_tool
from ._sse import iter_sse
from ._wire import CacheRejection
from .base import ModelRequest

__all__ = ["GEMINI_BASE", "GeminiModel"]

logger = logging.getLogger(__name__)

GEMINI_BASE = "https://generativelanguage.googleapis.com/v1beta"
"""The Gemini API's endpoint root."""

DEFAULT_TIMEOUT = (10.0, 120.0)
"""(connect, read) seconds. The read timeout bounds the silence *between* chunks."""

_SCHEMA_FIELD = "responseJsonSchema"


class GeminiModel:
    """A Gemini model served by the Gemini API (or a server speaking its wire).

    Thread-safety: one instance may serve several agents in several threads at once; each
    call uses its own pooled connection, and a cancel aborts only the call it belongs to.

    Example::

        model = GeminiModel("gemini-2.5-flash", temperature=0)  # key from GEMINI_API_KEY

    Args:
        model_id: The model name (``"gemini-2.5-flash"``; ``"models/..."`` and
            ``"tunedModels/..."`` are taken as they are).
        api_key: Sent as ``x-goog-api-key``; defaults to the ``GEMINI_API_KEY`` environment
            variable, then ``GOOGLE_API_KEY``. Never logged nor shown in reprs or errors.
        base_url: Endpoint root (:data:`GEMINI_BASE`).
        session: A ``requests.Session`` to use (its adapters are replaced by abortable
            ones keeping their pool sizes); a new one per model by default.
        timeout: ``(connect, read)`` seconds, or one number for both.
        headers: Extra HTTP headers.
        **params: Sent with every call, overridden by per-call ``request.params``:
            ``generationConfig`` fields (``temperature``, ``maxOutputTokens``,
            ``thinkingConfig``, ``topP``...; ``max_tokens`` and ``stop`` are accepted as
            aliases) or top-level fields (``safetySettings``, ``cachedContent``, ``labels``).
    """

    provider = PROVIDER

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str | None = None,
        base_url: str = GEMINI_BASE,
        session: requests.Session | None = None,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        headers: dict[str, str] | None = None,
        **params: Any,
    ) -> None:
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        path = model_id if "/" in model_id else f"models/{model_id}"
        self.url = f"{self.base_url}/{path}:streamGenerateContent?alt=sse"
        self.timeout = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        self.params = dict(params)
        if api_key is None:
            api_key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        self._api_key = api_key
        self._headers = {"accept": "text/event-stream", **(headers or {})}
        self._owns_session = session is None
        self.session = session if session is not None else requests.Session()
        register_secret(self._api_key)
        register_header_secrets(self._headers)
        register_header_secrets(self.session.headers)
        self._schema_rejection = CacheRejection(logger)  # responseJsonSchema refused
        mount_abortable(self.session)
        self._no_credentials = (
            not self._api_key
            and urlsplit(self.base_url).hostname == urlsplit(GEMINI_BASE).hostname
            and not any(
                name.lower() in ("x-goog-api-key", "authorization")
                for name in (*self._headers, *self.session.headers)
            )
        )

    @property
    def endpoint(self) -> str:
        """The URL requests go to, below their path (tracing's ``server.address`` and
        ``server.port``)."""
        return self.base_url

    def __repr__(self) -> str:
        return f"GeminiModel(model_id={self.model_id!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the session (and its pooled connections) if this model created it."""
        if self._owns_session:
            self.session.close()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Send ``request`` and yield Converse stream events as chunks arrive.

        Cancel: ``cancel.cancel()`` from any thread shuts this call's socket down at once;
        the generator then raises :class:`~agent_sync.cancel.CancelledError`. Closing the
        generator early releases the connection.

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
                "no Gemini API key: set the GEMINI_API_KEY environment variable or pass "
                "api_key= (nothing was sent)",
                provider=PROVIDER,
                retryable=False,
            )
        body = self._body(request)
        cancel.raise_if_cancelled()
        started = time.monotonic()
        with abort_on_cancel(cancel) as abort, mapped_errors(cancel):
            response = self._send_adapting(body, request, abort)
            try:
                logger.info(
                    "model=<%s>, status=<%d>, headers_ms=<%d> | gemini response started",
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

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The request body. Structured output is native (``responseJsonSchema``) without
        tools; with tools (Gemini 2.x refuses JSON mode beside function calling) or after a
        server refused the field, it is asked through the forced output tool."""
        schema = None
        output = request.output
        if output is not None:
            if request.tool_specs or self._schema_rejection.rejected:
                request = with_output_tool(request)
            else:
                schema = output.schema
        return build_request_body(
            request.messages,
            system_prompt=request.system_prompt,
            tool_specs=request.tool_specs,
            tool_choice=request.tool_choice,
            params={**self.params, **request.params},
            json_schema=schema,
        )

    def _send_adapting(
        self, body: dict[str, Any], request: ModelRequest, abort: RequestAbort
    ) -> requests.Response:
        try:
            return self._send(body, abort)
        except ModelHTTPError as exc:
            sent = _SCHEMA_FIELD in body.get("generationConfig", {})
            if not (sent and exc.status == 400 and _SCHEMA_FIELD in f"{exc.message} {exc.body}"):
                raise
            self._schema_rejection.remember(
                "model=<%s> | server rejected responseJsonSchema; asking for structured "
                "output through a forced output tool instead",
                self.model_id,
            )
            return self._send(self._body(request), abort)

    def _send(self, body: dict[str, Any], abort: RequestAbort) -> requests.Response:
        headers = dict(self._headers)
        if self._api_key:
            headers["x-goog-api-key"] = self._api_key
        return post_streaming(
            self.session, self.url, body, headers, self.timeout, abort, http_error
        )

    def _json_answer(
        self, response: requests.Response, cancel: CancelScope
    ) -> Iterator[StreamEvent]:
        """A JSON answer (a proxy that dropped ``alt=sse``): one response or a list of them."""
        text = response.text
        cancel.raise_if_cancelled()
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise ModelStreamError(
                f"malformed JSON answer: {text[:200]!r}", provider=PROVIDER
            ) from exc
        chunks = payload if isinstance(payload, list) else [payload]
        translator = ResponseTranslator()
        for chunk in chunks:
            yield from self._chunk(translator, chunk)
        yield from translator.finish()

    def _events(self, response: requests.Response, cancel: CancelScope) -> Iterator[StreamEvent]:
        translator = ResponseTranslator()
        try:
            for sse in iter_sse(response.iter_content(chunk_size=None)):
                try:
                    chunk = json.loads(sse.data)
                except ValueError as exc:
                    raise ModelStreamError(
                        f"malformed data line in the stream: {sse.data[:200]!r}",
                        provider=PROVIDER,
                    ) from exc
                yield from self._chunk(translator, chunk)
        except requests.RequestException as exc:
            if not translator.finished:
                raise  # mapped by the caller's block
            logger.debug("error=<%s> | stream broke after finishReason, ignoring", exc)
        cancel.raise_if_cancelled()
        if not translator.finished:
            raise ModelStreamError(
                "the stream ended before the response was complete (no finishReason)",
                provider=PROVIDER,
                retryable=True,
            )
        yield from translator.finish()

    @staticmethod
    def _chunk(translator: ResponseTranslator, chunk: Any) -> list[StreamEvent]:
        if not isinstance(chunk, dict):
            raise ModelStreamError("stream chunk is not a JSON object", provider=PROVIDER)
        if "error" in chunk:
            raise stream_error(chunk["error"])
        return translator.add(chunk)
