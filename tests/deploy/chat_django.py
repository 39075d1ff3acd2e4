"""The chat routes as a Django site, for tests/deploy/test_chat_workers.py's gunicorn:
settings and URLs in one module (``DJANGO_SETTINGS_MODULE=tests.deploy.chat_django``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "test only")
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS: list[str] = []
MIDDLEWARE = ["tests.deploy.chat_django.tell_pid"]
ROOT_URLCONF = "tests.deploy.chat_django"
DATABASES: dict[str, Any] = {}
USE_TZ = True


def tell_pid(get_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Middleware: every answer says which worker process gave it."""

    def middleware(request: Any) -> Any:
        response = get_response(request)
        response["X-Worker-Pid"] = str(os.getpid())
        return response

    return middleware


def _urlpatterns() -> list[Any]:
    from django.urls import include, path

    from agent_sync.web.django import chat_urls
    from tests.deploy.test_chat_workers import STORE_URL, make_agent

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "deployments"))
    import conversations

    store = conversations.store_from_url(
        os.environ[STORE_URL], prefix=os.environ.get("AGENT_SYNC_KEY_PREFIX", "agent_sync:")
    )
    routes = chat_urls(lambda cid: make_agent(store, cid), store=store, keepalive=1.0)
    return [path("api/", include(routes))]


urlpatterns = _urlpatterns() if os.environ.get("DJANGO_SETTINGS_MODULE") == __name__ else []
