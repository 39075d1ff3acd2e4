"""Django glue: the chat routes as URL patterns, and one agent's events as an SSE response.

Needs the ``django`` extra (``pip install agent_sync[django]``). Serve under WSGI with
threads (``runserver``, gunicorn ``--worker-class gthread``, uwsgi ``--threads``). Keep
``GZipMiddleware`` and other body-buffering middleware off these views. See
``docs/web.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._extras import missing_extra

try:
    from django.http import (  # type: ignore[import-untyped,unused-ignore]
        HttpRequest,
        HttpResponse,
        HttpResponseBase,
        JsonResponse,
        StreamingHttpResponse,
    )
    from django.urls import path  # type: ignore[import-untyped,unused-ignore]
    from django.views.decorators.csrf import (  # type: ignore[import-untyped,unused-ignore]
        csrf_exempt,
    )
    from django.views.decorators.http import (  # type: ignore[import-untyped,unused-ignore]
        require_GET,
        require_POST,
    )
except ImportError as exc:
    raise missing_extra("django", "django") from exc

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

__all__ = ["agui_urls", "busy_response", "chat_urls", "sse_response"]

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


def chat_urls(
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
    start: StartRun | None = None,
) -> list[Any]:
    """The chat routes as URL patterns: ``path("api/", include(chat_urls(...)))``.

    The same routes, arguments and answers as :func:`agent_sync.web.flask.chat_blueprint`
    (``authorize`` receives the ``HttpRequest``; ``max_live_runs`` and ``write_timeout``
    bound one worker's live runs and its streams' slow readers; ``start`` hands new runs to
    other processes, such as Celery workers). The views are exempt
    from Django's CSRF check: their POST bodies must be ``application/json``, which a
    cross-site form cannot send, and ``authorize`` is where a session is checked. Serve
    under WSGI with threads; keep body-buffering middleware (``GZipMiddleware``) off these
    URLs.

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

    def post(route: Callable[..., WebResponse]) -> Callable[..., HttpResponseBase]:
        exempt: Callable[..., HttpResponseBase] = csrf_exempt(require_POST(_view(route)))
        return exempt

    def get(route: Callable[..., WebResponse]) -> Callable[..., HttpResponseBase]:
        checked: Callable[..., HttpResponseBase] = require_GET(_view(route))
        return checked

    return [
        path("chat", post(routes.chat), name="agent_sync_chat"),
        path("runs/<str:run_id>/events", get(routes.run_events), name="agent_sync_run_events"),
        path("runs/<str:run_id>/stop", post(routes.run_stop), name="agent_sync_run_stop"),
        path(
            "runs/<str:run_id>/decisions",
            post(routes.run_decisions),
            name="agent_sync_run_decisions",
        ),
        path("runs/<str:run_id>/inject", post(routes.run_inject), name="agent_sync_run_inject"),
        path("cancel", post(routes.cancel), name="agent_sync_cancel"),
        path("history", get(routes.history), name="agent_sync_history"),
        path(
            "chat/<str:conversation_id>/stream",
            get(routes.ui_resume),
            name="agent_sync_ui_resume",
        ),
        path("chat/<str:conversation_id>/stop", post(routes.ui_stop), name="agent_sync_ui_stop"),
    ]


def agui_urls(
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
    start: StartRun | None = None,
) -> list[Any]:
    """The AG-UI routes as URL patterns: ``path("agui/", include(agui_urls(...)))``.

    The same routes, arguments and answers as :func:`agent_sync.web.flask.agui_blueprint`
    (``POST ""`` takes a ``RunAgentInput``; ``runs/<id>/events``, ``stop``,
    ``decisions``), exempt from Django's CSRF check for the reason :func:`chat_urls`
    gives. Needs the ``agui`` extra.

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
    return [
        path("", _post(routes.agui_run), name="agent_sync_agui_run"),
        path("runs/<str:run_id>/events", _get(routes.run_events), name="agent_sync_agui_events"),
        path("runs/<str:run_id>/stop", _post(routes.run_stop), name="agent_sync_agui_stop"),
        path(
            "runs/<str:run_id>/decisions",
            _post(routes.run_decisions),
            name="agent_sync_agui_decisions",
        ),
    ]


def _post(route: Callable[..., WebResponse]) -> Callable[..., HttpResponseBase]:
    exempt: Callable[..., HttpResponseBase] = csrf_exempt(require_POST(_view(route)))
    return exempt


def _get(route: Callable[..., WebResponse]) -> Callable[..., HttpResponseBase]:
    checked: Callable[..., HttpResponseBase] = require_GET(_view(route))
    return checked


def _view(route: Callable[..., WebResponse]) -> Callable[..., HttpResponseBase]:
    """A Django view calling ``route`` with the request and the URL's values, in order."""

    def view(request: HttpRequest, **kwargs: str) -> HttpResponseBase:
        return _to_django(route(_from_django(request), *kwargs.values()))

    return view


def _from_django(request: HttpRequest) -> WebRequest:
    body, oversized = b"", False
    if request.method == "POST":
        declared = request.META.get("CONTENT_LENGTH")
        digits = str(declared or "")
        length = int(digits) if digits.isascii() and digits.isdigit() else None
        body, oversized = read_limited(request, length)
    last_event_id = request.META.get("HTTP_LAST_EVENT_ID")
    return WebRequest(
        native=request,
        method=str(request.method),
        body=body,
        oversized=oversized,
        content_type=content_type_of(request.META.get("CONTENT_TYPE")),
        headers={} if last_event_id is None else {"last-event-id": last_event_id},
        query={key: request.GET[key] for key in request.GET},
        environ=request.META,
    )


def _to_django(response: WebResponse) -> HttpResponseBase:
    if isinstance(response.body, bytes):
        answer: HttpResponseBase = HttpResponse(
            response.body, status=response.status, content_type=response.content_type
        )
    else:
        answer = StreamingHttpResponse(
            response.body, status=response.status, content_type=response.content_type
        )
    for name, value in response.headers.items():
        answer[name] = value
    return answer
