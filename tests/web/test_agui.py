"""The AG-UI routes (DESIGN.md section 15) through ``agui_blueprint`` on a real threaded
server and raw sockets; every frame is validated by ``ag_ui.core``'s event models and the
protocol's order is checked (tests/web/_agui.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import flask
import pytest
from ag_ui.core import EventType

from agent_sync import Agent, tool, validate_history
from agent_sync.errors import ModelHTTPError
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import agui_blueprint
from tests.fixtures.bounds import HANG_BOUND
from tests.run._gates import Gate, gate_call

from ._agui import AGUIFrame, check_order, events_until, events_until_end, run_input
from ._client import SSEConnection, request_json, serve

DELETED: list[str] = []


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    DELETED.append(path)
    return f"deleted {path}"


@tool
def lookup(query: str) -> dict[str, Any]:
    """Look something up.

    Args:
        query: What.
    """
    return {"found": query}


@pytest.fixture(autouse=True)
def _fresh(no_runs_left: None) -> None:
    DELETED.clear()


@dataclass
class AGUIApp:
    port: int
    store: MemoryRunStore
    gate: Gate
    opened: list[SSEConnection] = field(default_factory=list)

    def run(self, body: dict[str, Any], user: str = "alice") -> SSEConnection:
        conn = SSEConnection(self.port, "/agui/", body, headers={"X-User": user})
        self.opened.append(conn)
        return conn

    def events(self, run_id: str, last: str | None = None, user: str = "alice") -> SSEConnection:
        headers = {"X-User": user}
        if last is not None:
            headers["Last-Event-ID"] = last
        conn = SSEConnection(
            self.port, f"/agui/runs/{run_id}/events", None, headers=headers, method="GET"
        )
        self.opened.append(conn)
        return conn

    def post(self, path: str, body: Any, user: str = "alice") -> tuple[int, Any]:
        return request_json(self.port, "POST", f"/agui{path}", body, headers={"X-User": user})


def _owner(request: Any, conversation_id: str) -> bool:
    """Each user's conversations start with their name."""
    return conversation_id.startswith(f"{request.headers.get('X-User', '')}-")


@contextmanager
def agui_app(*turns: Any) -> Iterator[AGUIApp]:
    store = MemoryRunStore()
    model = ScriptedModel(list(turns))
    gate = Gate()

    def make_agent(cid: str) -> Agent:
        return Agent(
            model, tools=[gate.tool, delete_file, lookup], store=store, conversation_id=cid
        )

    app = flask.Flask(__name__)
    app.register_blueprint(
        agui_blueprint(make_agent, store=store, url_prefix="/agui", keepalive=0.5, authorize=_owner)
    )
    with serve(app) as server:
        agui = AGUIApp(server.server_port, store, gate)
        try:
            yield agui
        finally:
            gate.opened.set()
            for conn in agui.opened:
                conn.drop()


def _types(frames: list[AGUIFrame]) -> list[str]:
    """The event types, a run of content events as one (chunking is the model's)."""
    types: list[str] = []
    for frame in frames:
        kind = frame.type.value
        if not (kind == "TEXT_MESSAGE_CONTENT" and types[-1:] == [kind]):
            types.append(kind)
    return types


def _text(frames: list[AGUIFrame]) -> str:
    return "".join(f.event.delta for f in frames if f.type == EventType.TEXT_MESSAGE_CONTENT)


def test_a_text_run_streams_validated_events_from_run_started_to_run_finished() -> None:
    with agui_app("Hello there") as app:
        conn = app.run(run_input("alice-1"))
        assert conn.status == 200 and conn.headers["content-type"].startswith("text/event-stream")
        frames = events_until_end(conn)
        check_order(frames)
        started, finished = frames[0].event, frames[-1].event
        assert (started.thread_id, started.protocol_version) == ("alice-1", "1.0")
        assert app.store.get(started.run_id).status == "done"  # type: ignore[union-attr]
        assert _types(frames)[1] == "TEXT_MESSAGE_START" and _text(frames) == "Hello there"
        assert (finished.type, finished.run_id, finished.outcome.type) == (
            EventType.RUN_FINISHED,
            started.run_id,
            "success",
        )
        assert len(app.store.load("alice-1").messages) == 2  # the store holds the history


def test_a_tool_run_announces_the_call_then_its_result_in_the_protocols_order() -> None:
    asks = {"text": "looking", "tool_calls": [{"name": "lookup", "input": {"query": "x"}}]}
    with agui_app(asks, "found it") as app:
        frames = events_until_end(app.run(run_input("alice-1")))
        check_order(frames)
        assert _types(frames) == [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ]
        by_type = {f.type: f.event for f in frames}
        start = by_type[EventType.TOOL_CALL_START]
        assert start.tool_call_name == "lookup"
        assert start.parent_message_id == frames[1].event.message_id  # the call's message
        assert by_type[EventType.TOOL_CALL_ARGS].delta == '{"query":"x"}'
        result = by_type[EventType.TOOL_CALL_RESULT]
        assert (result.tool_call_id, result.content) == (start.tool_call_id, '{"found":"x"}')


def test_stop_mid_stream_ends_with_a_cancelled_run_finished_and_a_valid_history() -> None:
    with agui_app({"tool_calls": [gate_call()]}, "never") as app:
        conn = app.run(run_input("alice-1"))
        seen = events_until(conn, EventType.TOOL_CALL_END)
        assert app.gate.entered.wait(HANG_BOUND)
        run_id = seen[0].event.run_id
        assert app.post(f"/runs/{run_id}/stop", {"reason": "pressed stop"}) == (
            200,
            {"cancelled": True},
        )
        rest = events_until_end(conn)
        check_order(seen + rest)
        finished = rest[-1].event
        assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "cancelled"
        assert finished.metadata["agent_sync"]["cancel_reason"] == "pressed stop"
        results = [f.event for f in rest if f.type == EventType.TOOL_CALL_RESULT]
        assert [r.tool_call_id for r in results] == [seen[-1].event.tool_call_id]
        assert validate_history(list(app.store.load("alice-1").messages)) == []


def test_a_provider_error_ends_with_run_error_and_closes_the_open_message() -> None:
    error = ModelHTTPError("invalid model id", status=400, body='{"message":"invalid"}')
    with agui_app({"text": "partial", "error": error, "error_after": 1}) as app:
        frames = events_until_end(app.run(run_input("alice-1")))
        check_order(frames)
        assert _types(frames)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
        assert "invalid model id" in frames[-1].event.message
        assert frames[-1].event.code == "ModelHTTPError"


def test_a_gated_tool_ends_with_an_interrupt_and_a_resume_goes_on_with_the_same_run() -> None:
    asks = {"text": "deleting", "tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with agui_app(asks, "deleted it") as app:
        first = events_until_end(app.run(run_input("alice-1", "delete /x")))
        check_order(first)
        run_id = first[0].event.run_id
        outcome = first[-1].event.outcome
        assert outcome.type == "interrupt" and len(outcome.interrupts) == 1
        interrupt = outcome.interrupts[0]
        call = next(f.event for f in first if f.type == EventType.TOOL_CALL_START)
        assert (interrupt.reason, interrupt.tool_call_id) == ("tool_approval", call.tool_call_id)
        assert DELETED == [] and app.store.get(run_id).status == "paused"  # type: ignore[union-attr]
        busy = app.run(run_input("alice-1", "something else"))
        assert busy.status == 409 and busy.json()["error"] == "paused"
        forged = run_input("alice-1", None, resume=[_resolved("apr_forged", True)])
        refused = app.run(forged)
        assert refused.status == 422 and refused.json()["error"] == "invalid_decision"
        resume = run_input("alice-1", None, resume=[_resolved(interrupt.id, True)])
        rest = events_until_end(app.run(resume))
        check_order(first + rest)  # one client's view: the call was announced before
        assert rest[0].type == EventType.RUN_STARTED and rest[0].event.run_id == run_id
        assert _types(rest)[1] == "TOOL_CALL_RESULT"  # the call is not announced again
        assert rest[1].event.content == "deleted /x" and _text(rest) == "deleted it"
        assert rest[-1].event.run_id == run_id and rest[-1].event.outcome.type == "success"
        assert DELETED == ["/x"]
        ids = [int(f.id.rsplit(":", 1)[1]) for f in first + rest if f.id is not None]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        assert app.run(resume).status == 409  # answered once, ran once


def test_a_cancelled_resume_entry_denies_the_call() -> None:
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with agui_app(asks, "ok, I will not") as app:
        interrupt = events_until_end(app.run(run_input("alice-1")))[-1].event.outcome.interrupts[0]
        entry = {"interruptId": interrupt.id, "status": "cancelled"}
        rest = events_until_end(app.run(run_input("alice-1", None, resume=[entry])))
        result = next(f.event for f in rest if f.type == EventType.TOOL_CALL_RESULT)
        assert result.metadata == {"agent_sync": {"status": "denied"}} and DELETED == []


def test_events_resume_after_last_event_id_byte_for_byte_then_live() -> None:
    with agui_app({"text": "looking", "tool_calls": [gate_call()]}, "found it") as app:
        first = app.run(run_input("alice-1"))
        seen = events_until(first, EventType.TOOL_CALL_END)
        assert app.gate.entered.wait(HANG_BOUND)
        run_id = seen[0].event.run_id
        first.drop()  # a reload: the run goes on (on_disconnect="continue")
        last = [f.id for f in seen if f.id is not None][-1]
        again = app.events(run_id, last=last)
        app.gate.opened.set()
        rest = events_until_end(again)
        assert rest[0].type == EventType.TOOL_CALL_RESULT  # no second RUN_STARTED, no hole
        check_order(seen + rest)
        assert _text(rest) == "found it" and rest[-1].event.outcome.type == "success"
        whole = events_until_end(app.events(run_id))  # from the start: the same bytes
        assert [f.raw for f in whole] == [f.raw for f in seen + rest]
        assert app.events(run_id, last=rest[-1].id).status == 204
        assert app.events(run_id, last="run_other:3").status == 400


def test_events_of_a_paused_run_the_client_has_whole_answer_204() -> None:
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with agui_app(asks) as app:
        first = events_until_end(app.run(run_input("alice-1")))
        run_id = first[0].event.run_id
        assert app.events(run_id, last=[f.id for f in first if f.id][-1]).status == 204
        replay = events_until_end(app.events(run_id))  # from the start: up to the interrupt
        assert [f.raw for f in replay] == [f.raw for f in first]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", "bad_request"),
        (b'{"runId": "r", "messages": []}', "bad_request"),  # no threadId
        (b'{"threadId": "../x", "runId": "r", "messages": []}', "bad_request"),
        (b'{"threadId": "alice-1", "runId": "r", "messages": []}', "bad_request"),
        (
            b'{"threadId": "alice-1", "runId": "r", "messages": '
            b'[{"id": "m", "role": "assistant", "content": "hi"}]}',
            "bad_request",
        ),
        (
            b'{"threadId": "alice-1", "runId": "r", "messages": '
            b'[{"id": "m", "role": "wizard", "content": "hi"}]}',
            "bad_request",
        ),
        (
            b'{"threadId": "alice-1", "runId": "r", "messages": [], "resume": '
            b'[{"interruptId": "apr_1", "status": "resolved", "payload": {"approved": 3}}]}',
            "bad_request",
        ),
        (
            b'{"threadId": "alice-1", "runId": "r", "messages": [], "resume": '
            b'[{"interruptId": "apr_1", "status": "resolved"}]}',
            "bad_request",
        ),
    ],
)
def test_bad_input_gets_a_4xx_json_error_and_touches_nothing(body: bytes, expected: str) -> None:
    from ._chat_sites import raw_request

    with agui_app("never") as app:
        headers = {"Content-Type": "application/json", "X-User": "alice"}
        status, answer = raw_request(app.port, "POST", "/agui/", body, headers)
        assert (status, answer["error"]) == (400, expected) and answer["message"]
        assert list(app.store.load("alice-1").messages) == []


def test_a_form_post_gets_415_and_starts_nothing() -> None:
    from ._chat_sites import raw_request

    with agui_app("never") as app:
        form = {"Content-Type": "application/x-www-form-urlencoded", "X-User": "alice"}
        status, _ = raw_request(app.port, "POST", "/agui/", b"threadId=alice-1", form)
        assert status == 415 and list(app.store.load("alice-1").messages) == []


def test_another_users_run_cannot_be_started_read_stopped_or_answered() -> None:
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with agui_app(asks, "done") as app:
        assert app.run(run_input("alice-1"), user="bob").status == 403
        first = events_until_end(app.run(run_input("alice-1")))
        run_id = first[0].event.run_id
        approval_id = first[-1].event.outcome.interrupts[0].id
        assert app.events(run_id, user="bob").status == 403
        assert app.post(f"/runs/{run_id}/stop", {}, user="bob")[0] == 403
        decisions = {"decisions": {approval_id: True}}
        assert app.post(f"/runs/{run_id}/decisions", decisions, user="bob")[0] == 403
        resume = run_input("alice-1", None, resume=[_resolved(approval_id, True)])
        assert app.run(resume, user="bob").status == 403
        assert app.store.get(run_id).status == "paused" and DELETED == []  # type: ignore[union-attr]
        assert app.post(f"/runs/{run_id}/decisions", decisions)[0] == 202  # the owner may
        replay = events_until_end(app.events(run_id))  # the interrupt, then the rest
        check_order(replay)
        assert [f.event.outcome.type for f in replay if f.type == EventType.RUN_FINISHED] == [
            "interrupt",
            "success",
        ]
        assert DELETED == ["/x"]


def _resolved(interrupt_id: str, payload: Any) -> dict[str, Any]:
    return {"interruptId": interrupt_id, "status": "resolved", "payload": payload}


def test_the_example_app_asks_before_deleting_and_goes_on_after_a_resume() -> None:
    import importlib.util

    from .conftest import EXAMPLES

    # by its path: examples/*/app.py are all "app"; another test may have imported one
    spec = importlib.util.spec_from_file_location("agui_example", EXAMPLES / "agui_chat/app.py")
    assert spec is not None and spec.loader is not None
    agui_example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agui_example)
    with serve(agui_example.create_app(MemoryRunStore())) as server:
        port = server.server_port
        opened = [SSEConnection(port, "/agui/", run_input("t1", "delete the old logs"))]
        try:
            first = events_until_end(opened[0])
            interrupt = first[-1].event.outcome.interrupts[0]
            resume = run_input("t1", None, resume=[_resolved(interrupt.id, True)])
            opened.append(SSEConnection(port, "/agui/", resume))
            rest = events_until_end(opened[1])
            check_order(first + rest)
            assert rest[0].event.run_id == first[0].event.run_id
            assert rest[-1].event.outcome.type == "success" and "Done" in _text(rest)
        finally:
            for conn in opened:
                conn.drop()
