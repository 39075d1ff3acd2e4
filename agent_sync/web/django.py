"""Django glue: an agent's events as a ``StreamingHttpResponse`` of ``text/event-stream``.

Needs the ``django`` extra (``pip install agent_sync[django]``). Serve under WSGI with
threads (``runserver``, gunicorn ``--worker-class gthread``, uwsgi ``--threads``). Keep
``GZipMiddleware`` and other body-buffering middleware off these views. See
``docs/web.md``.
"""

from __future__ import annotations

from django.http import (  # type: ignore[import-untyped,unused-ignore]
    HttpRequest,
    JsonResponse,
    StreamingHttpResponse,
)

from ..errors import ConcurrentInvocationError
from ._disconnect import socket_from_environ
from ._sse import SSE_HEADERS, StreamingAgent, sse_events

__all__ = ["busy_response", "sse_response"]

EVENT_STREAM = "text/event-stream; charset=utf-8"


def sse_response(
    agent: StreamingAgent,
    prompt: str,
    *,
    request: HttpRequest | None = None,
    timeout: float | None = None,
    keepalive: float | None = 15.0,
) -> StreamingHttpResponse | JsonResponse:
    """Run ``agent`` on ``prompt`` and stream its events to the client as SSE.

    The agent starts at once. When the client disconnects, the WSGI server closes the
    response (Django forwards ``close()`` to the stream) and the run is cancelled
    (reason ``"client disconnected"``); the history stays valid. See
    :func:`agent_sync.web.sse_events` for the frames.

    Args:
        agent: The conversation's agent.
        prompt: The user's message.
        request: The view's request: with it, the client socket is watched when the
            server exposes it (werkzeug, gunicorn), so a disconnect is noticed at once
            even while nothing is written.
        timeout: Seconds before the run is cancelled with reason ``"timeout"``.
        keepalive: Seconds of silence before a keep-alive comment (bounds how long a
            disconnect goes unnoticed while the model is silent); ``None`` disables them.

    Returns:
        A ``StreamingHttpResponse``, or a 409 ``JsonResponse`` (``{"error": "busy",
        ...}``) if the agent is already answering a message.
    """
    try:
        client = None if request is None else socket_from_environ(request.META)
        body = sse_events(agent, prompt, timeout=timeout, keepalive=keepalive, client_socket=client)
    except ConcurrentInvocationError:
        return busy_response()
    response = StreamingHttpResponse(body, content_type=EVENT_STREAM)
    for name, value in SSE_HEADERS.items():
        response[name] = value
    return response


def busy_response() -> JsonResponse:
    """The 409 answer to a message sent while the conversation is still answering.

    Returns:
        ``{"error": "busy", "message": ...}`` with status 409.
    """
    return JsonResponse(
        {"error": "busy", "message": "this conversation is still answering; cancel it or wait"},
        status=409,
    )
