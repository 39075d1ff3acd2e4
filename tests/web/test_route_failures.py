"""What a client gets when the run or the app fails: the routes' JSON shape, through the
real Flask and Django routes (never an HTML 500, never an exception's text), and, for a
typed answer, the problems or the validated output."""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic
import pytest

from agent_sync import Agent
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel

from ._chat_sites import FRAMEWORKS, raw_request, serve_routes
from ._client import SSEConnection

SECRET = "postgres://app:hunter2@db.internal/chat"


class Trip(pydantic.BaseModel):
    city: str
    days: int


def _chat(port: int, cid: str = "c1") -> list[Any]:
    conn = SSEConnection(port, "/api/chat", {"conversation_id": cid, "message": "Plan"})
    try:
        assert conn.status == 200
        frames = []
        for frame in conn.frames():
            if frame.event != "comment":
                frames.append(frame)
                if frame.event in ("done", "error"):
                    return frames
        raise AssertionError(f"no end: {[f.event for f in frames]}")
    finally:
        conn.drop()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_make_agent_that_raises_gets_the_json_error_shape_without_its_text(
    framework: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryRunStore()

    def make_agent(cid: str) -> Agent:
        raise RuntimeError(f"cannot connect to {SECRET}")

    body = json.dumps({"conversation_id": "c1", "message": "hi"}).encode()
    with caplog.at_level(logging.ERROR, logger="agent_sync.web._routes"):
        with serve_routes(framework, make_agent, store=store) as port:
            status, answer = raw_request(
                port, "POST", "/api/chat", body, {"Content-Type": "application/json"}
            )
            again = raw_request(
                port, "POST", "/api/chat", body, {"Content-Type": "application/json"}
            )
    assert status == 500
    assert answer == {"error": "internal_error", "message": "the server could not answer"}
    assert again[0] == 500  # the slot it held was given back, nothing else changed
    assert SECRET not in json.dumps(answer)
    assert any(SECRET in (r.exc_text or "") for r in caplog.records)  # the log has it


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_answer_that_never_validates_sends_each_problem(framework: str) -> None:
    store = MemoryRunStore()
    bad = json.dumps({"city": "Oslo", "days": "many"})

    def make_agent(cid: str) -> Agent:
        model = ScriptedModel([bad], repeat=True)
        return Agent(model, store=store, conversation_id=cid, output_type=Trip)

    with serve_routes(framework, make_agent, store=store) as port:
        frames = _chat(port)
    end = frames[-1]
    assert end.event == "error"
    assert end.data["error"] == "OutputValidationError"
    assert end.data["problems"] == [
        'days: Input should be a valid integer, unable to parse string as an integer (got "many")'
    ]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_done_frame_carries_the_validated_output(framework: str) -> None:
    store = MemoryRunStore()

    def make_agent(cid: str) -> Agent:
        model = ScriptedModel(['{"city": "Oslo", "days": "3"}'])  # "3" validates to 3
        return Agent(model, store=store, conversation_id=cid, output_type=Trip)

    with serve_routes(framework, make_agent, store=store) as port:
        frames = _chat(port)
    assert frames[-1].event == "done"
    assert frames[-1].data["output"] == {"city": "Oslo", "days": 3}


def test_a_plain_answers_done_frame_sends_the_text_once() -> None:
    store = MemoryRunStore()

    def make_agent(cid: str) -> Agent:
        return Agent(ScriptedModel(["hello"]), store=store, conversation_id=cid)

    with serve_routes("flask", make_agent, store=store) as port:
        frames = _chat(port)
    assert frames[-1].data["text"] == "hello" and "output" not in frames[-1].data


def test_the_ai_sdk_error_part_lists_the_problems() -> None:
    """``useChat`` shows only ``errorText``: the problems go there."""
    from agent_sync.web._ui_stream import UIStreamEncoder

    record = {
        "type": "error",
        "error": "OutputValidationError",
        "message": "the answer did not match the required output",
        "problems": ["days: Input should be a valid integer"],
        "retryable": True,
    }
    body = UIStreamEncoder("run_1").encode(2, record).decode()
    parts = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    errors = [part["errorText"] for part in parts if part["type"] == "error"]
    assert errors == [
        "the answer did not match the required output:\n- days: Input should be a valid integer"
    ]
