"""``OpenAIResponsesModel``: the OpenAI Responses API (``POST {base_url}/responses``).

The API of OpenAI's reasoning models, where a model's reasoning items survive from one
call to the next (sent back with the history: :mod:`._responses_format`), and of Azure
OpenAI's v1 API. The answer is read from its Server-Sent Events (:mod:`._responses_stream`).

The transport is the one :class:`~agent_sync.models.OpenAIModel` uses
(:mod:`._openai_http`: ``requests`` on abortable connections, so ``cancel()`` shuts this
call's socket down while it connects, waits for headers or reads a silent stream), and so
is the error mapping (:mod:`._openai_errors`: the API's error bodies are OpenAI's).

No retries here: the agent's retry policy retries what the mapping marks ``retryable``.
Re-sent at once, inside one call: a stale pooled connection (by the abortable pool);
the prompt-cache fields and ``text.format`` when a server refuses them with a 400 naming
them (remembered per model; structured output then goes through the forced output tool).
A ``200 application/json`` answer to the stream request is taken as the whole response.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import requests

from ..cancel import CancelScope
from ..errors import ModelHTTPError, ModelStreamError
from ..messages import StreamEvent
from ._abort.urllib3 import RequestAbort, abort_on_cancel
from ._http import drain, is_json_answer
from ._openai_errors import PROVIDER, mapped_errors, rejects_cache_fields, stream_error
from ._openai_http import OPENAI_BASE_URL, OpenAITransport
from ._output import response_format, with_output_tool
from ._responses_format import CACHE_FIELDS, build_request_body
from ._responses_stream import EventTranslator, response_as_events
from ._sse import iter_sse
from ._wire import CacheRejection
from .base import ModelRequest, OutputSchema

__all__ = ["OpenAIResponsesModel"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = (10.0, 120.0)
"""(connect, read) seconds. The read timeout bounds the silence *between* events."""


def text_format(output: OutputSchema) -> dict[str, Any]:
    """The Responses API's ``text.format`` for ``output``: ``json_schema``, strict where the
    schema can be made strict (the same rule as Chat Completions' ``response_format``)."""
    spec = response_format(output)["json_schema"]
    return {"type": "json_schema", **spec}


class OpenAIResponsesModel:
    """A model served by the OpenAI Responses API (OpenAI, Azure OpenAI, compatible servers).

    Thread-safety: one instance may serve several agents in several threads at once; each
    call uses its own connection from the session's pool, and a cancel aborts only the
    call it belongs to.

    Example::

        model = OpenAIResponsesModel("gpt-5", reasoning={"effort": "low", "summary": "auto"})
        azure = OpenAIResponsesModel("my-deployment",
                                     base_url="https://NAME.openai.azure.com/openai/v1")

    Args:
        model_id: The model name (on Azure, the deployment name).
        base_url: Endpoint root; requests go to ``{base_url}/responses``.
        api_key: The key; defaults to ``OPENAI_API_KEY``. On Azure OpenAI (a host ending
            with ``.openai.azure.com`` or ``.cognitiveservices.azure.com``) it is sent as
            the ``api-key`` header and defaults to ``AZURE_OPENAI_API_KEY``. Never logged
            nor shown in reprs or errors.
        session: A ``requests.Session`` to use (its adapters are made abortable, keeping
            their pool sizes); a new one per model by default.
        timeout: ``(connect, read)`` seconds, or one number for both. ``read`` is the
            longest silence tolerated between two events.
        headers: Extra HTTP headers.
        **params: Request fields sent with every call (``max_output_tokens``,
            ``reasoning``, ``temperature``, ``store``, ``truncation``...), overridden by
            per-call ``request.params``. ``store=False`` also asks for the reasoning's
            ``encrypted_content``, so reasoning goes back to the model statelessly.
    """

    provider = PROVIDER
    provider_name = "openai"  # tracing's gen_ai.provider.name

    def __init__(
        self,
        model_id: str,
        *,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        session: requests.Session | None = None,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        headers: dict[str, str] | None = None,
        **params: Any,
    ) -> None:
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/responses"
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
        self._format_rejection = CacheRejection(logger)  # text.format refused

    @property
    def endpoint(self) -> str:
        """The URL requests go to, below their path (tracing's ``server.address`` and
        ``server.port``)."""
        return self.base_url

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel(model_id={self.model_id!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the session (and its pooled connections) if this model created it."""
        self._transport.close()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Send ``request`` and yield Converse stream events as the response's events arrive.

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
                    "model=<%s>, status=<%d>, headers_ms=<%d> | openai responses stream started",
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
            text_format=text_format(request.output) if request.output else None,
        )
        if self._cache_rejection.rejected:
            body = _without(body, CACHE_FIELDS)
        return body

    def _send_adapting(
        self, body: dict[str, Any], request: ModelRequest, abort: RequestAbort
    ) -> requests.Response:
        """Send ``body``; a 400 naming a field some servers refuse (the prompt-cache fields,
        ``text.format``) is remembered for this model and the request sent again at once
        without it (at most once per field: each branch removes its field)."""
        while True:
            try:
                return self._transport.post(body, abort)
            except ModelHTTPError as exc:
                sent = [name for name in CACHE_FIELDS if name in body]
                if sent and rejects_cache_fields(sent, exc):
                    self._cache_rejection.remember(
                        "model=<%s>, fields=<%s> | server rejected the prompt cache fields; "
                        "sending requests without them",
                        self.model_id,
                        ",".join(sent),
                    )
                    body = _without(body, CACHE_FIELDS)
                elif "text" in body and _refuses_text_format(exc):
                    self._format_rejection.remember(
                        "model=<%s> | server rejected text.format; asking for structured "
                        "output through a forced output tool instead",
                        self.model_id,
                    )
                    body = self._body(request)
                else:
                    raise

    def _json_answer(
        self, response: requests.Response, cancel: CancelScope
    ) -> Iterator[StreamEvent]:
        """A ``200 application/json`` answer to ``stream: true``: the whole response."""
        text = response.text
        cancel.raise_if_cancelled()
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise ModelStreamError(
                f"malformed JSON answer: {text[:200]!r}", provider=PROVIDER
            ) from exc
        if not isinstance(payload, dict):
            raise ModelStreamError("JSON answer is not an object", provider=PROVIDER)
        if payload.get("error") and payload.get("object") != "response":
            raise stream_error(payload["error"])
        logger.debug("model=<%s> | server answered a stream request with JSON", self.model_id)
        translator = EventTranslator()
        for event in response_as_events(payload):
            yield from translator.add(event)
        yield from translator.finish()

    def _events(self, response: requests.Response, cancel: CancelScope) -> Iterator[StreamEvent]:
        translator = EventTranslator()
        try:
            chunks = response.iter_content(chunk_size=None)
            for sse in iter_sse(chunks):
                data = sse.data
                if data == "[DONE]":  # some compatible servers end with it
                    break
                try:
                    event = json.loads(data)
                except ValueError as exc:
                    raise ModelStreamError(
                        f"malformed data line in the stream: {data[:200]!r}", provider=PROVIDER
                    ) from exc
                if type(event) is not dict:  # noqa: E721 (exact and fast)
                    raise ModelStreamError("stream event is not a JSON object", provider=PROVIDER)
                if "type" not in event and sse.event != "message":
                    event["type"] = sse.event  # the type only in the SSE event field
                yield from translator.add(event)
                if translator.finished:
                    drain(response, chunks)
                    break
        except requests.RequestException as exc:
            if not translator.finished:
                raise  # mapped by the caller's block
            logger.debug("error=<%s> | stream broke after the response completed, ignoring", exc)
        cancel.raise_if_cancelled()
        if not translator.finished:
            raise ModelStreamError(
                "the stream ended before the response was complete (no response.completed)",
                provider=PROVIDER,
                retryable=True,
            )
        yield from translator.finish()


_TEXT_FORMAT_REFUSED = re.compile(r"text\.format|'text'|argument supplied: text\b")


def _refuses_text_format(error: ModelHTTPError) -> bool:
    """Whether ``error`` is a server refusing ``text.format`` (a 400/422 naming it; "text"
    alone is too common a word to be matched bare)."""
    text = f"{error.message} {error.body or ''}"
    return error.status in (400, 422) and _TEXT_FORMAT_REFUSED.search(text) is not None


def _without(body: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name not in fields}
