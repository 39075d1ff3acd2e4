"""Views of the chat example: the page, the SSE answer stream, cancel, history.

- ``GET /``: the chat page (sets the CSRF cookie the page sends back).
- ``POST /chat`` ``{"conversation_id", "message"}``: the answer as ``text/event-stream``;
  409 while the conversation is still answering.
- ``POST /cancel`` ``{"conversation_id"}``: stop the running answer (the Stop button).
- ``GET /history?conversation_id=...``: the conversation's messages.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_GET, require_POST

from agent_sync import Agent
from agent_sync.models import Model
from agent_sync.web import ConversationRegistry, RegistryFullError
from agent_sync.web.django import sse_response

# The chat page and the offline model are shared with the Flask example and are not part
# of the installed package: they live in examples/chat_demo/, so put examples/ on the path.
_EXAMPLES = str(Path(__file__).resolve().parents[2])
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)
from chat_demo import SYSTEM_PROMPT, TOOLS, chat_page, model_from_env  # noqa: E402

_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_MESSAGE_CHARS = 20_000
_lock = threading.Lock()
_registry: ConversationRegistry[Agent] | None = None


def configure(
    model_factory: Callable[[], Model] | None = None, *, max_conversations: int = 1000
) -> ConversationRegistry[Agent]:
    """(Re)build the process's conversation registry.

    Called on first use with the defaults; call it yourself (for example in tests) to
    choose the model.

    Args:
        model_factory: Makes the model of a new conversation (default: from the
            environment, see ``examples/chat_demo``).
        max_conversations: Conversations kept in memory.

    Returns:
        The new registry.
    """
    global _registry
    make_model = model_factory or model_from_env

    def make_agent(conversation_id: str) -> Agent:
        return Agent(make_model(), tools=TOOLS, system_prompt=SYSTEM_PROMPT)

    with _lock:
        _registry = ConversationRegistry(make_agent, max_conversations=max_conversations)
        return _registry


def get_registry() -> ConversationRegistry[Agent]:
    """The process's conversation registry, built on first use."""
    with _lock:
        registry = _registry
    return registry if registry is not None else configure()


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        data = json.loads(request.body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise _BadRequest(415, "send a JSON object")
    return data


def _conversation_id(data: dict[str, Any]) -> str:
    cid = data.get("conversation_id")
    if not isinstance(cid, str) or not _CONVERSATION_ID.match(cid):
        raise _BadRequest(400, "conversation_id must be 1-64 letters, digits, '-' or '_'")
    return cid


def _error(exc: _BadRequest) -> JsonResponse:
    return JsonResponse({"error": "bad request", "message": str(exc)}, status=exc.status)


@require_GET
@ensure_csrf_cookie
def index(request: HttpRequest) -> HttpResponse:
    """The chat page."""
    return HttpResponse(chat_page())


@require_POST
def chat(request: HttpRequest) -> HttpResponse:
    """Stream the answer to one message as SSE (409 if the conversation is busy)."""
    try:
        data = _json_body(request)
        cid = _conversation_id(data)
        message = data.get("message")
        if not isinstance(message, str) or not message.strip():
            raise _BadRequest(400, "message must be a non-empty string")
        if len(message) > _MAX_MESSAGE_CHARS:
            raise _BadRequest(413, "message too long")
    except _BadRequest as exc:
        return _error(exc)
    try:
        agent = get_registry().get(cid)
    except RegistryFullError:
        return JsonResponse({"error": "full", "message": "server busy, try later"}, status=503)
    return sse_response(
        agent,
        message,
        request=request,
        timeout=settings.CHAT_TIMEOUT,
        keepalive=settings.CHAT_KEEPALIVE,
    )


@require_POST
def cancel(request: HttpRequest) -> JsonResponse:
    """Stop the conversation's running answer (the Stop button)."""
    try:
        cid = _conversation_id(_json_body(request))
    except _BadRequest as exc:
        return _error(exc)
    return JsonResponse({"cancelled": get_registry().cancel(cid, "stopped by user")})


@require_GET
def history(request: HttpRequest) -> JsonResponse:
    """The conversation's messages (empty for an unknown conversation)."""
    try:
        cid = _conversation_id(dict(request.GET.items()))
    except _BadRequest as exc:
        return _error(exc)
    agent = get_registry().peek(cid)
    return JsonResponse({"messages": [] if agent is None else agent.messages})
