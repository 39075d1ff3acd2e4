"""Flask glue: an agent's events as a streaming ``text/event-stream`` response.

Needs the ``flask`` extra (``pip install agent_sync[flask]``). Serve with threads (the
development server, gunicorn ``--worker-class gthread``, uwsgi ``--threads``): each open
stream holds one server thread plus one agent worker thread. See ``docs/web.md``.
"""

from __future__ import annotations

import flask

from ..errors import ConcurrentInvocationError
from ._disconnect import socket_from_environ
from ._sse import SSE_HEADERS, StreamingAgent, sse_events

__all__ = ["busy_response", "sse_response"]

EVENT_STREAM = "text/event-stream"


def sse_response(
    agent: StreamingAgent,
    prompt: str,
    *,
    timeout: float | None = None,
    keepalive: float | None = 15.0,
    watch_disconnect: bool = True,
) -> flask.Response:
    """Run ``agent`` on ``prompt`` and stream its events to the client as SSE.

    The agent starts at once. When the client disconnects, the server closes the
    response and the run is cancelled (reason ``"client disconnected"``); the history
    stays valid. See :func:`agent_sync.web.sse_events` for the frames.

    Args:
        agent: The conversation's agent.
        prompt: The user's message.
        timeout: Seconds before the run is cancelled with reason ``"timeout"``.
        keepalive: Seconds of silence before a keep-alive comment (bounds how long a
            disconnect goes unnoticed while the model is silent); ``None`` disables them.
        watch_disconnect: Also watch the client socket when the server exposes it
            (werkzeug, gunicorn), so a disconnect is noticed at once while nothing is
            written. Call from inside the view (it reads ``flask.request``).

    Returns:
        A streaming ``text/event-stream`` response, or a 409 JSON response
        (``{"error": "busy", ...}``) if the agent is already answering a message.
    """
    try:
        client = socket_from_environ(flask.request.environ) if watch_disconnect else None
        body = sse_events(agent, prompt, timeout=timeout, keepalive=keepalive, client_socket=client)
    except ConcurrentInvocationError:
        return busy_response()
    return flask.Response(body, mimetype=EVENT_STREAM, headers=SSE_HEADERS)


def busy_response() -> flask.Response:
    """The 409 answer to a message sent while the conversation is still answering.

    Returns:
        A JSON response: ``{"error": "busy", "message": ...}`` with status 409.
    """
    response = flask.jsonify(
        error="busy", message="this conversation is still answering; cancel it or wait"
    )
    response.status_code = 409
    return response
