"""``POST /runs/<id>/decisions`` enforces every keyword of the tool's ``decision_schema``
(issue 22, item 10): a decision whose data breaks ``pattern`` or ``minimum`` is answered 422
naming the field, the run stays paused and the gated tool does not run; valid data goes on.
A real werkzeug server, raw sockets, MemoryRunStore."""

from __future__ import annotations

import flask

from agent_sync import Agent, ToolContext, tool
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import chat_blueprint

from ._client import SSEConnection, frames_until, request_json, serve

SIGNED: list[object] = []


@tool(
    requires_approval=True,
    decision_schema={
        "type": "object",
        "properties": {
            "ticket": {"type": "string", "pattern": "^T-[0-9]+$"},
            "seats": {"type": "integer", "minimum": 1},
        },
        "required": ["ticket"],
    },
)
def sign_off(path: str, context: ToolContext) -> str:
    """Sign a path off.

    Args:
        path: The path.
    """
    SIGNED.append(context.decision.data if context.decision else None)
    return f"signed {path}"


def test_decision_data_breaking_the_schema_is_a_422_and_the_run_stays_paused() -> None:
    SIGNED.clear()
    store = MemoryRunStore()
    asks = {"tool_calls": [{"name": "sign_off", "input": {"path": "/r"}}]}
    model = ScriptedModel([asks, "signed"])
    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(
            lambda cid: Agent(model, tools=[sign_off], store=store, conversation_id=cid),
            store=store,
            keepalive=0.5,
            authorize=lambda request, cid: True,
        ),
        url_prefix="/api",
    )
    with serve(app) as server:
        port = server.server_port
        conn = SSEConnection(port, "/api/chat", {"conversation_id": "c1", "message": "sign"})
        try:
            request = frames_until(conn, "approval_required")[-1].data
            path = f"/api/runs/{request['run_id']}/decisions"
            approval = request["approval_id"]
            bad = {"approved": True, "data": {"ticket": "T-x", "seats": 0}}
            status, body = request_json(port, "POST", path, {"decisions": {approval: bad}})
            assert status == 422 and body["error"] == "invalid_decision"
            assert any("data.ticket" in p and "does not match" in p for p in body["problems"])
            assert any("data.seats" in p and "minimum of 1" in p for p in body["problems"])
            assert store.get(request["run_id"]).status == "paused"  # type: ignore[union-attr]
            assert SIGNED == []
            good = {"approved": True, "data": {"ticket": "T-1", "seats": 2}}
            status, _ = request_json(port, "POST", path, {"decisions": {approval: good}})
            assert status == 202
            assert frames_until(conn, "done")[-1].data["text"] == "signed"
            assert SIGNED == [{"ticket": "T-1", "seats": 2}]
        finally:
            conn.drop()
