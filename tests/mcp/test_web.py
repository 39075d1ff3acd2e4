"""An MCP call in the chat routes is a tool call like any other: ``tool_start``,
``tool_progress`` from the server's progress notifications, and a Stop that reaches the
server (``notifications/cancelled``) and ends the stream with a cancelled ``done``."""

from __future__ import annotations

from typing import Any

import flask

from agent_sync import Agent, validate_history
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import chat_blueprint
from tests.mcp._recording import TeeRecorder
from tests.mcp.conftest import stdio_no_grace
from tests.mcp.test_cancel import call_of, cancelled_notice
from tests.web._client import SSEConnection, frames_until, request_json, serve

SLOW_STEPS = {
    "tool_calls": [
        {"name": "trigger-long-running-operation", "input": {"duration": 600, "steps": 6000}}
    ]
}


def test_stop_in_the_chat_routes_reaches_the_mcp_server(
    everything_cmd: list[str], recorder: TeeRecorder
) -> None:
    store = MemoryRunStore()
    server = stdio_no_grace(recorder.wrap(everything_cmd), name="everything")
    model = ScriptedModel([SLOW_STEPS, "never"])

    def make_agent(cid: str) -> Agent:
        return Agent(model, tools=[server], store=store, conversation_id=cid)

    app = flask.Flask(__name__)
    app.register_blueprint(chat_blueprint(make_agent, store=store), url_prefix="/api")
    conn: Any = None
    try:
        with serve(app) as http:
            port = http.server_port
            conn = SSEConnection(port, "/api/chat", {"conversation_id": "c1", "message": "go"})
            frames = frames_until(conn, "tool_progress")  # the server reports each 0.1 s
            run_id = frames[0].data["run_id"]
            (start,) = [f for f in frames if f.event == "tool_start"]
            progress = frames[-1].data
            assert progress["id"] == start.data["id"] and progress["total"] == 6000
            request = call_of(recorder, "trigger-long-running-operation")
            assert request_json(port, "POST", f"/api/runs/{run_id}/stop") == (
                200,
                {"cancelled": True},
            )
            rest = frames_until(conn, "done")
            ends = [f for f in rest if f.event == "tool_end"]
            assert ends[-1].data["status"] == "error"
            assert rest[-1].data["stop_reason"] == "cancelled"
            cancelled_notice(recorder, request["id"])
            assert validate_history(list(store.load("c1").messages)) == []
    finally:
        if conn is not None:
            conn.drop()
        server.close()
