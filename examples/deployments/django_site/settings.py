"""Settings of the Django deployment example: one JSON API, no database, no apps.

    cd examples/deployments
    export DJANGO_SECRET_KEY=... AGENT_SYNC_STORE=sqlite:////var/lib/chat/agent_sync.db
    gunicorn --worker-class gthread --workers 4 --threads 8 django_site.wsgi

Every worker and host must have the same settings, the secret key included.
"""

from __future__ import annotations

import os
from typing import Any

SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
INSTALLED_APPS: list[str] = []
# No CsrfViewMiddleware: this API reads no cookies. Add it with cookie-based logins.
MIDDLEWARE = ["django.middleware.security.SecurityMiddleware"]
ROOT_URLCONF = "django_site.urls"
WSGI_APPLICATION = "django_site.wsgi.application"
DATABASES: dict[str, Any] = {}
USE_TZ = True

AGENT_SYNC = {
    # memory: (one process), sqlite:////abs/path.db (one host), redis:// or rediss:// (hosts)
    "STORE": os.environ.get("AGENT_SYNC_STORE", "memory:"),
    "KEY_PREFIX": os.environ.get("AGENT_SYNC_KEY_PREFIX", "agent_sync:"),  # Redis keys
    "NEW_AGENT": "conversations.new_agent",  # (store, conversation_id) -> Agent: the model
    "TIMEOUT": float(os.environ.get("ANSWER_TIMEOUT", "120")),  # seconds per answer
}
