"""Reading AG-UI streams in tests: every frame parsed by ``ag_ui.core``'s event models, and
the protocol's order checked (what an AG-UI client's verifier refuses, refused here)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ag_ui.core import Event, EventType
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter

from ._client import Frame, SSEConnection

__all__ = ["AGUIFrame", "check_order", "events_until_end", "run_input"]

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
_ENDS = (EventType.RUN_FINISHED, EventType.RUN_ERROR)


@dataclass(frozen=True)
class AGUIFrame:
    """One frame: the validated event, its SSE id, its bytes."""

    event: Any
    id: str | None
    raw: bytes

    @property
    def type(self) -> EventType:
        return self.event.type  # type: ignore[no-any-return]


def parse(frame: Frame) -> AGUIFrame:
    """A data frame as its ``ag_ui.core`` event (validated: a bad one raises), holding no
    field the models do not know, and sent as the models' own serializer writes it."""
    event = _EVENT.validate_python(frame.data)
    assert not event.model_extra, f"unknown fields {event.model_extra}"
    outcome = getattr(event, "outcome", None)
    for interrupt in getattr(outcome, "interrupts", None) or ():
        assert not interrupt.model_extra, f"unknown interrupt fields {interrupt.model_extra}"
    assert json.loads(EventEncoder().encode(event)[len("data: ") :]) == frame.data
    return AGUIFrame(event, frame.id, frame.raw)


def events_until_end(conn: SSEConnection) -> list[AGUIFrame]:
    """Every event of the response, which must end with ``RUN_FINISHED``/``RUN_ERROR``."""
    seen = [parse(frame) for frame in conn.frames() if frame.event != "comment"]
    assert seen and seen[-1].type in _ENDS, f"the stream did not end a run: {seen[-1:]}"
    return seen


def events_until(conn: SSEConnection, kind: EventType) -> list[AGUIFrame]:
    """The events up to and including the first ``kind``."""
    seen: list[AGUIFrame] = []
    for frame in conn.frames():
        if frame.event != "comment":
            seen.append(parse(frame))
            if seen[-1].type == kind:
                return seen
    raise AssertionError(f"the stream ended before {kind}: {[f.type for f in seen]}")


def check_order(frames: Iterable[AGUIFrame]) -> None:
    """The protocol's order: a run opens with ``RUN_STARTED`` and ends once, with nothing
    open; content and arguments only inside their message or call; ids ascend."""
    in_run = False
    texts: set[str] = set()
    reasoning: set[str] = set()
    calls: set[str] = set()
    ended_calls: set[str] = set()
    last_seq = 0
    for frame in frames:
        event, kind = frame.event, frame.type
        if frame.id is not None:
            seq = int(frame.id.rsplit(":", 1)[1])
            assert seq > last_seq, f"ids must ascend: {frame.id} after {last_seq}"
            last_seq = seq
        if kind == EventType.RUN_STARTED:
            assert not in_run, "RUN_STARTED inside a run"
            in_run = True
            continue
        assert in_run, f"{kind} outside a run"
        if kind == EventType.TEXT_MESSAGE_START:
            assert not texts, "a text message inside another"
            texts.add(event.message_id)
        elif kind == EventType.TEXT_MESSAGE_CONTENT:
            assert event.message_id in texts
        elif kind == EventType.TEXT_MESSAGE_END:
            texts.remove(event.message_id)
        elif kind == EventType.REASONING_MESSAGE_START:
            reasoning.add(event.message_id)
        elif kind == EventType.REASONING_MESSAGE_END:
            reasoning.remove(event.message_id)
        elif kind == EventType.TOOL_CALL_START:
            assert event.tool_call_id not in calls | ended_calls, "a call announced twice"
            calls.add(event.tool_call_id)
        elif kind == EventType.TOOL_CALL_ARGS:
            assert event.tool_call_id in calls
        elif kind == EventType.TOOL_CALL_END:
            calls.remove(event.tool_call_id)
            ended_calls.add(event.tool_call_id)
        elif kind == EventType.TOOL_CALL_RESULT:
            assert event.tool_call_id in ended_calls, "a result before its call ended"
        elif kind in _ENDS:
            assert not (texts or reasoning or calls), f"{kind} with something open"
            in_run = False


def run_input(thread_id: str = "c1", text: str | None = "hi", **fields: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` body as a client sends it (camelCase)."""
    messages = [] if text is None else [{"id": "m1", "role": "user", "content": text}]
    return {"threadId": thread_id, "runId": "client-run", "messages": messages, **fields}
