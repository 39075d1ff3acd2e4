"""Settings of the chat example: no database, one app, CSRF on.

Set ``DJANGO_SECRET_KEY`` and ``DJANGO_DEBUG=0`` for anything but local play.
"""

from __future__ import annotations

import os
import secrets

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(32)
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")

INSTALLED_APPS = ["chat"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # No GZipMiddleware: it would buffer the event stream.
]
ROOT_URLCONF = "chat_site.urls"
WSGI_APPLICATION = "chat_site.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {},
    }
]
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True

# Seconds before an answer is cancelled with reason "timeout".
CHAT_TIMEOUT = float(os.environ.get("CHAT_TIMEOUT", "120"))
# Seconds of silence before a keep-alive frame (bounds disconnect detection).
CHAT_KEEPALIVE = float(os.environ.get("CHAT_KEEPALIVE", "15"))
