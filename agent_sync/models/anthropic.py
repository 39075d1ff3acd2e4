"""Anthropic Messages API provider, on the official ``anthropic`` SDK (streaming).

``AnthropicModel.stream`` sends one ``POST /v1/messages`` with ``stream=True`` and turns the
server-sent events into Converse stream events (see :mod:`._anthropic_format`).

Cancellation reaches blocked I/O: the SDK client is built on an
:class:`~._httpx_abort.AbortableTransport`, and each call binds an
:class:`~._httpx_abort.AbortSlot` registered with the invocation's cancel scope, so
``cancel()`` shuts down the socket of *that* request while it connects, waits for headers
or waits for the next chunk. With a ``client=`` of your own the abort still works once the
response headers have arrived (through httpcore's ``network_stream`` extension), but not
before; build it with :func:`abortable_http_client` to get all of it.

The SDK's own retries are off (``max_retries=0``): the agent's single, cancel-aware retry
policy decides, using the ``retryable`` flag and ``retry_after`` of the errors raised here.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Generator, Mapping
from typing import Any

import anthropic
import httpx2

from ..cancel import CancelScope
from ..errors import (
    ContextWindowOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelThrottledError,
    UsageError,
)
from ..messages import StreamEvent
from ._anthropic_format import EventTranslator, build_body
from ._httpx_abort import AbortableTransport, AbortSlot, bound, current, is_abortable
from ._wire import retry_after_seconds, shorten
from .base import ModelRequest

__all__ = ["DEFAULT_TIMEOUT", "AnthropicModel", "abortable_http_client"]

logger = logging.getLogger(__name__)

PROVIDER = "anthropic"

DEFAULT_TIMEOUT = httpx2.Timeout(connect=10.0, read=300.0, write=60.0, pool=30.0)
"""Connect 10 s; read 300 s between two chunks (the API sends pings while it thinks)."""


def _keepalive_options() -> list[tuple[int, int, int]]:
    # As the SDK's default client: detect dead peers on long, quiet streams.
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 60), ("TCP_KEEPCNT", 5)):
        constant = getattr(socket, name, None)
        if constant is not None:
            options.append((socket.IPPROTO_TCP, constant, value))
    return options


def abortable_http_client(**kwargs: Any) -> httpx2.Client:
    """An ``httpx2.Client`` whose requests ``cancel()`` can abort at any point.

    Pass it as ``client_args={"http_client": ...}`` or to your own ``anthropic.Anthropic``
    when you need client settings ``AnthropicModel`` does not expose.

    Args:
        **kwargs: ``httpx2.Client`` arguments; ``verify``, ``proxy``, ``limits`` and
            ``socket_options`` configure the transport.

    Returns:
        A client (close it when done, or let the model own it).
    """
    transport_args = {
        key: kwargs.pop(key)
        for key in ("verify", "cert", "proxy", "limits", "socket_options", "http1", "http2")
        if key in kwargs
    }
    transport_args.setdefault("socket_options", _keepalive_options())
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
    transport_args.setdefault("limits", limits)
    kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    kwargs.setdefault("follow_redirects", True)
    return httpx2.Client(transport=AbortableTransport(**transport_args), **kwargs)


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

    @property
    def client(self) -> anthropic.Anthropic:
        """The SDK client this model calls (SDK retries disabled)."""
        return self._client

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
            agent_sync.errors.ModelError: Mapped from the SDK, see :func:`map_error`.
            agent_sync.cancel.CancelledError: The scope was cancelled.
        """
        body, options = build_body(
            request, model_id=self.model_id, max_tokens=self.max_tokens, params=self.params
        )
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
        try:
            try:
                with bound(slot):
                    response = self._create(body, options)
                network_stream = response.extensions.get("network_stream")
                if network_stream is not None and not is_abortable(network_stream):
                    # A transport we do not own: hold its socket for the whole response.
                    slot.pin(network_stream.get_extra_info("socket"))
                # The SDK's own SSE decoder; the JSON is translated from plain dicts (see
                # _anthropic_format: the SDK's per-event pydantic models cost ~30%).
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
                        raise _error_event(sse.data, response)
                    yield from translator.translate(json.loads(sse.data))
                    if translator.finished:
                        slot.pin(None)  # the rest is the body's end; the socket goes back
            except Exception as exc:
                cancel.raise_if_cancelled()  # an abort surfaces as a read error: say why
                if isinstance(exc, ModelError):
                    raise
                raise map_error(exc) from exc
            cancel.raise_if_cancelled()
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
        return raw.http_response


def _error_event(data: str, response: httpx2.Response) -> anthropic.APIStatusError:
    """An ``event: error`` in a 200 stream, as the SDK reports it (then :func:`map_error`)."""
    try:
        payload: object = json.loads(data)
    except ValueError:
        payload = data
    return anthropic.APIStatusError(f"stream error: {data[:300]}", response=response, body=payload)


def map_error(exc: BaseException) -> ModelError:
    """Map an SDK / httpx2 / stream-decoding exception to a :class:`ModelError`.

    The one place where Anthropic failures are translated. Messages are built from the
    provider's error body and status, never from request headers (no API key).

    Args:
        exc: What the SDK call or the stream iteration raised.

    Returns:
        The error to raise (``raise map_error(exc) from exc``).
    """
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc)
    if isinstance(exc, (anthropic.APITimeoutError, httpx2.TimeoutException)):
        return ModelConnectionError("timed out talking to Anthropic", provider=PROVIDER)
    if isinstance(exc, httpx2.RemoteProtocolError):
        return ModelStreamError(
            f"the Anthropic response was cut off: {shorten(exc)}",
            provider=PROVIDER,
            retryable=True,
        )
    if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
        return ModelConnectionError(
            f"connection to Anthropic failed: {shorten(exc.__cause__ or exc)}", provider=PROVIDER
        )
    if isinstance(exc, (ValueError, AttributeError, KeyError, TypeError)):
        # Malformed SSE data (JSON that does not parse or has the wrong shape).
        return ModelStreamError(
            f"malformed Anthropic stream event: {shorten(exc)}", provider=PROVIDER
        )
    return ModelError(f"Anthropic call failed: {type(exc).__name__}", provider=PROVIDER)


def _status_error(exc: anthropic.APIStatusError) -> ModelError:
    status = exc.status_code
    error_type = exc.type or ""
    detail = exc.api_message or shorten(exc.body)
    request_id = exc.request_id or "-"
    text = f"Anthropic {status} {error_type}: {detail} (request-id {request_id})"
    body = shorten(exc.body, 2000)
    retry_after = retry_after_seconds(exc.response.headers)
    if status == 200:  # an `event: error` in the middle of a 200 stream
        status = {"overloaded_error": 529, "rate_limit_error": 429}.get(error_type, status)
        if status == 200:
            retryable = error_type in ("api_error", "timeout_error")
            return ModelStreamError(
                f"Anthropic stream error {error_type}: {detail} (request-id {request_id})",
                provider=PROVIDER,
                retryable=retryable,
            )
    if status in (429, 529) or error_type in ("rate_limit_error", "overloaded_error"):
        return ModelThrottledError(
            text, status=status, body=body, retry_after=retry_after, provider=PROVIDER
        )
    if status == 400 and _is_overflow(detail):
        return ContextWindowOverflowError(text, provider=PROVIDER)
    if status in (401, 403):
        hint = "check the API key" if status == 401 else "the key lacks permission"
        return ModelHTTPError(
            f"{text}; {hint} (ANTHROPIC_API_KEY or client_args['api_key'])",
            status=status,
            body=body,
            provider=PROVIDER,
            retryable=False,
        )
    return ModelHTTPError(
        text,
        status=status,
        body=body,
        retry_after=retry_after,
        provider=PROVIDER,
        retryable=True if status >= 500 else None,  # None: the shared retryable-status list
    )


def _is_overflow(message: str) -> bool:
    lowered = message.lower()
    return (
        "prompt is too long" in lowered
        or ("context" in lowered and ("window" in lowered or "length" in lowered))
        or "too many tokens" in lowered
    )
