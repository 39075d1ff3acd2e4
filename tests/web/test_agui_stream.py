"""The AG-UI encoder on hand-made logs: the mappings the route tests do not reach
(reasoning, CUSTOM events, a pause read through), and the validation rule itself."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError

from agent_sync.stores import RunEvent
from agent_sync.web._agui_stream import AGUIEncoder, _frame

from ._agui import AGUIFrame, check_order, parse
from ._client import _parse

RUN = "run_0123456789abcdef"
CALL = {"id": "tooluse_1", "name": "delete_file", "input": {"path": "/x"}}
APPROVAL = {
    "type": "approval_required",
    "run_id": RUN,
    "approval_id": "apr_1",
    "tool_use": {"toolUseId": "tooluse_1", "name": "delete_file", "input": {"path": "/x"}},
    "schema": None,
    "expires_at": 1_900_000_000.0,
}
ASKED = [
    {"type": "run", "run_id": RUN, "conversation_id": "c1"},
    {"type": "reasoning", "text": "hmm"},
    {"type": "text", "text": "deleting"},
    {"type": "step", "cycle": 1, "tool_calls": [CALL]},
    APPROVAL,
]
ANSWERED = [
    {"type": "tool_start", **CALL},
    {"type": "retry", "attempt": 1, "delay": 0.5, "error": "throttled"},
    {"type": "tool_end", "id": "tooluse_1", "name": "delete_file", "status": "success",
     "duration_s": 0.0, "output": "deleted /x"},
    {"type": "text", "text": "done"},
    {"type": "step", "cycle": 2, "tool_calls": []},
    {"type": "done", "run_id": RUN, "stop_reason": "end_turn", "cancel_reason": None,
     "usage": {}, "text": "done"},
]  # fmt: skip


def _frames(data: bytes) -> list[AGUIFrame]:
    return [parse(_parse(raw)) for raw in data.split(b"\n\n") if raw and not raw.startswith(b":")]


def _log(records: list[dict[str, Any]], first: int = 1) -> list[RunEvent]:
    return [RunEvent(seq=seq, data=record) for seq, record in enumerate(records, first)]


def test_a_stream_that_reads_a_pause_and_its_continuation_writes_both_runs() -> None:
    encoder = AGUIEncoder(RUN, "c1")
    data = encoder.opening() + b"".join(
        encoder.encode(e.seq, e.data) for e in _log(ASKED + ANSWERED)
    )
    frames = _frames(data)
    check_order(frames)
    types = [f.type.value for f in frames]
    assert types[:5] == [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
    ]
    pause = types.index("RUN_FINISHED")
    assert types[pause + 1] == "RUN_STARTED" and frames[pause + 1].event.run_id == RUN
    interrupt = frames[pause].event.outcome.interrupts[0]
    assert (interrupt.id, interrupt.tool_call_id) == ("apr_1", "tooluse_1")
    assert interrupt.expires_at.startswith("2030-03-17T")
    custom = next(f.event for f in frames if f.type.value == "CUSTOM")
    assert (custom.name, custom.value["attempt"]) == ("agent_sync.retry", 1)
    assert frames[-1].event.outcome.type == "success"


def test_a_stream_after_the_pause_starts_the_run_again_and_announces_nothing_twice() -> None:
    paused = AGUIEncoder(RUN, "c1")
    first = paused.opening() + b"".join(paused.encode(e.seq, e.data) for e in _log(ASKED))
    first += paused.paused()
    going_on = AGUIEncoder(RUN, "c1", history=_log(ASKED))
    rest = going_on.opening() + b"".join(
        going_on.encode(e.seq, e.data) for e in _log(ANSWERED, len(ASKED) + 1)
    )
    frames = _frames(first) + _frames(rest)
    check_order(frames)
    assert frames[len(_frames(first))].type.value == "RUN_STARTED"
    assert _frames(first)[-1].id == f"{RUN}:{len(ASKED)}"  # a reconnect after it: 204


def test_an_event_its_model_refuses_or_with_an_unknown_field_is_never_written() -> None:
    with pytest.raises(ValidationError):
        _frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": 3})
    with pytest.raises(ValueError, match="unknown fields"):
        _frame({"type": "TEXT_MESSAGE_END", "messageId": "m", "msgId": "m"})


PIECES = ['say "hi" \\ there', "line\nbreak\r\n\n\ndata: x", "\x00\x1f\x7f", "\u2028\u2029",
          "é 😀 </script>", '}\n\n', " ", "x" * 5000]  # fmt: skip


@pytest.mark.parametrize("kind", ["text", "reasoning"])
def test_a_message_s_content_frames_are_the_protocol_s_own_bytes(kind: str) -> None:
    # content frames are written into a frame validated once per message: each piece,
    # whatever it holds, must still be the event its model validates, written byte for
    # byte as ag_ui's EventEncoder writes that event
    encoder = AGUIEncoder(RUN, "c1")
    records = [{"type": "run", "run_id": RUN}] + [{"type": kind, "text": p} for p in PIECES]
    data = b"".join(encoder.encode(e.seq, e.data) for e in _log(records))
    content = [f for f in _frames(data) if f.type.value.endswith("_MESSAGE_CONTENT")]
    assert [f.event.delta for f in content] == PIECES
    for frame in content:
        written = frame.raw.split(b"\n", 1)[1] + b"\n\n"  # the id line off
        assert written == EventEncoder().encode(frame.event).encode()
