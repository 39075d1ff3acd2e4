"""Partial output on the web: the ``partial_output`` SSE frame of the chat routes and of
``encode_event``, the AI SDK data part, and a log that grows linearly with the answer."""

from __future__ import annotations

import json
from typing import Any

import flask
import pydantic

from agent_sync import Agent
from agent_sync._run_log._partials import PartialThrottle
from agent_sync._run_log._records import records_of
from agent_sync.events import MessageComplete, PartialOutput, TextDelta
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web import encode_event
from agent_sync.web._ui_stream import UIStreamEncoder
from agent_sync.web.flask import chat_blueprint
from tests.web._client import SSEConnection, frames_until, serve


class Trip(pydantic.BaseModel):
    city: str
    days: int


def test_encode_event_sends_the_partial_as_its_own_frame() -> None:
    frame = encode_event(PartialOutput(partial={"city": "Os"}, run_id="run_1"))
    assert frame == b'event: partial_output\ndata: {"partial":{"city":"Os"}}\n\n'


def test_the_chat_routes_stream_partial_output_frames_and_the_answer() -> None:
    answer = json.dumps({"city": "Oslo", "days": 3})
    store = MemoryRunStore()
    model = ScriptedModel([{"text": answer, "chunk_size": 4}])

    def make_agent(cid: str) -> Agent:
        return Agent(model, store=store, conversation_id=cid, output_type=Trip)

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, authorize=lambda request, cid: True),
        url_prefix="/api",
    )
    with serve(app) as server:
        conn = SSEConnection(
            server.server_port, "/api/chat", {"conversation_id": "c1", "message": "Plan"}
        )
        try:
            frames = frames_until(conn, "done")
        finally:
            conn.drop()
    partials = [f.data["partial"] for f in frames if f.event == "partial_output"]
    assert partials[0] == {} and partials[-1] == {"city": "Oslo", "days": 3}
    assert {"city": "Oslo"} in partials
    assert json.loads(frames[-1].data["text"]) == {"city": "Oslo", "days": 3}


def test_the_ai_sdk_stream_carries_partials_as_transient_data_parts() -> None:
    encoder = UIStreamEncoder("run_1")
    body = encoder.encode(3, {"type": "partial_output", "partial": {"city": "Os"}})
    part = json.loads(body.decode().removeprefix("data: ").strip())
    assert part["data"] == {"event": "partial_output", "partial": {"city": "Os"}}
    assert part["transient"] is True


def test_a_runs_log_keeps_a_growing_answers_partials_geometrically() -> None:
    """Each partial is the whole answer so far: keeping all would make the log quadratic."""
    throttle = PartialThrottle()
    stored = 0
    kept = 0
    chunks = 4000
    for number in range(1, chunks + 1):
        event = PartialOutput(partial={"text": "x" * number}, run_id="r")
        if throttle.keep(event):
            kept += 1
            stored += len(json.dumps(records_of(event, cycle=1)))
    assert 20 < kept < 60
    assert stored < 8 * len(json.dumps({"text": "x" * chunks}))  # linear in the answer
    assert throttle.keep(TextDelta(text="x", run_id="r"))


def test_each_model_call_starts_its_own_partials() -> None:
    throttle = PartialThrottle()
    first: list[bool] = []
    for _ in range(3):
        for number in range(10):
            first.append(throttle.keep(PartialOutput(partial=number, run_id="r")))
        message: Any = {"role": "assistant", "content": [{"text": "x"}]}
        assert throttle.keep(MessageComplete(message=message, run_id="r"))
    assert first[0] and first[10] and first[20]


def test_an_emoji_escape_split_across_chunks_reaches_the_client_whole() -> None:
    """A partial holding half a surrogate pair cannot be stored: the run once ended in a
    StoreError with no answer."""
    answer = '{"city": "Os\\ud83d\\ude00lo", "days": 3}'
    store = MemoryRunStore()
    model = ScriptedModel([{"text": answer, "chunk_size": 1}])

    def make_agent(cid: str) -> Agent:
        return Agent(model, store=store, conversation_id=cid, output_type=Trip)

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, authorize=lambda request, cid: True),
        url_prefix="/api",
    )
    with serve(app) as server:
        conn = SSEConnection(
            server.server_port, "/api/chat", {"conversation_id": "c1", "message": "Plan"}
        )
        try:
            frames = frames_until(conn, "done")
        finally:
            conn.drop()
    partials = [f.data["partial"] for f in frames if f.event == "partial_output"]
    assert {"city": "Os"} in partials and {"city": "Os\U0001f600"} in partials
    assert partials[-1] == {"city": "Os\U0001f600lo", "days": 3}
    assert frames[-1].event == "done"
