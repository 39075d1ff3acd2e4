"""A sub-agent's events on the wire: native ``subagent`` frames through the chat routes
(a real threaded server, raw sockets), and ``data-agent-sync`` parts in the AI SDK mode."""

from __future__ import annotations

from typing import Any

import flask

from agent_sync import Agent, tool
from agent_sync._run_log._records import run_record
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import chat_blueprint

from ._client import SSEConnection, frames_until, request_json, serve
from .test_ui_stream import RUN, by_type, parts_of, record


@tool
def look(path: str) -> str:
    """Look at a file (its content is the tool's output, never sent to a browser)."""
    return f"secret contents of {path}"


DEEP = {"tool_calls": [{"name": "deep", "input": {"prompt": "deeper"}}]}
RESEARCH = {"tool_calls": [{"name": "research", "input": {"prompt": "dig"}}]}
LOOK = {"tool_calls": [{"name": "look", "input": {"path": "a.txt"}}]}


def _lead(store: MemoryRunStore | None = None, cid: str | None = None) -> Agent:
    digger = Agent(ScriptedModel([LOOK, "dug"]), tools=[look])
    researcher = Agent(
        ScriptedModel([DEEP, "found"]), tools=[digger.as_tool(name="deep", description="Dig")]
    )
    return Agent(
        ScriptedModel([RESEARCH, "done"]),
        tools=[researcher.as_tool(name="research", description="Research")],
        store=store,
        conversation_id=cid,
    )


def test_native_frames_carry_subagent_events_nested_per_level() -> None:
    store = MemoryRunStore()
    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(lambda cid: _lead(store, cid), store=store, authorize=lambda r, c: True),
        url_prefix="/api",
    )
    with serve(app) as server:
        conn = SSEConnection(
            server.server_port, "/api/chat", {"conversation_id": "c1", "message": "go"}
        )
        try:
            frames = frames_until(conn, "done")
        finally:
            conn.drop()
    lead = frames[0].data["run_id"]
    assert frames[-1].data["text"] == "done"
    nested = [f.data for f in frames if f.event == "subagent"]
    assert nested and all(d["parent_run_id"] == lead for d in nested)
    (child,) = {d["run_id"] for d in nested}
    inner = [d["event"] for d in nested]
    assert {"text", "step", "done"} <= {e["type"] for e in inner}
    assert "".join(e["text"] for e in inner if e["type"] == "text") == "found"
    grand = [e for e in inner if e["type"] == "subagent"]
    assert grand and all(e["parent_run_id"] == child for e in grand)
    assert all(e["event"]["type"] != "subagent" for e in grand)  # wrapped once per level
    ends = [e["event"] for e in grand if e["event"]["type"] == "tool_end"]
    assert ends and all("output" not in end for end in ends)  # tool output is never sent
    assert "secret contents" not in repr([f.raw for f in frames])
    # the lead's own frames are unwrapped and numbered without a hole
    numbers = [int(f.id.rsplit(":", 1)[1]) for f in frames if f.id]
    assert numbers == list(range(1, len(frames) + 1))


def test_ai_sdk_mode_maps_subagent_records_to_data_parts() -> None:
    records: list[Any] = [run_record(RUN, "c1"), *record(_lead().stream("go"))]
    parts = parts_of(records)
    data = [p["data"] for p in by_type(parts, "data-agent-sync")]
    nested = [d for d in data if d["event"] == "subagent"]
    assert nested and {d["record"]["type"] for d in nested} >= {"text", "done"}
    texts = [p["delta"] for p in by_type(parts, "text-delta")]
    assert "".join(texts) == "done"  # the children's text stays in their data parts
    assert by_type(parts, "finish")[-1]["finishReason"] == "stop"


def test_a_childs_approval_is_asked_and_answered_through_the_routes() -> None:
    deleted: list[str] = []

    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file.
        """
        deleted.append(path)
        return f"deleted {path}"

    store = MemoryRunStore()
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    janitor_model = ScriptedModel([asks, "deleted it"])  # shared by every request's agents
    lead_model = ScriptedModel(
        [{"tool_calls": [{"name": "clean", "input": {"prompt": "go"}}]}, "clean"]
    )

    with serve(_janitor_app(store, lead_model, janitor_model, delete_file)) as server:
        port = server.server_port
        conn = SSEConnection(port, "/api/chat", {"conversation_id": "c1", "message": "tidy"})
        try:
            frames = frames_until(conn, "approval_required")
            lead = frames[0].data["run_id"]
            request = frames[-1].data
            assert request["run_id"] == lead and request["tool_use"]["name"] == "delete_file"
            assert deleted == [] and store.get(lead).status == "paused"  # type: ignore[union-attr]
            decision = {"decisions": {request["approval_id"]: True}}
            assert request_json(port, "POST", f"/api/runs/{lead}/decisions", decision) == (
                202,
                {"run_id": lead, "status": "running"},
            )
            rest = frames_until(conn, "done")
        finally:
            conn.drop()
    assert deleted == ["/x"] and rest[-1].data["text"] == "clean"
    inner = [f.data["event"] for f in rest if f.event == "subagent"]
    assert "".join(e["text"] for e in inner if e["type"] == "text") == "deleted it"


def test_a_denied_child_request_does_not_mark_the_leads_call_denied() -> None:
    """The child's and the lead's calls may share a ``toolUseId`` (each model numbers its
    own): a denial answers the child's call only."""
    store = MemoryRunStore()

    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file.
        """
        return f"deleted {path}"

    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}, "id": "call_1"}]}
    janitor_model = ScriptedModel([asks, "could not"])
    lead_call = {"name": "clean", "input": {"prompt": "go"}, "id": "call_1"}
    lead_model = ScriptedModel([{"tool_calls": [lead_call]}, "told"])

    with serve(_janitor_app(store, lead_model, janitor_model, delete_file)) as server:
        port = server.server_port
        conn = SSEConnection(port, "/api/chat", {"conversation_id": "c1", "message": "tidy"})
        try:
            request = frames_until(conn, "approval_required")[-1].data
            deny = {"decisions": {request["approval_id"]: {"approved": False, "reason": "no"}}}
            path = f"/api/runs/{request['run_id']}/decisions"
            assert request_json(port, "POST", path, deny)[0] == 202
            rest = frames_until(conn, "done")
        finally:
            conn.drop()
    (lead_end,) = [f.data for f in rest if f.event == "tool_end"]
    assert lead_end["id"] == "call_1" and lead_end["status"] == "success"


def _janitor_app(
    store: MemoryRunStore, lead_model: ScriptedModel, janitor_model: ScriptedModel, gated: Any
) -> flask.Flask:
    """The chat routes over a lead whose ``clean`` tool is a janitor sub-agent with the
    gated tool ``gated`` (one agent pair built per request, on ``store``)."""

    def make_agent(cid: str) -> Agent:
        janitor = Agent(janitor_model, tools=[gated])
        return Agent(
            lead_model,
            tools=[janitor.as_tool(name="clean", description="Clean up")],
            store=store,
            conversation_id=cid,
        )

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, keepalive=0.5, authorize=lambda r, c: True),
        url_prefix="/api",
    )
    return app
