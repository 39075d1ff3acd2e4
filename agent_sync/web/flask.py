"""Flask glue: the chat routes as a Blueprint, and one agent's events as an SSE response.

Needs the ``flask`` extra (``pip install agent_sync[flask]``). Serve with threads (the
development server, gunicorn ``--worker-class gthread``, uwsgi ``--threads``): each open
stream holds one server thread plus one agent worker thread. See ``docs/web.md``.
"""

from __future__ import annotations

from typing import Any

from .._extras import missing_extra

try:
    import flask
except ImportError as exc:
    raise missing_extra("flask", "flask") from exc

from .._run_log._publish import REPLAY_TTL_S
from ..errors import ConcurrentInvocationError
from ..stores import RunStore
from ._disconnect import socket_from_environ
from ._http import WebRequest, WebResponse, content_type_of, read_limited
from ._routes import (
    MAX_LIVE_RUNS,
    WRITE_TIMEOUT_S,
    Authorize,
    ChatRoutes,
    MakeAgent,
    OnDisconnect,
    StartRun,
)
from ._sse import SSE_HEADERS, StreamingAgent, sse_events

__all__ = ["agui_blueprint", "busy_response", "chat_blueprint", "sse_response"]

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


def chat_blueprint(
    make_agent: MakeAgent,
    *,
    store: RunStore,
    on_disconnect: OnDisconnect = "continue",
    timeout: float | None = None,
    keepalive: float | None = 15.0,
    replay_ttl: float = REPLAY_TTL_S,
    authorize: Authorize | None = None,
    max_live_runs: int = MAX_LIVE_RUNS,
    write_timeout: float | None = WRITE_TIMEOUT_S,
    name: str = "agent_sync_chat",
    start: StartRun | None = None,
) -> flask.Blueprint:
    """The chat routes (``POST /chat``, ``GET /runs/<id>/events``, stop, decisions, inject,
    ``POST /cancel``, ``GET /history``, and the AI SDK's ``GET /chat/<id>/stream`` and
    ``POST /chat/<id>/stop``) as a Blueprint, served by any worker.

    ``app.register_blueprint(chat_blueprint(make_agent, store=store), url_prefix="/api")``.
    Every stream is published to the store's event log and followed from it, so a
    client can reconnect to any worker with ``Last-Event-ID``. A ``POST /chat`` whose body
    has a ``messages`` list (the AI SDK's ``useChat``) is answered in the UI message stream
    protocol. See ``docs/web.md``.

    Args:
        make_agent: ``conversation_id -> Agent`` on ``store`` (called per request; cheap:
            an agent reads only the log it does not hold).
        store: Where conversations, runs and their event logs live
            (``SQLiteRunStore`` for workers on one host, ``RedisRunStore`` for several).
        on_disconnect: ``"continue"``: a stream whose client leaves goes on (a reconnect
            catches up); ``"cancel"``: it is cancelled with reason ``"client
            disconnected"``. A paused run is never cancelled by a disconnect.
        timeout: Seconds before a run is cancelled with reason ``"timeout"``.
        keepalive: Seconds of silence before a keep-alive comment; ``None`` disables them.
        replay_ttl: Seconds a finished run's events are kept for reconnects.
        authorize: ``(flask.request, conversation_id) -> bool``, asked on every route (a
            run's conversation is looked up); ``False`` answers 403 and touches nothing.
            ``None`` lets every request touch every conversation: single-user apps only.
        max_live_runs: Live runs this worker holds at once (64): past it, ``POST /chat``
            (and a decision that would resume a run here) answers 503 with
            ``Retry-After`` and starts nothing. A run is live until it is over or paused,
            whether or not a client still follows it.
        write_timeout: Seconds a stream waits for a client that takes no byte (its
            socket buffers are full) before closing it (60; ``None``: for ever); a
            client that reads slowly but steadily is never cut. The client may reconnect
            with ``Last-Event-ID``. Needs a server that shows the client socket
            (werkzeug, gunicorn).
        name: The Blueprint's name (register two with different names).
        start: Hand new runs to other processes instead of running them here:
            ``start(conversation_id, message, run_id)`` is called once the run's log is
            open, and must have the run started elsewhere with that ``run_id`` (with
            Celery: ``lambda cid, message, run_id: run_task.apply_async((cid, message),
            task_id=run_id)``, see :mod:`agent_sync.celery`). ``POST /chat`` then answers
            with the stream of a run this worker does not own; if ``start`` raises, 503.

    Raises:
        agent_sync.errors.UsageError: An invalid argument.
    """
    routes = ChatRoutes(
        make_agent,
        store=store,
        on_disconnect=on_disconnect,
        timeout=timeout,
        keepalive=keepalive,
        replay_ttl=replay_ttl,
        authorize=authorize,
        max_live_runs=max_live_runs,
        write_timeout=write_timeout,
        start=start,
    )
    blueprint = flask.Blueprint(name, __name__)

    @blueprint.post("/chat")
    def chat() -> flask.Response:
        return _to_flask(routes.chat(_from_flask()))

    @blueprint.get("/runs/<run_id>/events")
    def run_events(run_id: str) -> flask.Response:
        return _to_flask(routes.run_events(_from_flask(), run_id))

    @blueprint.post("/runs/<run_id>/stop")
    def run_stop(run_id: str) -> flask.Response:
        return _to_flask(routes.run_stop(_from_flask(), run_id))

    @blueprint.post("/runs/<run_id>/decisions")
    def run_decisions(run_id: str) -> flask.Response:
        return _to_flask(routes.run_decisions(_from_flask(), run_id))

    @blueprint.post("/runs/<run_id>/inject")
    def run_inject(run_id: str) -> flask.Response:
        return _to_flask(routes.run_inject(_from_flask(), run_id))

    @blueprint.post("/cancel")
    def cancel() -> flask.Response:
        return _to_flask(routes.cancel(_from_flask()))

    @blueprint.get("/history")
    def history() -> flask.Response:
        return _to_flask(routes.history(_from_flask()))

    @blueprint.get("/chat/<conversation_id>/stream")
    def ui_resume(conversation_id: str) -> flask.Response:
        return _to_flask(routes.ui_resume(_from_flask(), conversation_id))

    @blueprint.post("/chat/<conversation_id>/stop")
    def ui_stop(conversation_id: str) -> flask.Response:
        return _to_flask(routes.ui_stop(_from_flask(), conversation_id))

    return blueprint


def agui_blueprint(
    make_agent: MakeAgent,
    *,
    store: RunStore,
    url_prefix: str | None = None,
    on_disconnect: OnDisconnect = "continue",
    timeout: float | None = None,
    keepalive: float | None = 15.0,
    replay_ttl: float = REPLAY_TTL_S,
    authorize: Authorize | None = None,
    max_live_runs: int = MAX_LIVE_RUNS,
    write_timeout: float | None = WRITE_TIMEOUT_S,
    name: str = "agent_sync_agui",
    start: StartRun | None = None,
) -> flask.Blueprint:
    """The AG-UI routes as a Blueprint: ``POST {url_prefix}/`` takes a ``RunAgentInput``
    and answers AG-UI events as SSE; ``GET .../runs/<id>/events`` (resumable with
    ``Last-Event-ID``), ``POST .../runs/<id>/stop`` and ``POST .../runs/<id>/decisions``
    are the chat routes' run control.

    ``app.register_blueprint(agui_blueprint(make_agent, store=store, url_prefix="/agui"))``.
    ``threadId`` is the conversation id and ``RUN_STARTED.runId`` the run id (the same
    after a resume); a gated tool ends the response with ``RUN_FINISHED`` whose outcome
    is an interrupt, and the next ``RunAgentInput`` with ``resume`` entries goes on with
    the same run. Needs the ``agui`` extra (``ag-ui-protocol``). See ``docs/agui.md``.

    Args:
        url_prefix: Where the routes are mounted (also settable at ``register_blueprint``).
        name: The Blueprint's name.

    The other arguments are :func:`chat_blueprint`'s (``authorize`` is asked about the
    ``threadId`` on ``POST /``).

    Raises:
        agent_sync.errors.UsageError: An invalid argument.
        ImportError: ``ag-ui-protocol`` is not installed.
    """
    from ._agui_routes import AGUIRoutes

    routes = AGUIRoutes(
        make_agent,
        store=store,
        on_disconnect=on_disconnect,
        timeout=timeout,
        keepalive=keepalive,
        replay_ttl=replay_ttl,
        authorize=authorize,
        max_live_runs=max_live_runs,
        write_timeout=write_timeout,
        start=start,
    )
    blueprint = flask.Blueprint(name, __name__, url_prefix=url_prefix)

    @blueprint.post("/")
    def agui_run() -> flask.Response:
        return _to_flask(routes.agui_run(_from_flask()))

    @blueprint.get("/runs/<run_id>/events")
    def run_events(run_id: str) -> flask.Response:
        return _to_flask(routes.run_events(_from_flask(), run_id))

    @blueprint.post("/runs/<run_id>/stop")
    def run_stop(run_id: str) -> flask.Response:
        return _to_flask(routes.run_stop(_from_flask(), run_id))

    @blueprint.post("/runs/<run_id>/decisions")
    def run_decisions(run_id: str) -> flask.Response:
        return _to_flask(routes.run_decisions(_from_flask(), run_id))

    return blueprint


def _from_flask() -> WebRequest:
    request = flask.request
    body, oversized = b"", False
    if request.method == "POST":
        body, oversized = read_limited(request.stream, request.content_length)
    last_event_id = request.headers.get("Last-Event-ID")
    return WebRequest(
        native=request._get_current_object(),  # type: ignore[attr-defined]
        method=request.method,
        body=body,
        oversized=oversized,
        content_type=content_type_of(request.headers.get("Content-Type")),
        headers={} if last_event_id is None else {"last-event-id": last_event_id},
        query={key: request.args[key] for key in request.args},
        environ=request.environ,
    )


def _to_flask(response: WebResponse) -> flask.Response:
    answer: Any = flask.Response(
        response.body,
        status=response.status,
        content_type=response.content_type,
        headers=response.headers,
    )
    return answer  # type: ignore[no-any-return]
