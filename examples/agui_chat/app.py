"""An agent served over AG-UI (``agui_blueprint``): CopilotKit and any AG-UI client can
talk to it, stop it, and answer its approvals.

Run it (offline, no API key needed)::

    python examples/agui_chat/app.py                          # http://127.0.0.1:5000/agui/

then point an AG-UI client (``HttpAgent({url: "http://127.0.0.1:5000/agui/"})``) at it, or
try it with curl::

    curl -N -H 'Content-Type: application/json' http://127.0.0.1:5000/agui/ -d \\
      '{"threadId": "t1", "runId": "r1", "messages": [{"id": "m1", "role": "user",
        "content": "roll the dice"}]}'

"delete the old logs" asks for approval: the stream ends with ``RUN_FINISHED`` whose
outcome is an interrupt; send a ``RunAgentInput`` with ``"resume": [{"interruptId": ...,
"status": "resolved", "payload": true}]`` to go on. See docs/agui.md. Set
``AGENT_SYNC_PROVIDER`` for a real model (see examples/chat_demo).
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
from agent_sync.web.flask import agui_blueprint

# The offline model and the tools are shared with the other examples (examples/chat_demo/).
_EXAMPLES = str(Path(__file__).resolve().parent.parent)
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)
from chat_demo import SYSTEM_PROMPT, delete_file, model_from_env, roll_dice  # noqa: E402


def create_app(
    store: RunStore | None = None, *, model_factory: Callable[[], Model] | None = None
) -> flask.Flask:
    """Build the app.

    Args:
        store: Where threads, runs and their streams live (default: the SQLite file
            ``AGENT_SYNC_DB``, else ``agui_chat.db`` in the working directory).
        model_factory: Makes each request's model (default: from the environment).
    """
    if store is None:
        store = SQLiteRunStore(os.environ.get("AGENT_SYNC_DB", "agui_chat.db"))
    make_model = model_factory or model_from_env

    def make_agent(thread_id: str) -> Agent:
        return Agent(
            make_model(),
            tools=[roll_dice, delete_file],
            system_prompt=SYSTEM_PROMPT,
            store=store,
            conversation_id=thread_id,
        )

    app = flask.Flask(__name__)
    # A real app checks here that the signed-in user owns the thread.
    app.register_blueprint(
        agui_blueprint(make_agent, store=store, url_prefix="/agui", authorize=lambda r, tid: True)
    )
    return app


if __name__ == "__main__":  # one process, Flask's development server
    logging.basicConfig(level=logging.INFO)
    create_app().run(host="127.0.0.1", port=int(os.environ.get("PORT", "5000")), threaded=True)
