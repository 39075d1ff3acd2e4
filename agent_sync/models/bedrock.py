"""Amazon Bedrock, through boto3's ``bedrock-runtime`` Converse API.

``BedrockModel`` sends the Converse-shaped history almost as is (see
:mod:`._bedrock_format`), streams ``ConverseStream`` events (decoding the event-stream body
itself, :mod:`._bedrock_stream`; boto3 still signs, resolves credentials and endpoints and
reads error answers) or replays a non-streaming ``Converse`` response as events, and maps
every failure in one :func:`~._bedrock_errors.mapped_errors` block around every call site.

Cancellation: botocore sits on urllib3, so the generic per-request socket abort of
:mod:`._abort.urllib3` applies. :func:`~._bedrock_client.make_abortable` swaps the client's
connection-pool classes for abortable subclasses; each call captures a
:class:`~._abort.urllib3.RequestAbort` registered with the invocation's cancel scope, so
``cancel()`` shuts down *that request's* socket while connecting, while waiting for headers
and while the stream is silent. Other threads sharing the client are not touched.

Secrets: botocore logs signed request headers and the canonical request (session token
included) at DEBUG, and the raw response body of errors. Constructing a model attaches the
shared :class:`~agent_sync._redact.RedactingFilter` to every botocore and urllib3 module
logger (a filter only sees records logged on its own logger, so a filter on ``botocore``
alone would miss ``botocore.auth``), and every call registers the credentials it signs
with, so no secret access key or session token reaches a record or an error.

Prompt caching: a request with ``cache`` set carries ``cachePoint`` blocks (see
:mod:`._bedrock_format`). If Bedrock (or botocore's client-side validation) rejects them,
the call is sent again at once without them, and this model never sends them again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._redact import install_log_filter
from ..cancel import CancelScope
from ..errors import ModelStreamError
from ..messages import StreamEvent
from ._abort.urllib3 import abort_on_cancel
from ._bedrock_client import (
    abort_response_on_cancel,
    close_pools,
    is_abortable_response,
    known_credentials,
    library_logger_names,
    make_abortable,
    noop,
    register_credentials,
    resolve_session,
    signing_credentials,
)
from ._bedrock_errors import PROVIDER, is_cache_rejection, mapped_errors
from ._bedrock_format import (
    build_request,
    converse_to_events,
    guard_events,
    split_params,
)
from ._bedrock_stream import normalized_events
from ._output import thinking_on, with_output_tool
from ._wire import CacheRejection
from .base import ModelRequest

__all__ = ["BedrockModel"]

logger = logging.getLogger(__name__)

_CLIENT_CREATION_LOCK = threading.Lock()


class BedrockModel:
    """A Bedrock model called through the Converse API.

    Thread-safe: one instance (and its boto3 client) may serve many agents in many threads;
    ``cancel()`` of one invocation aborts only that invocation's HTTP request.

    Example::

        model = BedrockModel("us.anthropic.claude-sonnet-4-20250514-v1:0",
                             region_name="us-west-2", max_tokens=1024)
        agent = Agent(model, tools=[get_weather])
    """

    provider = PROVIDER

    def __init__(
        self,
        model_id: str,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        boto_session: Any | None = None,
        client: Any | None = None,
        streaming: bool = True,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
        max_pool_connections: int = 50,
        **params: Any,
    ) -> None:
        """Configure the model. No network call happens here.

        Args:
            model_id: Bedrock model id or inference profile id/ARN.
            region_name: AWS region; defaults to the session's (``AWS_REGION``, profile).
            endpoint_url: Override the Bedrock runtime endpoint (VPC endpoint, local fake).
            boto_session: A ``boto3.Session`` supplying credentials and region.
            client: A ready ``bedrock-runtime`` client; the other connection arguments are
                then ignored. Its botocore retries should be off (``total_max_attempts=1``): the
                agent retries, cancel-aware.
            streaming: Use ``ConverseStream`` (default) or ``Converse``.
            connect_timeout: Seconds to establish a connection.
            read_timeout: Seconds a read may stay silent before failing.
            max_pool_connections: Connections kept per endpoint (threads sharing the model).
            **params: ``max_tokens``, ``temperature``, ``top_p``, ``stop_sequences``,
                ``additional_model_request_fields`` and other Converse request members
                (camelCase spellings work too).

        Raises:
            UsageError: Unknown parameter, or no region could be determined.
        """
        split_params(params)  # fail fast on a typo, not at the first call
        install_log_filter(library_logger_names())
        self.model_id = model_id
        self.streaming = streaming
        self.params = dict(params)
        self._client = client
        self._owns_client = client is None
        if client is not None:
            make_abortable(client)
        self._client_lock = threading.Lock()
        self._endpoint_url = endpoint_url
        self._timeouts = (connect_timeout, read_timeout)
        self._max_pool_connections = max_pool_connections
        self._session = boto_session
        self.region_name = region_name
        self._cache_rejection = CacheRejection(logger)
        if client is None:
            self._session, self.region_name = resolve_session(boto_session, region_name)
        register_credentials(known_credentials(self._session, client))

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Send ``request`` and yield Converse stream events as they arrive.

        Args:
            request: The conversation, system prompt, tools and per-call parameters.
            cancel: The invocation's cancel scope; cancelling it aborts the HTTP request.

        Yields:
            Stream events (``messageStart`` ... ``messageStop``, ``metadata``).

        Raises:
            agent_sync.errors.ModelError: The call failed (see ``retryable``).
            agent_sync.cancel.CancelledError: The scope was cancelled.
            UsageError: Unknown parameter in ``request.params``.
        """
        cache = None if self._cache_rejection.rejected else request.cache
        client = self._get_client()
        register_credentials(signing_credentials(client))
        cancel.raise_if_cancelled()
        response_stream: Any = None
        unregister_fallback: Callable[[], None] = noop
        finished = False
        started = time.monotonic()
        with abort_on_cancel(cancel) as abort, mapped_errors(cancel):
            try:
                while True:
                    body = self._build(request, cache)
                    logger.debug(
                        "model_id=<%s>, streaming=<%s>, messages=<%d>, cache=<%s> | "
                        "bedrock request",
                        self.model_id,
                        self.streaming,
                        len(body["messages"]),
                        cache,
                    )
                    try:
                        with abort.capture():
                            if self.streaming:
                                response = client.converse_stream(**body)
                            else:
                                response = client.converse(**body)
                        break
                    except Exception as exc:
                        if cache is None or cancel.cancelled or not is_cache_rejection(exc):
                            raise
                        # Nothing was generated: send the same request once more without
                        # the cache points, and never send them from this model again.
                        self._cache_rejection.remember(
                            "model_id=<%s>, error=<%s> | cachePoint rejected; "
                            "sending without prompt caching from now on",
                            self.model_id,
                            type(exc).__name__,
                        )
                        cache = None
                request_id = _request_id(response)  # gen_ai.response.id: Converse has no other
                if not self.streaming:
                    for event in guard_events(converse_to_events(response)):
                        yield _with_id(event, request_id) if "messageStop" in event else event
                    finished = True
                    return
                response_stream = response["stream"]
                if not is_abortable_response(response_stream):
                    unregister_fallback = abort_response_on_cancel(response_stream, cancel)
                saw_stop = False
                # the loop checks for cancel after every event
                for event in guard_events(normalized_events(response_stream)):
                    if "messageStop" in event:
                        saw_stop = True
                        event = _with_id(event, request_id)
                    yield event
                cancel.raise_if_cancelled()  # an abort can look like a clean end of stream
                if not saw_stop:
                    raise ModelStreamError(
                        "Bedrock stream ended before messageStop (truncated response)",
                        provider=PROVIDER,
                        retryable=True,
                    )
                finished = True
            finally:
                unregister_fallback()
                if response_stream is not None and not finished:
                    # Closing the urllib3 response also closes its connection, so a
                    # cut-short stream never goes back to the pool.
                    response_stream.close()
                logger.debug(
                    "model_id=<%s>, finished=<%s>, cancelled=<%s>, duration_ms=<%.1f> | "
                    "bedrock request done",
                    self.model_id,
                    finished,
                    cancel.cancelled,
                    (time.monotonic() - started) * 1000,
                )

    def _build(self, request: ModelRequest, cache: Any) -> dict[str, Any]:
        if request.output is not None:  # structured output: the forced output tool
            thinking = thinking_on({**self.params, **request.params})
            request = with_output_tool(request, force=not thinking)
        return build_request(
            self.model_id,
            request.messages,
            request.system_prompt,
            request.tool_specs,
            request.tool_choice,
            {**self.params, **request.params},
            cache,
        )

    def close(self) -> None:
        """Close the connection pools of a client this model created. Idempotent."""
        with self._client_lock:
            client, owned = self._client, self._owns_client
            if owned:
                self._client = None
        if client is not None and owned:
            close_pools(client)
            client.close()

    def _get_client(self) -> Any:
        # Created on first use: boto3 resolves credentials when it builds a client, and
        # that may mean a network call (instance metadata), which construction must avoid.
        with self._client_lock:
            if self._client is None:
                self._client = self._create_client()
                make_abortable(self._client)
            return self._client

    def _create_client(self) -> Any:
        from botocore.config import Config

        connect_timeout, read_timeout = self._timeouts
        config = Config(
            # One attempt in total: the agent's retry policy retries, with cancel-aware
            # back-off. (botocore's "max_attempts" counts *retries*, so max_attempts=1
            # would still retry once, sleeping in a way cancel() cannot interrupt.)
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_pool_connections=self._max_pool_connections,
            user_agent_extra="agent_sync",
        )
        assert self._session is not None
        with _CLIENT_CREATION_LOCK:  # boto3 sessions are not safe to build clients in parallel
            return self._session.client(
                "bedrock-runtime",
                region_name=self.region_name,
                endpoint_url=self._endpoint_url,
                config=config,
            )

    @property
    def endpoint(self) -> str | None:
        """The Bedrock runtime URL requests go to (tracing's ``server.address`` and
        ``server.port``): ``endpoint_url``, else a given client's, else the region's;
        ``None`` when none is known yet."""
        if self._endpoint_url:
            return self._endpoint_url
        client = self._client
        if client is not None:
            url = getattr(getattr(client, "meta", None), "endpoint_url", None)
            return url if isinstance(url, str) else None
        if self.region_name:
            return f"https://bedrock-runtime.{self.region_name}.amazonaws.com"
        return None

    def __repr__(self) -> str:
        return (
            f"BedrockModel(model_id={self.model_id!r}, region_name={self.region_name!r}, "
            f"streaming={self.streaming!r})"
        )


def _request_id(response: Any) -> str | None:
    """The request id AWS gave the response (its ``x-amzn-RequestId`` header, which botocore
    puts in ``ResponseMetadata``): Converse answers carry no id of their own, and this is
    the one AWS support asks for."""
    metadata = response.get("ResponseMetadata") if isinstance(response, dict) else None
    request_id = metadata.get("RequestId") if isinstance(metadata, dict) else None
    return request_id if isinstance(request_id, str) and request_id else None


def _with_id(event: StreamEvent, request_id: str | None) -> StreamEvent:
    """``event`` (a ``messageStop``) with ``responseId`` when the response had one."""
    if request_id is None:
        return event
    return {"messageStop": {**event["messageStop"], "responseId": request_id}}
