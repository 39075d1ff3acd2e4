"""``UIStreamEncoder``: a run's records as AI SDK UI message stream parts.

The records come from real runs (``ScriptedModel``, real tools, ``records_of``), read back
through JSON as a store would give them; :func:`check_stream` holds every stream to what the
AI SDK client requires.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Iterable
from typing import Any

import pytest

from agent_sync import Agent, Deny, UsageLimits, tool
from agent_sync._run_log._records import done_record, error_record, records_of, run_record
from agent_sync.errors import ModelError, ModelThrottledError
from agent_sync.events import AgentEvent, Done, MessageComplete
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.retry import RetryPolicy
from agent_sync.testing import ScriptedModel
from agent_sync.web._encoders import KEEPALIVE_FRAME
from agent_sync.web._ui_stream import DONE_FRAME, UI_STREAM_HEADERS, UIStreamEncoder, shown_calls

from ._ui_parts import DONE, check_stream, parse_frames, types_of

RUN = "run_0123"
Record = dict[str, Any]


@tool
def read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def broken(path: str) -> str:
    """Always fails."""
    raise ValueError(f"no such file: {path}")


def record(events: Iterable[AgentEvent], *, denied: Collection[str] = ()) -> list[Record]:
    """The records a chat route logs for a run's events, read back as JSON."""
    records: list[Record] = []
    cycle = 0
    try:
        for event in events:
            if isinstance(event, MessageComplete) and event.message["role"] == "assistant":
                cycle += 1
            if isinstance(event, Done):
                if event.result.stop_reason != "paused":  # a pause is not an end
                    records.append(done_record(event))
            else:
                records.extend(records_of(event, cycle=cycle, denied=denied))
    except ModelError as exc:
        records.append(error_record(exc))
    loaded: list[Record] = json.loads(json.dumps(records, default=str))
    return loaded


def encode(
    records: list[Record], *, start: int = 0, end: str = "closing", first_seq: int = 1
) -> bytes:
    """One response: the opening, the records from ``start``, then the end (a stream
    from ``start`` > 0 is a continuation: the client has the calls announced before)."""
    encoder = UIStreamEncoder(RUN, client_has=shown_calls(records[:start]))
    body = [encoder.opening()]
    body += [encoder.encode(first_seq + i, r) for i, r in enumerate(records) if i >= start]
    body.append(encoder.paused() if end == "paused" else encoder.closing())
    return b"".join(body)


def parts_of(records: list[Record], **kwargs: Any) -> list[Any]:
    parts = parse_frames(encode(records, **kwargs))
    check_stream(parts)
    return parts


def by_type(parts: list[Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in parts if p != DONE and p["type"] == kind]


def paused_run(turns: list[Any]) -> tuple[Agent, list[Record]]:
    """A run whose first model call asks for a gated call: it pauses."""
    agent = Agent(ScriptedModel(turns), tools=[read, delete, broken])
    records = [run_record(RUN, "c1"), *record(agent.stream("tidy up"))]
    assert agent.is_paused
    return agent, records


def approval_id(records: list[Record]) -> str:
    """The id of the one approval request in the records."""
    (request,) = [r for r in records if r["type"] == "approval_required"]
    return str(request["approval_id"])


MIXED_CALL = {
    "text": "Let me look.",
    "tool_calls": [
        {"id": "call_read", "name": "read", "input": {"path": "a"}},
        {"id": "call_delete", "name": "delete", "input": {"path": "b"}},
    ],
}


def test_headers() -> None:
    assert UI_STREAM_HEADERS == {
        "Content-Type": "text/event-stream",
        "x-vercel-ai-ui-message-stream": "v1",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    }


def test_text_answer() -> None:
    agent = Agent(ScriptedModel([{"text": "Hello, world", "chunk_size": 5}]))
    parts = parts_of([run_record(RUN, "c1"), *record(agent.stream("hi"))])

    assert types_of(parts) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
        DONE,
    ]
    assert parts[0] == {"type": "start", "messageId": RUN}
    assert "".join(p["delta"] for p in by_type(parts, "text-delta")) == "Hello, world"
    assert len({p["id"] for p in parts[2:7]}) == 1
    assert parts[-2] == {"type": "finish", "finishReason": "stop"}


def test_frames_are_one_data_line_each_whatever_the_text() -> None:
    text = "a\n\ndata: [DONE]\r\n\u2028ünï"
    raw = encode([{"type": "text", "text": text}, {"type": "step", "tool_calls": []}])
    frames = raw.decode().split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]"
    assert all(f.startswith("data: ") and "\n" not in f and "\r" not in f for f in frames[:-1])
    assert by_type(parse_frames(raw), "text-delta")[0]["delta"] == text


def test_reasoning_then_text_are_two_parts() -> None:
    agent = Agent(ScriptedModel([{"reasoning": "think", "text": "answer"}]))
    parts = parts_of(record(agent.stream("hi")))

    assert types_of(parts)[:8] == [
        "start",
        "start-step",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "text-start",
        "text-delta",
        "text-end",
    ]
    assert parts[2]["id"] != parts[5]["id"]
    assert parts[3]["delta"] == "think"


def test_tool_call_then_answer_two_steps() -> None:
    agent = Agent(
        ScriptedModel(
            [{"tool_calls": [{"id": "t1", "name": "read", "input": {"path": "a"}}]}, "It says a."]
        ),
        tools=[read],
    )
    parts = parts_of(record(agent.stream("read a")))

    assert types_of(parts) == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
        DONE,
    ]
    assert parts[2] == {
        "type": "tool-input-available",
        "toolCallId": "t1",
        "toolName": "read",
        "input": {"path": "a"},
    }
    assert parts[3] == {
        "type": "tool-output-available",
        "toolCallId": "t1",
        "output": "contents of a",
    }


def test_text_ids_are_unique_in_the_message() -> None:
    agent = Agent(
        ScriptedModel(
            [{"text": "first", "tool_calls": [{"name": "read", "input": {"path": "a"}}]}, "second"]
        ),
        tools=[read],
    )
    parts = parts_of(record(agent.stream("go")))
    starts = by_type(parts, "text-start")
    assert len(starts) == 2 and starts[0]["id"] != starts[1]["id"]


def test_a_failing_tool_is_an_output_error() -> None:
    agent = Agent(
        ScriptedModel(
            [{"tool_calls": [{"id": "t1", "name": "broken", "input": {"path": "x"}}]}, "Sorry."]
        ),
        tools=[broken],
    )
    parts = parts_of(record(agent.stream("go")))
    (error,) = by_type(parts, "tool-output-error")
    assert error["toolCallId"] == "t1"
    assert "no such file: x" in error["errorText"]
    assert by_type(parts, "tool-output-available") == []


def test_a_json_output_is_its_value() -> None:
    records: list[Record] = [
        {"type": "step", "tool_calls": [{"id": "t1", "name": "lookup", "input": {}}]},
        {"type": "tool_start", "id": "t1", "name": "lookup", "input": {}},
        {"type": "tool_end", "id": "t1", "name": "lookup", "status": "success", "output": {"n": 1}},
    ]
    (output,) = by_type(parse_frames(encode(records)), "tool-output-available")
    assert output["output"] == {"n": 1}


def test_pause_shows_only_the_gated_call_then_finishes_with_tool_calls() -> None:
    _, records = paused_run([MIXED_CALL, "Done."])
    parts = parts_of(records, end="paused")

    assert types_of(parts) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
        DONE,
    ]
    (request,) = [r for r in records if r["type"] == "approval_required"]
    assert parts[6]["toolCallId"] == "call_delete"
    assert parts[7] == {
        "type": "tool-approval-request",
        "approvalId": request["approval_id"],
        "toolCallId": "call_delete",
    }
    assert parts[-2] == {"type": "finish", "finishReason": "tool-calls"}
    # the call needing no approval has not run: the client must not wait for its output
    assert "call_read" not in json.dumps(parts)


def test_continuation_after_approval() -> None:
    agent, records = paused_run([MIXED_CALL, "Done."])
    first = parts_of(records, end="paused")
    more = record(agent.resume_stream({approval_id(records): True}))
    records += more
    start = len(records) - len(more)

    parts = parse_frames(encode(records, start=start))
    check_stream(parts, client_has=check_stream(first))
    assert types_of(parts) == [
        "start",
        "tool-input-available",  # the call that needed no approval: it runs now
        "tool-output-available",
        "tool-output-available",  # the approved call: the client has it, not announced again
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
        DONE,
    ]
    assert parts[0] == {"type": "start", "messageId": RUN}  # the same assistant message
    assert parts[2] == {
        "type": "tool-output-available",
        "toolCallId": "call_read",
        "output": "contents of a",
    }
    assert parts[3] == {
        "type": "tool-output-available",
        "toolCallId": "call_delete",
        "output": "deleted b",
    }


def test_a_denied_call() -> None:
    agent, records = paused_run([MIXED_CALL, "Left it."])
    more = record(agent.resume_stream({approval_id(records): Deny("no")}), denied={"call_delete"})
    parts = parse_frames(encode(records + more, start=len(records)))
    check_stream(parts, client_has={"call_delete"})

    assert {"type": "tool-output-denied", "toolCallId": "call_delete"} in parts
    assert by_type(parts, "tool-output-error") == []


def test_a_replay_from_the_start_spans_the_pause() -> None:
    agent, records = paused_run([MIXED_CALL, "Done."])
    records += record(agent.resume_stream({approval_id(records): True}))

    parts = parts_of(records)
    kinds = types_of(parts)
    assert kinds.count("start") == 1 and kinds.count("finish") == 1
    assert kinds.index("tool-approval-request") < kinds.index("tool-output-available")
    assert {p["toolCallId"] for p in by_type(parts, "tool-input-available")} == {
        "call_read",
        "call_delete",
    }
    assert parts[-2] == {"type": "finish", "finishReason": "stop"}


def test_cancel_during_a_tool_answers_the_open_calls_then_aborts() -> None:
    release = threading.Event()

    @tool
    def slow(path: str) -> str:
        """Waits."""
        release.wait(10)
        return "late"

    agent = Agent(
        ScriptedModel(
            [
                {
                    "text": "Working",
                    "tool_calls": [
                        {"id": "t_slow", "name": "slow", "input": {"path": "a"}},
                        {"id": "t_read", "name": "read", "input": {"path": "b"}},
                    ],
                }
            ]
        ),
        tools=[slow, read],
        tool_executor="sequential",
    )
    stream = agent.stream("go")
    events: list[AgentEvent] = []
    try:
        for event in stream:
            events.append(event)
            if event.type == "tool_start":
                stream.cancel("user pressed stop")
    finally:
        release.set()
    parts = parts_of(record(events))

    kinds = types_of(parts)
    assert kinds[-5:] == ["tool-output-error", "finish-step", "abort", "finish", DONE]
    errors = {p["toolCallId"]: p["errorText"] for p in by_type(parts, "tool-output-error")}
    assert errors == {"t_slow": CANCELLED_TEXT, "t_read": CANCELLED_TEXT}
    assert {"type": "abort", "reason": "user pressed stop"} in parts
    assert parts[-2] == {"type": "finish", "finishReason": "other"}


def test_cancel_while_text_streams_closes_the_part() -> None:
    records: list[Record] = [
        {"type": "text", "text": "Hal"},
        {"type": "done", "run_id": RUN, "stop_reason": "cancelled", "cancel_reason": None},
    ]
    parts = parts_of(records)
    assert types_of(parts)[-6:] == [
        "text-delta",
        "text-end",
        "finish-step",
        "abort",
        "finish",
        DONE,
    ]
    assert {"type": "abort"} in parts  # no reason given: none sent


def test_a_model_error_is_the_last_part() -> None:
    turn = {"text": "partial", "error": ModelThrottledError("slow down"), "error_after": 1}
    agent = Agent(ScriptedModel([turn]), retry=RetryPolicy(max_attempts=1))
    records = record(agent.stream("hi"))
    assert records[-1]["type"] == "error"

    parts = parts_of(records)
    assert types_of(parts)[-4:] == ["text-end", "finish-step", "error", DONE]
    assert parts[-2] == {"type": "error", "errorText": "slow down"}


def test_records_after_the_end_add_nothing() -> None:
    encoder = UIStreamEncoder(RUN)
    encoder.encode(1, {"type": "error", "message": "boom"})
    assert encoder.encode(2, {"type": "text", "text": "late"}) == b""
    assert encoder.paused() == DONE_FRAME  # the end is written once
    assert encoder.closing() == b""


def test_retry_and_injection_are_transient_data_parts() -> None:
    agent = Agent(
        ScriptedModel(
            [
                {"error": ModelThrottledError("busy")},
                {"tool_calls": [{"name": "read", "input": {"path": "a"}}]},
                "ok",
            ]
        ),
        tools=[read],
        retry=RetryPolicy(initial_delay=0, jitter=0),
    )
    stream = agent.stream("hi")
    events: list[AgentEvent] = []
    for event in stream:
        events.append(event)
        if event.type == "tool_start":
            stream.inject("also this")
    parts = parts_of(record(events))

    data = by_type(parts, "data-agent-sync")
    assert [p["transient"] for p in data] == [True, True]
    assert data[0]["data"]["event"] == "retry"
    assert data[0]["data"]["attempt"] == 1 and "busy" in data[0]["data"]["error"]
    assert data[1]["data"] == {"event": "input_injected", "content": [{"text": "also this"}]}


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("max_cycles", "other"),
        ("usage_limit", "other"),
        ("content_filtered", "other"),
    ],
)
def test_finish_reasons(stop_reason: str, finish_reason: str) -> None:
    records = [{"type": "done", "run_id": RUN, "stop_reason": stop_reason, "cancel_reason": None}]
    assert parts_of(records)[-2] == {"type": "finish", "finishReason": finish_reason}


def test_a_max_tokens_run_finishes_with_length() -> None:
    agent = Agent(ScriptedModel([{"text": "cut sh", "stop_reason": "max_tokens"}]))
    assert parts_of(record(agent.stream("hi")))[-2]["finishReason"] == "length"


def test_a_usage_limit_run_answers_its_open_calls_as_the_history_does() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "read", "input": {"path": "a"}}]}])
    agent = Agent(model, tools=[read], usage_limits=UsageLimits(tool_calls=0))
    records = record(agent.stream("hi"))
    assert records[-1]["stop_reason"] == "usage_limit"
    assert records[-1]["usage_limit"] == "tool_calls"
    parts = parts_of(records)
    errors = by_type(parts, "tool-output-error")
    assert [p["errorText"] for p in errors] == ["not run: tool call limit"]
    assert parts[-2] == {"type": "finish", "finishReason": "other"}


def test_a_logged_paused_done_ends_like_a_pause() -> None:
    records = [{"type": "done", "run_id": RUN, "stop_reason": "paused", "cancel_reason": None}]
    assert parts_of(records)[-2] == {"type": "finish", "finishReason": "tool-calls"}


def test_keepalive_is_an_sse_comment() -> None:
    assert UIStreamEncoder(RUN).keepalive() == KEEPALIVE_FRAME
    assert KEEPALIVE_FRAME.startswith(b":") and KEEPALIVE_FRAME.endswith(b"\n\n")
    assert parse_frames(b'data: {"type":"start"}\n\n' + KEEPALIVE_FRAME) == [{"type": "start"}]


def test_encoding_is_a_pure_function_of_the_records() -> None:
    agent, records = paused_run([MIXED_CALL, "Done."])
    records += record(agent.resume_stream({approval_id(records): True}))
    assert encode(records) == encode(json.loads(json.dumps(records)))
    assert UIStreamEncoder(RUN).stops_at_pause is True


def test_correct_from_any_start() -> None:
    """Cut a real log anywhere: the first stream ends (a disconnect) and a second one
    starts at the cut; both are streams the client takes, appended to one message."""
    agent, records = paused_run(
        [
            {**MIXED_CALL, "reasoning": "plan"},
            {"text": "Now the rest.", "tool_calls": [{"name": "broken", "input": {"path": "c"}}]},
            "All done.",
        ]
    )
    records += record(agent.resume_stream({approval_id(records): True}))
    assert records[-1]["type"] == "done"

    for cut in range(len(records)):  # past the last record there is no stream (204)
        first = UIStreamEncoder(RUN)
        head = [first.opening(), *(first.encode(i + 1, r) for i, r in enumerate(records[:cut]))]
        head.append(first.paused())  # the end a cut response gets
        shown = check_stream(parse_frames(b"".join(head)))
        check_stream(parse_frames(encode(records, start=cut)), client_has=shown)


def test_records_without_parts() -> None:
    for kind in ("run", "unknown"):
        assert UIStreamEncoder(RUN).encode(1, {"type": kind}) == b""
