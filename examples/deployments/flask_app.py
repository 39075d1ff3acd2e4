"""The JSON chat API as a Flask app factory, for any number of workers sharing a store.

    cd examples/deployments
    export AGENT_SYNC_STORE=sqlite:////var/lib/chat/agent_sync.db
    gunicorn --worker-class gthread --workers 4 --threads 8 "flask_app:create_app()"

- ``POST /conversations/<cid>/messages`` ``{"text": "..."}``: the answer, once the run is
  over: ``{"text", "run_id", "stop_reason", "cancel_reason", "pid"}``; 409 while the
  conversation answers another message (on any worker) or waits for an approval.
- ``GET /conversations/<cid>``: ``{"messages", "run", "pid"}``.
- ``POST /conversations/<cid>/cancel``: stop its running answer, whichever worker runs it:
  ``{"cancelled": true | false, "pid"}``.
"""

from __future__ import annotations

import os

import conversations
from flask import Flask, request

from agent_sync.stores import RunStore


def create_app(
    store: RunStore | None = None, *, new_agent: conversations.NewAgent = conversations.new_agent
) -> Flask:
    """Build the app. gunicorn calls this in each worker process, after forking it.

    Args:
        store: Where conversations live (default: the ``AGENT_SYNC_STORE`` URL, else
            ``memory:``; see ``conversations.store_from_url``).
        new_agent: Builds the agent of one request: where the model is chosen.
    """
    app = Flask(__name__)
    app.config.update(
        AGENT_SYNC_STORE=os.environ.get("AGENT_SYNC_STORE", "memory:"),
        AGENT_SYNC_KEY_PREFIX=os.environ.get("AGENT_SYNC_KEY_PREFIX", "agent_sync:"),
        ANSWER_TIMEOUT=float(os.environ.get("ANSWER_TIMEOUT", "120")),  # seconds
        MAX_CONTENT_LENGTH=1_000_000,
    )
    if store is None:
        url, prefix = app.config["AGENT_SYNC_STORE"], app.config["AGENT_SYNC_KEY_PREFIX"]
        store = conversations.store_from_url(url, prefix=prefix)

    # Authenticate here (e.g. a before_request hook) and check the user may use `cid`.
    @app.post("/conversations/<cid>/messages")
    def post_message(cid: str) -> conversations.Reply:
        timeout = app.config["ANSWER_TIMEOUT"]
        body = request.get_data()
        return conversations.post_message(store, cid, body, new_agent=new_agent, timeout=timeout)

    @app.get("/conversations/<cid>")
    def get_conversation(cid: str) -> conversations.Reply:
        return conversations.get_conversation(store, cid)

    @app.post("/conversations/<cid>/cancel")
    def cancel(cid: str) -> conversations.Reply:
        return conversations.cancel(store, cid)

    return app


if __name__ == "__main__":  # one process, Flask's development server
    create_app().run(host="127.0.0.1", port=5000, threaded=True)
