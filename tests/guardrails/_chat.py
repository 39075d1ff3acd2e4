"""The chat routes of a guardrail test: a Flask app over a store, and one chat's frames."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import flask

from agent_sync import Agent
from agent_sync.stores import RunStore
from agent_sync.web.flask import chat_blueprint
from tests.web._client import Frame, SSEConnection, frames_until, serve

__all__ = ["chat", "chat_server"]


@contextmanager
def chat_server(make_agent: Callable[[str], Agent], store: RunStore) -> Iterator[int]:
    """The chat routes under ``/api``, served: their port."""
    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, authorize=lambda request, cid: True),
        url_prefix="/api",
    )
    with serve(app) as server:
        yield server.server_port


def chat(port: int, conversation_id: str, message: str) -> list[Frame]:
    """POST one chat message: its SSE frames, up to ``done``."""
    body = {"conversation_id": conversation_id, "message": message}
    conn = SSEConnection(port, "/api/chat", body)
    try:
        return frames_until(conn, "done")
    finally:
        conn.drop()
