"""Anthropic Messages API provider, on the official ``anthropic`` SDK (streaming).

``AnthropicModel.stream`` sends one ``POST /v1/messages`` with ``stream=True`` and turns the
server-sent events into Converse stream events (see :mod:`._anthropic_stream`).

Cancellation reaches blocked I/O: the SDK client is built on an
:class:`~._abort.httpx.AbortableTransport`, and each call binds an
:class:`~._abort.httpx.AbortSlot` registered with the invocation's cancel scope, so
``cancel()`` shuts down the socket of *that* request while it connects, waits for headers
or waits for the next chunk. With a ``client=`` of your own the abort still works once the
response headers have arrived (through httpcore's ``network_stream`` extension), but not
before; build it with :func:`abortable_http_client` to get all of it.

The SDK's own retries are off (``max_retries=0``): the agent's single, cancel-aware retry
policy decides, using the ``retryable`` flag and ``retry_after`` of the errors raised here
(mapped in one place, the :func:`~._anthropic_errors.mapped_errors` block around every
call site; the default client is built in :mod:`._anthropic_http`).

Hardening (secrets, proxies, stale connections, cache markers):

* every credential the model is given or the SDK resolves (API key, auth token, secret
  headers, proxy passwords) is registered with :mod:`agent_sync._redact` at construction,
  and the SDK's and httpx2's loggers carry the redacting filter: no error surface or log
  record shows them, even when a server echoes the key back;
* the default client honours ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY`` as
  the SDK's own client does, with every proxied connection still abortable;
* a stale pooled keep-alive connection is re-sent at once by the transport
  (:mod:`._abort.httpx`); a ``200 application/json`` Message answering a stream request
  is taken as the whole answer;
* ``cache_control`` markers (``request.cache``) that a server rejects are dropped once,
  remembered per model, and the call goes on without them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Generator, Iterator, Mapping
from typing import Any

import anthropic
import httpx2

from .._redact import install_log_filter, register_secret
from ..cancel import CancelScope
from ..errors import ModelError, ModelStreamError, UsageError
from ..messages import StreamEvent
from ._abort.httpx import AbortSlot, bound, current, is_abortable
from ._anthropic_errors import PROVIDER, error_event, mapped_errors, rejects_cache
from ._anthropic_format import build_body
from ._anthropic_http import DEFAULT_TIMEOUT, abortable_http_client
from ._anthropic_stream import EventTranslator, message_events
from ._output import thinking_on, with_output_tool
from ._wire import CacheRejection, shorten
from .base import CacheMode, ModelRequest

__all__ = ["DEFAULT_TIMEOUT", "AnthropicModel", "abortable_http_client"]

logger = logging.getLogger(__name__)

_LOGGERS_TO_REDACT = (
    # The SDK logs request options (extra headers included) and its retries; httpx2 and
    # httpcore2 log URLs and connection steps. A filter only sees its own logger's records.
    "anthropic._base_client",
    "anthropic._response",
    "anthropic._tracing",
    "anthropic.lib.credentials._auth",
    "anthropic.lib.credentials._providers",
    "httpx2",
    "httpcore2.connection",
    "httpcore2.http11",
    "httpcore2.http2",
    "httpcore2.proxy",
    "httpcore2.socks",
    __name__,
    "agent_sync.models._abort.httpx",
)

_SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization", "api-key"})


class AnthropicModel:
    """A Claude model over the Anthropic Messages API (streaming).

    Thread-safe: one instance may serve many agents in many threads; each call has its own
    connection and its own abort handle. No network traffic happens at construction.

    Args:
        model_id: Model name, e.g. ``"claude-sonnet-4-5"``.
        max_tokens: Default cap on output tokens per model call.
        client: An ``anthropic.Anthropic`` to use (a copy with ``max_retries=0`` is made).
            Cancel aborts its reads after headers arrive; for a full abort build it with
            ``http_client=abortable_http_client()``.
        client_args: Arguments for ``anthropic.Anthropic(...)`` when ``client`` is not given
            (``api_key``, ``base_url``, ``timeout``, ``default_headers``...).
        **params: Request parameters sent with every call (``temperature``, ``top_p``,
            ``top_k``, ``stop_sequences``, ``thinking``, ``metadata``...; unknown ones are
            passed through in the body), plus the SDK call options ``extra_headers``,
            ``extra_query`` and ``timeout``. Converse spellings (``maxTokens``, ``topP``,
            ``stopSequences``) are accepted.

    Raises:
        agent_sync.errors.UsageError: ``client`` and ``client_args`` were both given.
    """

    def __init__(
        self,
        model_id: str,
        *,
        max_tokens: int = 4096,
        client: anthropic.Anthropic | None = None,
        client_args: Mapping[str, Any] | None = None,
        **params: Any,
    ) -> None:
        if client is not None and client_args:
            raise UsageError("pass either client or client_args to AnthropicModel, not both")
        self.model_id = model_id
        self.max_tokens = max_tokens
        self.params: dict[str, Any] = dict(params)
        self._owns_client = client is None
        if client is not None:
            self._client = client.with_options(max_retries=0)
        else:
            args = dict(client_args or {})
            args["max_retries"] = 0  # one retry policy, the agent's, which cancel can cut short
            args.setdefault("timeout", DEFAULT_TIMEOUT)
            if "http_client" not in args:
                args["http_client"] = abortable_http_client(timeout=args["timeout"])
            self._client = anthropic.Anthropic(**args)
        _register_client_secrets(self._client)
        _register_header_secrets(self.params.get("extra_headers") or {})
        self._no_credentials = not _has_credentials(
            self._client, self.params.get("extra_headers") or {}
        )
        install_log_filter(_LOGGERS_TO_REDACT)
        self._cache_rejection = CacheRejection(logger)

    @property
    def client(self) -> anthropic.Anthropic:
        """The SDK client this model calls (SDK retries disabled)."""
        return self._client

    @property
    def endpoint(self) -> str:
        """The client's base URL (tracing's ``server.address`` and ``server.port``)."""
        return str(self._client.base_url)

    def __repr__(self) -> str:
        # Never the client or its arguments: they hold the API key.
        base_url = str(self._client.base_url)
        return f"AnthropicModel(model_id={self.model_id!r}, base_url={base_url!r})"

    def close(self) -> None:
        """Close the SDK client this model created (a ``client=`` of yours stays open)."""
        if self._owns_client:
            self._client.close()

    def stream(
        self, request: ModelRequest, *, cancel: CancelScope
    ) -> Generator[StreamEvent, None, None]:
        """Send ``request`` and yield the response as Converse stream events.

        ``cancel.cancel()`` from any thread aborts the request's socket within milliseconds,
        whatever it is blocked on; the generator then raises ``CancelledError``.

        Args:
            request: The conversation, system prompt and tools.
            cancel: The invocation's cancel scope.

        Yields:
            Converse stream events, ending with ``messageStop`` and ``metadata``.

        Raises:
            agent_sync.errors.ModelError: Mapped from the SDK, see :mod:`._anthropic_errors`.
            agent_sync.cancel.CancelledError: The scope was cancelled.
        """
        if self._no_credentials:  # the SDK would fail while building the request
            raise ModelError(
                "no Anthropic API key: set the ANTHROPIC_API_KEY environment variable or "
                "pass client_args={'api_key': ...} (nothing was sent)",
                provider=PROVIDER,
                retryable=False,
            )
        cache = None if self._cache_rejection.rejected else request.cache
        body, options = self._build(request, cache)
        cancel.raise_if_cancelled()
        slot = AbortSlot()
        unregister = cancel.register_abort(slot.abort)
        response: httpx2.Response | None = None
        translator = EventTranslator()
        logger.debug(
            "model_id=<%s>, messages=<%d>, tools=<%d> | anthropic request",
            self.model_id,
            len(body["messages"]),
            len(body.get("tools", ())),
        )
        with mapped_errors(cancel):
            try:
                with bound(slot):
                    try:
                        response = self._create(body, options)
                    except anthropic.APIStatusError as exc:
                        if cache is None or not rejects_cache(exc):
                            raise
                        self._cache_rejection.remember(
                            "model_id=<%s>, status=<%d> | server rejected the cache_control "
                            "markers; sending requests without them",
                            self.model_id,
                            exc.status_code,
                        )
                        body, options = self._build(request, None)
                        response = self._create(body, options)
                network_stream = response.extensions.get("network_stream")
                if network_stream is not None and not is_abortable(network_stream):
                    # A transport we do not own: hold its socket for the whole response.
                    slot.pin(network_stream.get_extra_info("socket"))
                if _is_json(response):
                    with bound(slot):
                        text = response.read()
                    logger.debug("model_id=<%s> | JSON answer to a stream request", self.model_id)
                    for event in message_events(_json_message(text, response)):
                        yield from translator.translate(event)
                    events: Iterator[Any] = iter(())
                else:
                    # The SDK's own SSE decoder; the JSON is translated from plain dicts
                    # (see _anthropic_stream: the SDK's per-event pydantic models cost ~30%).
                    events = anthropic.Stream.raw_events(response)
                while True:
                    # Inline rather than `with bound(slot)`: this runs once per event.
                    token = current.set(slot)
                    try:
                        sse = next(events, None)
                    finally:
                        current.reset(token)
                    if sse is None:
                        break
                    if sse.event in ("ping", None) or not sse.data:
                        continue  # as the SDK: keep-alives and unnamed events carry nothing
                    if sse.event == "error":
                        raise error_event(sse.data, response)
                    yield from translator.translate(json.loads(sse.data))
                    if translator.finished:
                        slot.pin(None)  # the rest is the body's end; the socket goes back
                cancel.raise_if_cancelled()  # an abort can look like a clean end of stream
                if not translator.finished:
                    raise ModelStreamError(
                        "the Anthropic stream ended before message_stop (truncated)",
                        provider=PROVIDER,
                        retryable=True,
                    )
            finally:
                unregister()
                slot.close()
                if response is not None:
                    response.close()  # mid-body: httpcore2 closes the connection, never pools it
        logger.debug("stop_reason=<%s> | anthropic response complete", translator.stop_reason)

    def _build(
        self, request: ModelRequest, cache: CacheMode | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if request.output is not None:  # structured output: the forced output tool
            thinking = thinking_on({**self.params, **request.params})
            request = with_output_tool(request, force=not thinking)
        return build_body(
            request,
            model_id=self.model_id,
            max_tokens=self.max_tokens,
            params=self.params,
            cache=cache,
        )

    def _create(self, body: dict[str, Any], options: dict[str, Any]) -> httpx2.Response:
        """Send the request; return the streaming response once its headers are in.

        Raises the SDK's status errors (4xx/5xx) like ``messages.create`` does.
        """
        # Required fields as keywords, everything else in extra_body: the SDK's keyword
        # list changes between versions, the wire format does not.
        rest = {k: v for k, v in body.items() if k not in ("model", "max_tokens", "messages")}
        raw = self._client.messages.with_raw_response.create(
            model=body["model"],
            max_tokens=body["max_tokens"],
            messages=body["messages"],
            stream=True,
            extra_body=rest or None,
            **options,
        )
        response: httpx2.Response = raw.http_response  # (mypy does not read the SDK: Any)
        return response


def _has_credentials(client: anthropic.Anthropic, extra_headers: Mapping[str, Any]) -> bool:
    """Whether requests of ``client`` carry some credential (what the SDK checks before
    sending: an API key, an auth token, a credentials provider or profile, or an
    ``x-api-key``/``authorization`` header, even one explicitly omitted)."""
    if client.api_key or client.auth_token or getattr(client, "credentials", None) is not None:
        return True
    names = {str(name).lower() for name in (*client.default_headers, *extra_headers)}
    return bool(names & {"x-api-key", "authorization"})


def _register_client_secrets(client: anthropic.Anthropic) -> None:
    """Register every credential ``client`` carries: errors and logs redact them by value."""
    register_secret(client.api_key)
    register_secret(client.auth_token)
    register_secret(os.environ.get("ANTHROPIC_API_KEY"))
    register_secret(os.environ.get("ANTHROPIC_AUTH_TOKEN"))
    _register_header_secrets(client.default_headers)


def _register_header_secrets(headers: Mapping[str, Any]) -> None:
    for name, value in headers.items():
        if name.lower() in _SECRET_HEADERS and isinstance(value, str):
            register_secret(value)
            register_secret(value.split()[-1] if value.split() else None)  # "Bearer <token>"


def _is_json(response: httpx2.Response) -> bool:
    content_type = response.headers.get("content-type", "").lower()
    return "json" in content_type and "event-stream" not in content_type


def _json_message(text: bytes, response: httpx2.Response) -> Any:
    """The Message of a JSON answer; an error object in it raises like an ``event: error``."""
    try:
        payload: Any = json.loads(text)
    except ValueError as exc:
        raise ModelStreamError(
            f"malformed JSON answer from the Anthropic server: {shorten(text, 200)}",
            provider=PROVIDER,
            retryable=True,
        ) from exc
    if isinstance(payload, dict) and payload.get("type") == "error":
        raise error_event(text.decode("utf-8", "replace"), response)
    return payload
