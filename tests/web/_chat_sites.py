"""The chat routes served by a real threaded werkzeug server, as a Flask Blueprint or as
Django URL patterns, for tests that hold every rule to both frameworks.

The Django site runs under the Django example's settings (``CsrfViewMiddleware`` on, as a
real project has it), with the routes as its URLconf.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from agent_sync import Agent
from agent_sync.stores import RunStore

from ._client import serve
from .conftest import EXAMPLES

__all__ = ["FRAMEWORKS", "raw_request", "serve_routes", "setup_django"]

FRAMEWORKS = ("flask", "django")
"""Every framework the chat routes are served by."""


@contextmanager
def serve_routes(
    framework: str, make_agent: Callable[[str], Agent], *, store: RunStore, **options: Any
) -> Iterator[int]:
    """Serve ``chat_blueprint`` or ``chat_urls`` under ``/api``; yields the port."""
    if framework == "flask":
        import flask

        from agent_sync.web.flask import chat_blueprint

        app: Any = flask.Flask(__name__)
        app.register_blueprint(
            chat_blueprint(make_agent, store=store, **options), url_prefix="/api"
        )
    elif framework == "django":
        app = _django_app(make_agent, store=store, **options)
    else:
        raise ValueError(framework)
    with serve(app) as server:
        yield server.server_port


def setup_django() -> None:
    """Set Django up once in this process, as the example's WSGI module does. Its settings
    module is named through the environment only while that module loads: a process a
    later test starts (a Celery worker, gunicorn) must not inherit a Django site it does
    not have."""
    from django.conf import settings

    if settings.configured:
        return
    sys.path.insert(0, str(EXAMPLES / "django_chat"))
    before = os.environ.get("DJANGO_SETTINGS_MODULE")
    os.environ["DJANGO_SETTINGS_MODULE"] = "chat_site.settings"
    try:
        import chat_site.wsgi  # noqa: F401 - django.setup(), as a server would load it
    finally:
        if before is None:
            del os.environ["DJANGO_SETTINGS_MODULE"]
        else:
            os.environ["DJANGO_SETTINGS_MODULE"] = before


def _django_app(make_agent: Callable[[str], Agent], *, store: RunStore, **options: Any) -> Any:
    setup_django()
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import include, path

    from agent_sync.web.django import chat_urls

    urlconf = types.ModuleType("agent_sync_test_routes")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path("api/", include(chat_urls(make_agent, store=store, **options)))
    ]

    class Handler(WSGIHandler):  # type: ignore[misc]
        """The project's middleware (CSRF on), these routes as the URLconf."""

        def get_response(self, request: Any) -> Any:
            request.urlconf = urlconf
            return super().get_response(request)

    return Handler()


def raw_request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """One request with exactly these headers (none added but Host and Content-Length);
    ``(status, parsed JSON body or text)``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        data = response.read()
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, json.loads(data)
        return response.status, data.decode(errors="replace")
    finally:
        conn.close()
