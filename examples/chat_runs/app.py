"""The chat routes with a page: streamed answers that survive a reload, approvals with
Approve / Deny buttons, a Stop button; any number of workers sharing one SQLite file.

Run it (offline, no API key needed)::

    python examples/chat_runs/app.py                          # http://127.0.0.1:5000
    cd examples/chat_runs && AGENT_SYNC_DB=/tmp/chat_runs.db \\
        gunicorn --worker-class gthread --workers 3 --threads 8 "app:create_app()"

Try "roll the dice" (a tool call) and "delete the old logs" (a call that waits for your
decision); reload the page while an answer streams: it goes on where it was.

Routes: ``GET /`` (the page) and the chat routes under ``/api`` (``chat_blueprint``, see
docs/web.md). Set ``AGENT_SYNC_PROVIDER`` for a real model (see examples/chat_demo).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import flask

from agent_sync import Agent
from agent_sync.models import Model
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.web.flask import chat_blueprint

# The offline model and the tools are shared with the other examples and are not part of
# the installed package: they live in examples/chat_demo/, so put examples/ on the path.
_EXAMPLES = str(Path(__file__).resolve().parent.parent)
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)
from chat_demo import SYSTEM_PROMPT, delete_file, model_from_env, roll_dice  # noqa: E402

PAGE = Path(__file__).with_name("chat_runs.html")


def create_app(
    store: RunStore | None = None, *, model_factory: Callable[[], Model] | None = None
) -> flask.Flask:
    """Build the app (gunicorn calls this in each worker, after forking it).

    Args:
        store: Where conversations, runs and their streams live (default: the SQLite file
            ``AGENT_SYNC_DB``, else ``chat_runs.db`` in the working directory).
        model_factory: Makes each request's model (default: from the environment).
    """
    if store is None:
        store = SQLiteRunStore(os.environ.get("AGENT_SYNC_DB", "chat_runs.db"))
    make_model = model_factory or model_from_env

    def make_agent(conversation_id: str) -> Agent:
        return Agent(
            make_model(),
            tools=[roll_dice, delete_file],
            system_prompt=SYSTEM_PROMPT,
            store=store,
            conversation_id=conversation_id,
        )

    app = flask.Flask(__name__)
    # One browser tab, one conversation: an unguessable id made by the page. A real app
    # checks here that the signed-in user owns the conversation.
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, authorize=lambda request, cid: True),
        url_prefix="/api",
    )

    @app.get("/")
    def index() -> flask.Response:
        return flask.Response(PAGE.read_text(encoding="utf-8"), mimetype="text/html")

    return app


if __name__ == "__main__":  # one process, Flask's development server
    logging.basicConfig(level=logging.INFO)
    create_app().run(host="127.0.0.1", port=int(os.environ.get("PORT", "5000")), threaded=True)
