"""Views of the Django deployment example: they route to ``conversations.py``."""

from __future__ import annotations

import threading

import conversations
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.utils.module_loading import import_string
from django.views.decorators.http import require_GET, require_POST

from agent_sync.stores import RunStore

_lock = threading.Lock()
_store: RunStore | None = None


def get_store() -> RunStore:
    """The process's store, opened on first use: in the worker, after gunicorn forked it."""
    global _store
    with _lock:
        if _store is None:
            config = settings.AGENT_SYNC
            _store = conversations.store_from_url(config["STORE"], prefix=config["KEY_PREFIX"])
        return _store


def _json(reply: conversations.Reply) -> JsonResponse:
    body, status = reply
    return JsonResponse(body, status=status)


# Authenticate here (middleware or a decorator) and check the user may use `cid`.
@require_POST
def post_message(request: HttpRequest, cid: str) -> JsonResponse:
    """Answer ``{"text": "..."}``; blocks until the run is over (409 if busy)."""
    new_agent = import_string(settings.AGENT_SYNC["NEW_AGENT"])
    timeout = settings.AGENT_SYNC["TIMEOUT"]
    reply = conversations.post_message(
        get_store(), cid, request.body, new_agent=new_agent, timeout=timeout
    )
    return _json(reply)


@require_GET
def get_conversation(request: HttpRequest, cid: str) -> JsonResponse:
    """The conversation's messages and current run."""
    return _json(conversations.get_conversation(get_store(), cid))


@require_POST
def cancel(request: HttpRequest, cid: str) -> JsonResponse:
    """Stop the conversation's running answer, whichever worker runs it."""
    return _json(conversations.cancel(get_store(), cid))
