"""WSGI entry point: ``gunicorn --worker-class gthread --threads 32 chat_site.wsgi``."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_site.settings")

application = get_wsgi_application()
