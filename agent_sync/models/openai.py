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
  sent again without them;
* ``response_format`` (structured output) that the server rejects with a 400 naming it:
  remembered per model, and the request sent again asking for the output through a forced
  output tool (:mod:`~agent_sync.models._output`).

Tolerated: a ``200 application/json`` ``chat.completion`` answer to ``stream: true``
(LiteLLM's mocked responses, some proxies) is taken as the whole message.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import requests

from ..cancel import CancelScope
from ..errors import ModelHTTPError, ModelStreamError
from ..messages import StreamEvent
from ._abort.urllib3 import RequestAbort, abort_on_cancel
from ._http import drain, is_json_answer
from ._openai_errors import (
    PROVIDER,
    mapped_errors,
    rejects_cache_fields,
    stream_error,
)
from ._openai_format import CACHE_FIELDS, build_request_body
from ._openai_http import OPENAI_BASE_URL, OpenAITransport
from ._openai_stream import ChunkTranslator, completion_as_chunk
from ._output import response_format, with_output_tool
from ._sse import iter_sse
from ._wire import CacheRejection
from .base import ModelRequest

__all__ = ["OpenAIModel"]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = OPENAI_BASE_URL
DEFAULT_TIMEOUT = (10.0, 120.0)
"""(connect, read) seconds. The read timeout bounds the silence *between* chunks."""


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
            Local servers usually need none. On Azure OpenAI (a ``base_url`` host ending
            with ``.openai.azure.com`` or ``.cognitiveservices.azure.com``) it is sent as
            the ``api-key`` header and defaults to ``AZURE_OPENAI_API_KEY``. Never logged
            nor shown in reprs or errors.
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
        self._transport = OpenAITransport(
            self.url,
            base_url=self.base_url,
            api_key=api_key,
            session=session,
            timeout=self.timeout,
            headers=headers,
        )
        self.session = self._transport.session
        self._cache_rejection = CacheRejection(logger)
        self._format_rejection = CacheRejection(logger)  # response_format refused

    @property
    def endpoint(self) -> str:
        """The URL requests go to, below their path (tracing's ``server.address`` and
        ``server.port``)."""
        return self.base_url

    def __repr__(self) -> str:
        return f"OpenAIModel(model_id={self.model_id!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the session (and its pooled connections) if this model created it."""
        self._transport.close()

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
        self._transport.check_credentials()
        body = self._body(request)
        cancel.raise_if_cancelled()
        started = time.monotonic()
        with abort_on_cancel(cancel) as abort, mapped_errors(cancel):
            response = self._send_adapting(body, request, abort)
            try:
                logger.info(
                    "model=<%s>, status=<%d>, headers_ms=<%d> | openai response started",
                    self.model_id,
                    response.status_code,
                    (time.monotonic() - started) * 1000,
                )
                if is_json_answer(response):
                    yield from self._json_answer(response, cancel)
                else:
                    yield from self._events(response, cancel)
            finally:
                response.close()

    # -- internals (each runs inside the caller's mapped_errors block) --

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The request body, without what a server of this model refused before."""
        if request.output is not None and self._format_rejection.rejected:
            request = with_output_tool(request)
        body = build_request_body(
            self.model_id,
            request.messages,
            system_prompt=request.system_prompt,
            tool_specs=request.tool_specs,
            tool_choice=request.tool_choice,
            params={**self.params, **request.params},
            cache=request.cache,
            cache_key=request.cache_key,
            response_format=response_format(request.output) if request.output else None,
        )
        if self._cache_rejection.rejected:
            body = _without_cache_fields(body)
        return body

    def _send_adapting(
        self, body: dict[str, Any], request: ModelRequest, abort: RequestAbort
    ) -> requests.Response:
        """Send ``body``; a 400 naming a field some servers refuse (the prompt-cache fields,
        ``response_format``) is remembered for this model and the request sent again at
        once without it (at most once per field: each branch removes its field)."""
        while True:
            try:
                return self._send(body, abort)
            except ModelHTTPError as exc:
                sent = [name for name in CACHE_FIELDS if name in body]
                if sent and rejects_cache_fields(sent, exc):
                    self._cache_rejection.remember(
                        "model=<%s>, fields=<%s> | server rejected the prompt cache fields; "
                        "sending requests without them",
                        self.model_id,
                        ",".join(sent),
                    )
                    body = _without_cache_fields(body)
                elif "response_format" in body and rejects_cache_fields(["response_format"], exc):
                    self._format_rejection.remember(
                        "model=<%s> | server rejected response_format; asking for structured "
                        "output through a forced output tool instead",
                        self.model_id,
                    )
                    body = self._body(request)
                else:
                    raise

    def _send(self, body: dict[str, Any], abort: RequestAbort) -> requests.Response:
        return self._transport.post(body, abort)

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
                drain(response, chunks)
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


def _without_cache_fields(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name not in CACHE_FIELDS}
