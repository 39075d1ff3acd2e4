"""The chat routes (DESIGN.md section 7) through ``chat_blueprint``, on a real threaded
server and raw sockets: frames with ids and no hole, replay byte for byte after a
reconnect, stop, decisions and inject by run id, and every route's refusals.

One process here (MemoryRunStore); tests/deploy runs the same routes under
``gunicorn --workers 3`` on SQLite and Redis."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import flask
import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import chat_blueprint
from tests.fixtures.bounds import HANG_BOUND
from tests.run._gates import Gate, gate_call

from ._client import Frame, SSEConnection, frames_until, request_json, serve

DELETED: list[str] = []


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    DELETED.append(path)
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _fresh(no_runs_left: None) -> None:
    DELETED.clear()


@dataclass
class ChatApp:
    port: int
    store: MemoryRunStore
    gate: Gate
    allowed: set[str]
    opened: list[SSEConnection] = field(default_factory=list)

    def chat(self, message: Any = "hi", cid: str = "c1") -> SSEConnection:
        conn = SSEConnection(self.port, "/api/chat", {"conversation_id": cid, "message": message})
        self.opened.append(conn)
        return conn

    def events(self, run_id: str, last: str | None = None) -> SSEConnection:
        headers = {} if last is None else {"Last-Event-ID": last}
        conn = SSEConnection(
            self.port, f"/api/runs/{run_id}/events", None, headers=headers, method="GET"
        )
        self.opened.append(conn)
        return conn

    def post(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        return request_json(self.port, "POST", f"/api{path}", body)

    def get(self, path: str) -> tuple[int, Any]:
        return request_json(self.port, "GET", f"/api{path}")


@contextmanager
def chat_app(*turns: Any, **options: Any) -> Iterator[ChatApp]:
    store = MemoryRunStore()
    model = ScriptedModel(list(turns))  # one script shared by every request's agent
    gate = Gate(cooperative=options.pop("cooperative", True))
    agent_options = options.pop("agent_options", {})
    allowed = {"c1", "c2"}

    def make_agent(cid: str) -> Agent:
        return Agent(
            model,
            tools=[gate.tool, delete_file],
            store=store,
            conversation_id=cid,
            **agent_options,
        )

    app = flask.Flask(__name__)
    blueprint = chat_blueprint(
        make_agent,
        store=store,
        keepalive=options.pop("keepalive", 0.5),
        authorize=lambda request, cid: cid in allowed,
        **options,
    )
    app.register_blueprint(blueprint, url_prefix="/api")
    with serve(app) as server:
        chat = ChatApp(server.server_port, store, gate, allowed)
        try:
            yield chat
        finally:
            gate.opened.set()
            for conn in chat.opened:
                conn.drop()


def _numbers(frames: list[Frame], run_id: str) -> list[int]:
    numbers = []
    for frame in frames:
        assert frame.id is not None and frame.id.startswith(f"{run_id}:")
        numbers.append(int(frame.id.rsplit(":", 1)[1]))
    return numbers


def test_a_message_streams_numbered_frames_and_ends_with_done() -> None:
    with chat_app("Hello there") as app:
        conn = app.chat()
        assert conn.status == 200 and conn.headers["content-type"].startswith("text/event-stream")
        frames = frames_until(conn, "done")
        run_id = frames[0].data["run_id"]
        assert frames[0].event == "run" and frames[0].data["conversation_id"] == "c1"
        assert _numbers(frames, run_id) == list(range(1, len(frames) + 1))
        assert "".join(f.data["text"] for f in frames if f.event == "text") == "Hello there"
        assert frames[-1].data["stop_reason"] == "end_turn"
        assert conn.next_frame() is None  # done is last
        status, history = app.get("/history?conversation_id=c1")
        assert status == 200 and len(history["messages"]) == 2
        assert app.store.get(run_id).status == "done"  # type: ignore[union-attr]


def test_a_reconnect_gets_the_missed_frames_byte_for_byte_then_the_live_ones() -> None:
    with chat_app({"text": "looking", "tool_calls": [gate_call()]}, "found it") as app:
        first = app.chat()
        seen = frames_until(first, "tool_start")
        run_id = seen[0].data["run_id"]
        first.drop()  # a reload: the run goes on (on_disconnect="continue")
        again = app.events(run_id, last=seen[1].id)
        replayed = [again.next_frame() for _ in seen[2:]]
        assert [f.raw for f in replayed if f] == [f.raw for f in seen[2:]]
        app.gate.opened.set()
        rest = frames_until(again, "done")
        numbers = _numbers(seen[:2] + replayed + rest, run_id)  # type: ignore[operator]
        assert numbers == list(range(1, len(numbers) + 1))
        assert rest[-1].data["stop_reason"] == "end_turn" and rest[-1].data["text"] == "found it"
        whole = app.events(run_id)  # from the start: the same bytes again
        assert [f.raw for f in frames_until(whole, "done")] == [
            f.raw
            for f in seen[:2] + replayed + rest  # type: ignore[operator]
        ]


def test_a_reconnect_after_the_last_frame_gets_204_and_a_foreign_id_400() -> None:
    with chat_app("short") as app:
        frames = frames_until(app.chat(), "done")
        run_id = frames[0].data["run_id"]
        assert app.events(run_id, last=frames[-1].id).status == 204
        assert app.events(run_id, last=f"run_other:{len(frames)}").status == 400
        assert app.events(run_id, last="garbage").status == 400
        tail = app.events(run_id, last=frames[-2].id)
        assert tail.next_frame() == frames[-1] and tail.next_frame() is None


def test_a_second_message_while_running_gets_409_and_changes_nothing() -> None:
    with chat_app({"tool_calls": [gate_call()]}, "done") as app:
        conn = app.chat()
        frames_until(conn, "tool_start")
        busy = app.chat("again")
        assert busy.status == 409 and busy.json()["error"] == "busy"
        app.gate.opened.set()
        frames_until(conn, "done")
        messages = list(app.store.load("c1").messages)
        assert "again" not in str(messages) and validate_history(messages) == []


def test_stop_by_run_id_ends_the_stream_with_a_cancelled_done() -> None:
    with chat_app({"tool_calls": [gate_call()]}, "never") as app:
        conn = app.chat()
        run_id = frames_until(conn, "tool_start")[0].data["run_id"]
        assert app.post(f"/runs/{run_id}/stop", {"reason": "pressed stop"}) == (
            200,
            {"cancelled": True},
        )
        rest = frames_until(conn, "done")
        done = rest[-1]
        assert (done.data["stop_reason"], done.data["cancel_reason"]) == (
            "cancelled",
            "pressed stop",
        )
        ended = [f.data for f in rest if f.event == "tool_end"]  # every started call ends
        assert [e["name"] for e in ended] == ["wait_for_gate"]
        assert app.post(f"/runs/{run_id}/stop") == (200, {"cancelled": False})  # over
        assert validate_history(list(app.store.load("c1").messages)) == []


def test_a_tool_abandoned_by_a_stop_still_gets_its_tool_end_frame() -> None:
    options = {"cooperative": False, "agent_options": {"tool_grace_period": 0.05}}
    with chat_app({"tool_calls": [gate_call()]}, "never", **options) as app:
        conn = app.chat()
        run_id = frames_until(conn, "tool_start")[0].data["run_id"]
        assert app.post(f"/runs/{run_id}/stop")[1] == {"cancelled": True}
        rest = frames_until(conn, "done")  # the tool ignores the cancel: it is abandoned
        assert [(f.event, f.data.get("status")) for f in rest][-2:] == [
            ("tool_end", "error"),
            ("done", None),
        ]


def test_the_stop_button_by_conversation() -> None:
    with chat_app({"tool_calls": [gate_call()]}, "never") as app:
        conn = app.chat()
        frames_until(conn, "tool_start")
        assert app.post("/cancel", {"conversation_id": "c1"}) == (200, {"cancelled": True})
        assert frames_until(conn, "done")[-1].data["stop_reason"] == "cancelled"
        assert app.post("/cancel", {"conversation_id": "c1"}) == (200, {"cancelled": False})


def test_an_approval_keeps_the_stream_open_and_a_decision_continues_it() -> None:
    asks = {"text": "deleting", "tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with chat_app(asks, "deleted it") as app:
        conn = app.chat()
        frames = frames_until(conn, "approval_required")
        request = frames[-1].data
        run_id = request["run_id"]
        assert request["tool_use"]["name"] == "delete_file" and DELETED == []
        assert conn.next_frame(skip_comments=False) == Frame("comment", "keep-alive")
        status, body = app.post(f"/runs/{run_id}/decisions", {"decisions": {"apr_forged": True}})
        assert status == 422 and body["error"] == "invalid_decision"
        assert app.store.get(run_id).status == "paused"  # type: ignore[union-attr]
        decision = {"decisions": {request["approval_id"]: True}}
        assert app.post(f"/runs/{run_id}/decisions", decision) == (
            202,
            {"run_id": run_id, "status": "running"},
        )
        rest = frames_until(conn, "done")
        assert [f.event for f in rest][:2] == ["tool_start", "tool_end"]
        assert rest[-1].data["text"] == "deleted it"
        assert _numbers(frames + rest, run_id) == list(range(1, len(frames) + len(rest) + 1))
        status, body = app.post(f"/runs/{run_id}/decisions", decision)
        assert status == 409 and DELETED == ["/x"]  # answered once, ran once


def test_a_denied_call_says_so_and_racing_decisions_run_the_tool_once() -> None:
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with chat_app(asks, "ok, I will not") as app:
        conn = app.chat()
        request = frames_until(conn, "approval_required")[-1].data
        path = f"/runs/{request['run_id']}/decisions"
        deny = {"decisions": {request["approval_id"]: {"approved": False, "reason": "no"}}}
        barrier = threading.Barrier(2)
        answers: list[int] = []

        def answer() -> None:
            barrier.wait(HANG_BOUND)
            answers.append(app.post(path, deny)[0])

        racers = [threading.Thread(target=answer) for _ in range(2)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(10)
        assert sorted(answers) == [202, 409]
        end = [f for f in frames_until(conn, "done") if f.event == "tool_end"]
        assert end[0].data["status"] == "denied" and DELETED == []


def test_stopping_a_paused_run_ends_its_stream() -> None:
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with chat_app(asks) as app:
        conn = app.chat()
        run_id = frames_until(conn, "approval_required")[-1].data["run_id"]
        assert app.post(f"/runs/{run_id}/stop", {"reason": "never mind"}) == (
            200,
            {"cancelled": True},
        )
        done = frames_until(conn, "done")[-1]
        assert (done.data["stop_reason"], done.data["cancel_reason"]) == (
            "cancelled",
            "never mind",
        )
        assert DELETED == [] and validate_history(list(app.store.load("c1").messages)) == []


def test_inject_goes_into_the_next_user_message() -> None:
    # The route queues the input in the store and the owner's watcher hands it to the run:
    # it lands in the user message after the tool round, or (if the watcher delivers it
    # once that message is sent) in one more model call. Either way it is answered.
    with chat_app({"tool_calls": [gate_call()]}, "noted", "noted late") as app:
        conn = app.chat()
        run_id = frames_until(conn, "tool_start")[0].data["run_id"]
        assert app.post(f"/runs/{run_id}/inject", {"content": "and hurry"}) == (
            202,
            {"run_id": run_id, "queued": True},
        )
        app.gate.opened.set()
        injected = frames_until(conn, "input_injected")[-1]
        assert injected.data == {"content": [{"text": "and hurry"}]}
        frames_until(conn, "done")
        messages = app.store.load("c1").messages
        carrying = [i for i, m in enumerate(messages) if "and hurry" in str(m)]
        assert len(carrying) == 1 and messages[carrying[0]]["role"] == "user"
        assert carrying[0] in (2, 4)  # after the tool round, or the turn that answers it
        assert messages[-1]["role"] == "assistant"
        status, body = app.post(f"/runs/{run_id}/inject", {"content": "late"})
        assert status == 409 and body["error"] == "not_running"


def test_with_on_disconnect_cancel_a_dropped_stream_cancels_its_run() -> None:
    with chat_app({"tool_calls": [gate_call()]}, "never", on_disconnect="cancel") as app:
        conn = app.chat()
        run_id = frames_until(conn, "tool_start")[0].data["run_id"]
        conn.drop()
        replay = frames_until(app.events(run_id), "done")
        assert replay[-1].data["cancel_reason"] == "client disconnected"


def test_without_it_a_dropped_stream_leaves_the_run_going() -> None:
    with chat_app({"tool_calls": [gate_call()]}, "finished anyway") as app:
        conn = app.chat()
        run_id = frames_until(conn, "tool_start")[0].data["run_id"]
        conn.drop()
        app.gate.opened.set()
        assert frames_until(app.events(run_id), "done")[-1].data["text"] == "finished anyway"


def test_every_route_asks_authorize_and_a_foreign_conversation_gets_403() -> None:
    with chat_app({"tool_calls": [gate_call()]}, "done") as app:
        conn = app.chat()
        run_id = frames_until(conn, "tool_start")[0].data["run_id"]
        app.allowed.discard("c1")  # from now on, c1 belongs to someone else
        assert app.chat(cid="c1").status == 403
        assert app.events(run_id).status == 403
        for path, body in [
            (f"/runs/{run_id}/stop", {}),
            (f"/runs/{run_id}/decisions", {"decisions": {}}),
            (f"/runs/{run_id}/inject", {"content": "x"}),
            ("/cancel", {"conversation_id": "c1"}),
        ]:
            assert app.post(path, body)[0] == 403, path
        assert app.get("/history?conversation_id=c1")[0] == 403
        assert app.store.get(run_id).status == "running"  # type: ignore[union-attr]
        assert app.store.read_events(run_id)[-1].data["type"] == "tool_start"  # untouched
        app.gate.opened.set()
        frames_until(conn, "done")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chat", b"{not json"),
        ("/chat", b"[1, 2]"),
        ("/chat", b'{"conversation_id": 5, "message": "x"}'),
        ("/chat", b'{"conversation_id": "c1"}'),
        ("/chat", b'{"conversation_id": "c1", "message": {"text": 1}}'),
        ("/chat", b'{"conversation_id": "c\\u0000", "message": "x"}'),
        ("/chat", b'{"conversation_id": "c1", "message": [{"image": "nope"}]}'),
        ("/cancel", b'{"conversation_id": ["c1"]}'),
        ("/runs/RUN/decisions", b'{"decisions": [true]}'),
        ("/runs/RUN/decisions", b'{"decisions": {"apr_1": "yes"}}'),
        ("/runs/RUN/decisions", b'{"decisions": {"apr_1": {"approved": true, "input": 3}}}'),
        ("/runs/RUN/inject", b'{"content": 42}'),
        ("/runs/RUN/stop", b'{"reason": 7}'),
    ],
)
def test_a_malformed_body_gets_400_and_touches_nothing(path: str, body: bytes) -> None:
    asks = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
    with chat_app(asks) as app:
        conn = app.chat(cid="c2")
        run_id = frames_until(conn, "approval_required")[-1].data["run_id"]
        before = app.store.read_events(run_id)
        status, answer = _raw_post(app.port, "/api" + path.replace("RUN", run_id), body)
        assert status == 400 and answer["error"] == "bad_request", answer
        assert app.store.load("c1").messages == ()
        assert app.store.get(run_id).status == "paused"  # type: ignore[union-attr]
        assert app.store.read_events(run_id) == before


@pytest.mark.parametrize(
    "body",
    [
        {"id": "c1", "messages": []},
        {"id": 7, "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]},
        {"id": "c1", "messages": [{"role": "user", "parts": "x"}]},
        {"id": "c1", "messages": [{"role": "system", "parts": []}]},
        {
            "id": "c1",
            "trigger": "regenerate-message",
            "messages": [
                {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "again"}]}
            ],
        },
    ],
)
def test_a_malformed_ai_sdk_body_gets_400_and_touches_nothing(body: dict[str, Any]) -> None:
    with chat_app("unused") as app:
        status, answer = app.post("/chat", body)
        assert status == 400 and answer["error"] == "bad_request", answer
        assert app.store.load("c1").messages == ()


def test_ai_sdk_routes_ask_authorize_and_answer_204_when_nothing_runs() -> None:
    with chat_app("unused") as app:
        assert app.get("/chat/c1/stream")[0] == 204
        assert app.post("/chat/c1/stop") == (200, {"success": True, "cancelled": False})
        assert app.get("/chat/other/stream")[0] == 403
        assert app.post("/chat/other/stop")[0] == 403
        ask = {
            "id": "other",
            "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}],
        }
        assert app.post("/chat", ask)[0] == 403


def test_an_oversized_body_a_wrong_content_type_and_an_unknown_run() -> None:
    with chat_app("hi") as app:
        huge = b'{"conversation_id": "c1", "message": "' + b"x" * (1024 * 1024) + b'"}'
        status, answer = _raw_post(app.port, "/api/chat", huge)
        assert status == 400 and "larger" in answer["message"]
        status, answer = _raw_post(
            app.port, "/api/chat", b'{"conversation_id": "c1", "message": "x"}', "text/plain"
        )
        assert status == 415 and "application/json" in answer["message"]
        assert app.store.load("c1").messages == ()
        assert app.post("/runs/run_unknown/stop")[0] == 404
        assert app.post("/runs/run_unknown/decisions", {"decisions": {}})[0] == 404
        assert app.post("/runs/run_unknown/inject", {"content": "x"})[0] == 404
        assert app.events("run_unknown").status == 404


def _raw_post(
    port: int, path: str, body: bytes, content_type: str = "application/json"
) -> tuple[int, Any]:
    import http.client
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_BOUND)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()
