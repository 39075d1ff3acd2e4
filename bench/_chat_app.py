"""The app bench/bench_web_runs.py serves under gunicorn: the chat routes on the store named
by ``BENCH_STORE`` (a bench/_stores.py spec), and a plain ``sse_response`` route (no store:
nothing is written per frame) as the baseline.

Conversations by prefix: ``slow-*`` waits in a tool until cancelled; ``long-*`` streams a
long answer slowly; ``big-*`` streams ``BENCH_BIG_BYTES`` (4 MB) of text in 4 KB frames as
fast as it can; ``fast-*`` streams 1,000 text frames as fast as it can.

``BENCH_ROUTE_OPTIONS`` (JSON) is passed on to ``chat_blueprint`` (``max_live_runs``...);
``GET /bench/stats`` answers this worker's live runs (its ``agent-sync-run-N`` threads).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import threading
from typing import Any

from agent_sync import Agent, ToolContext, tool
from agent_sync.testing import ScriptedModel

_RUN_THREAD = re.compile(r"agent-sync-run-\d+")
FAST = {"text": "x" * 1000, "chunk_size": 1}


@tool
def wait_for_stop(context: ToolContext) -> str:
    """Wait until the run is cancelled."""
    return "told" if context.wait(60) else "never told"


def _turns(cid: str) -> list[Any]:
    if cid.startswith("slow-"):
        return [{"tool_calls": [{"name": "wait_for_stop", "input": {}}]}, "never"]
    if cid.startswith("big-"):
        size = int(os.environ.get("BENCH_BIG_BYTES", 4 << 20))
        return [{"text": "y" * size, "chunk_size": 4096}]
    if cid.startswith("long-"):
        return [{"text": "word " * 400, "chunk_size": 5, "chunk_delay": 0.005}]
    return [FAST]


def create_app() -> Any:
    """The Flask app (one per gunicorn worker)."""
    import flask

    from agent_sync.web.flask import chat_blueprint, sse_response
    from bench._stores import make_store

    store = make_store(os.environ["BENCH_STORE"], prefix=os.environ["BENCH_PREFIX"])
    app = flask.Flask(__name__)

    def make_agent(cid: str) -> Agent:
        return Agent(
            ScriptedModel(_turns(cid)), tools=[wait_for_stop], store=store, conversation_id=cid
        )

    known = inspect.signature(chat_blueprint).parameters  # an older tree may lack some
    options = {
        name: value
        for name, value in json.loads(os.environ.get("BENCH_ROUTE_OPTIONS") or "{}").items()
        if name in known
    }
    app.register_blueprint(chat_blueprint(make_agent, store=store, **options), url_prefix="/api")

    @app.get("/bench/stats")
    def stats() -> flask.Response:
        names = [thread.name for thread in threading.enumerate()]
        live = sum(1 for name in names if _RUN_THREAD.fullmatch(name))
        return flask.jsonify({"live_runs": live, "threads": len(names)})

    @app.post("/plain/chat")
    def plain() -> flask.Response:
        data = flask.request.get_json()
        agent = Agent(ScriptedModel(_turns(data["conversation_id"])), tools=[wait_for_stop])
        return sse_response(agent, data["message"])

    return app
