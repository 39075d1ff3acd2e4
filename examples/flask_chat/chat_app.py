"""A small chat app: streamed answers over SSE, a Stop button, one agent per conversation.

Run it (offline, no API key needed)::

    python examples/flask_chat/chat_app.py        # http://127.0.0.1:5000

Routes:

- ``GET /``: the chat page.
- ``POST /chat`` ``{"conversation_id", "message"}``: the answer as ``text/event-stream``;
  409 while the conversation is still answering a previous message.
- ``POST /cancel`` ``{"conversation_id"}``: stop the running answer (the Stop button);
  answers ``{"cancelled": bool}``.
- ``GET /history?conversation_id=...``: the conversation's messages.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flask
from werkzeug.exceptions import HTTPException

from agent_sync import Agent
from agent_sync.models import Model
from agent_sync.web import ConversationRegistry, RegistryFullError
from agent_sync.web.flask import sse_response

# The chat page and the offline model are shared with the Django example and are not part
# of the installed package: they live in examples/chat_demo/, so put examples/ on the path.
_EXAMPLES = str(Path(__file__).resolve().parent.parent)
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)
from chat_demo import SYSTEM_PROMPT, TOOLS, chat_page, model_from_env  # noqa: E402

_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_MESSAGE_CHARS = 20_000
REGISTRY_KEY = "agent_sync.registry"


def create_app(
    model_factory: Callable[[], Model] | None = None,
    *,
    timeout: float | None = None,
    keepalive: float = 15.0,
    max_conversations: int = 1000,
) -> flask.Flask:
    """Build the app.

    Args:
        model_factory: Makes the model of a new conversation (default: from the
            environment, see ``examples/chat_demo``).
        timeout: Seconds before an answer is cancelled (default: ``CHAT_TIMEOUT`` or 120).
        keepalive: Seconds of silence before a keep-alive frame.
        max_conversations: Conversations kept in memory.

    Returns:
        The Flask app; its registry is ``app.extensions["agent_sync.registry"]``.
    """
    app = flask.Flask(__name__)
    make_model = model_factory or model_from_env
    if timeout is None:
        timeout = float(os.environ.get("CHAT_TIMEOUT", "120"))

    def make_agent(conversation_id: str) -> Agent:
        return Agent(make_model(), tools=TOOLS, system_prompt=SYSTEM_PROMPT)

    registry: ConversationRegistry[Agent] = ConversationRegistry(
        make_agent, max_conversations=max_conversations
    )
    app.extensions[REGISTRY_KEY] = registry

    def conversation_id(data: dict[str, Any]) -> str:
        cid = data.get("conversation_id")
        if not isinstance(cid, str) or not _CONVERSATION_ID.match(cid):
            flask.abort(400, "conversation_id must be 1-64 letters, digits, '-' or '_'")
        return cid

    def json_body() -> dict[str, Any]:
        data = flask.request.get_json(silent=True)
        if not isinstance(data, dict):
            flask.abort(415, "send a JSON object")
        return data

    @app.errorhandler(HTTPException)
    def json_error(exc: HTTPException) -> tuple[flask.Response, int]:
        return flask.jsonify(error=exc.name, message=exc.description), exc.code or 500

    @app.get("/")
    def index() -> str:
        return flask.Response(chat_page(), mimetype="text/html")

    @app.post("/chat")
    def chat() -> flask.Response | tuple[flask.Response, int]:
        data = json_body()
        cid = conversation_id(data)
        message = data.get("message")
        if not isinstance(message, str) or not message.strip():
            flask.abort(400, "message must be a non-empty string")
        if len(message) > _MAX_MESSAGE_CHARS:
            flask.abort(413, "message too long")
        try:
            agent = registry.get(cid)
        except RegistryFullError:
            return flask.jsonify(error="full", message="server busy, try again later"), 503
        # 409 if this conversation is still answering: never two runs on one history.
        return sse_response(agent, message, timeout=timeout, keepalive=keepalive)

    @app.post("/cancel")
    def cancel() -> flask.Response:
        cid = conversation_id(json_body())
        return flask.jsonify(cancelled=registry.cancel(cid, "stopped by user"))

    @app.get("/history")
    def history() -> flask.Response:
        cid = conversation_id(dict(flask.request.args))
        agent = registry.peek(cid)
        return flask.jsonify(messages=[] if agent is None else agent.messages)

    return app


def main() -> None:
    """Serve the app with Flask's threaded development server."""
    logging.basicConfig(level=logging.INFO)
    port = int(os.environ.get("PORT", "5000"))
    create_app().run(host="127.0.0.1", port=port, threaded=True)


if __name__ == "__main__":
    main()
