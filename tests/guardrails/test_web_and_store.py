"""A trip through a real store and the chat routes (DESIGN 13): the run ends ``done`` with
``stop_reason "guardrail"``, ``RunSnapshot.guardrail`` and the done record carry the trip,
the SSE stream has a ``guardrail`` frame, the AI SDK stream ends with ``finishReason:
"content-filter"``, and no byte of the tripped text reaches a frame or the store."""

from __future__ import annotations

import json

from agent_sync import Agent, validate_history
from agent_sync._run_log._records import done_record, records_of, run_record
from agent_sync.events import Done
from agent_sync.guardrails import STOPPED_TEXT, GuardrailTrip, PatternGuard
from agent_sync.stores import SQLiteRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web._ui_stream import UIStreamEncoder
from tests.guardrails._chat import chat, chat_server
from tests.web._client import request_json
from tests.web._ui_parts import DONE, parse_frames

SECRET = "sk-" + "Q1w2E3r4T5y6U7i8O9p0A"
GUARD = PatternGuard(r"sk-[A-Za-z0-9]{20,}", max_match=40, name="keys")


def test_a_trip_through_the_routes_and_a_sqlite_store(store: SQLiteRunStore) -> None:
    model = ScriptedModel([{"text": f"here {SECRET} and more", "chunk_size": 3}, "fine"])

    def make_agent(cid: str) -> Agent:
        return Agent(model, store=store, conversation_id=cid, guardrails=[GUARD])

    with chat_server(make_agent, store) as port:
        frames = chat(port, "c1", "hi")
        raw = b"".join(frame.raw for frame in frames)
        assert b"sk-" not in raw and b"more" not in raw
        trip = [f for f in frames if f.event == "guardrail"]
        assert [f.data for f in trip] == [
            {"name": "keys", "stage": "output", "reason": "matched the keys pattern"}
        ]
        done = frames[-1]
        run_id = done.data["run_id"]
        assert done.data["stop_reason"] == "guardrail" and done.data["cancel_reason"] is None
        assert done.data["guardrail"] == {
            "name": "keys", "stage": "output", "reason": "matched the keys pattern",
            "run_id": run_id,
        }  # fmt: skip
        snapshot = store.get(run_id)
        assert snapshot is not None and snapshot.status == "done"
        assert snapshot.stop_reason == "guardrail"
        assert snapshot.guardrail == GuardrailTrip.from_dict(done.data["guardrail"])
        status, history = request_json(port, "GET", "/api/history?conversation_id=c1")
        assert status == 200
        assert history["messages"][-1]["content"][-1] == {"text": STOPPED_TEXT}
        assert "sk-" not in json.dumps(history)
        assert validate_history(history["messages"]) == []
    # the stored conversation goes on
    agent = make_agent("c1")
    assert agent.invoke("again").text == "fine"
    assert "sk-" not in repr(agent.messages)


def test_the_ai_sdk_stream_ends_with_content_filter() -> None:
    agent = Agent(ScriptedModel([f"a {SECRET}"]), guardrails=[GUARD])
    records = [run_record("r", "c1")]
    for event in agent.stream("hi"):
        records.extend(
            [done_record(event)] if isinstance(event, Done) else records_of(event, cycle=1)
        )
    encoder = UIStreamEncoder("m1")
    body = encoder.opening() + b"".join(encoder.encode(i, r) for i, r in enumerate(records, 1))
    parts = [p for p in parse_frames(body + encoder.closing()) if p != DONE]
    assert parts[-1] == {"type": "finish", "finishReason": "content-filter"}
    assert b"sk-" not in body


def test_an_input_trip_leaves_the_stored_conversation_as_it_was(store: SQLiteRunStore) -> None:
    model = ScriptedModel(["first", "second"])
    guard = PatternGuard(r"\d{3}-\d{2}-\d{4}", stage="input", name="ssn")

    def make_agent() -> Agent:
        return Agent(model, store=store, conversation_id="c9", guardrails=[guard])

    assert make_agent().invoke("hello").text == "first"
    before = make_agent().messages
    result = make_agent().invoke("my ssn is 123-45-6789")
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    snapshot = store.get(result.run_id)
    assert snapshot is not None and snapshot.status == "done"
    assert snapshot.guardrail == result.guardrail
    fresh = make_agent()
    assert fresh.messages == before
    assert fresh.invoke("hello again").text == "second"
    assert "6789" not in repr(fresh.messages) + repr(model.calls)
