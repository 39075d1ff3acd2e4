"""AG-UI events: a run's records as the AG-UI protocol (1.0) streams them over SSE.

Every event is validated by its ``ag_ui.core`` model as it is made (:func:`_frame`: an
event the protocol's models refuse, or one with a field they do not know, is never sent),
and written as the JSON object the model validated (``data: <json>``): the optional fields
without a value left out, as the models' own serializer leaves them out (the same JSON as
``ag_ui.encoder``'s, without its per-event Python serializer: tests/web/_agui.py checks they
agree). A message's content events (the bulk of a stream) differ only in their ``delta``, a
string, which their models accept whatever it holds: the event is validated once, when its
message opens, with an empty ``delta``, and each piece is written into that frame
(:class:`_Message`). The last frame a record makes carries ``id: <run_id>:<seq>``, so a
client reconnects with ``Last-Event-ID`` as on the native routes; encoding is a pure
function of the log, so a replay is the same bytes.

Mapping (one encoder per response; a response that starts after record ``n`` is first
fed records ``1..n`` without sending them, so it knows what the client has):

=====================  ================================================================
opening                ``RUN_STARTED`` {runId: the run id, threadId: the conversation}
                       unless the client's stream is inside the run already
``text``/``reasoning``  ``TEXT_MESSAGE_START``/``_CONTENT`` (message id ``<run>:<seq>``);
                        ``REASONING_START``/``REASONING_MESSAGE_*``; the other kind's
                        open message is closed first
``step``                the model call ended: its open message closed; its tool calls
                        ``TOOL_CALL_START``/``_ARGS`` (the input as JSON)/``_END``, with
                        ``parentMessageId`` the call's text message
``tool_start``          nothing (announced at ``step``), or the call if it was not
``tool_end``            ``TOOL_CALL_RESULT`` (text; a JSON value as JSON; ``metadata``
                        ``{"agent_sync": {"status"}}`` unless a success)
``approval_required``   gathered; the response ends with ``RUN_FINISHED`` ``outcome``
                        ``interrupt``: one ``Interrupt`` per request (id = approval id)
``retry``, ...          ``CUSTOM`` ``{name: "agent_sync.<type>", value: the record}``
``done``                calls left open answered as the history answers them, then
                        ``RUN_FINISHED``: outcome ``cancelled`` for a stopped run, else
                        ``success`` (``result``: the structured output, if any;
                        ``metadata.agent_sync``: ``end_metadata``, the stop reason and
                        what stopped the run, and any ``unchecked_input``)
``error``               ``RUN_ERROR`` {message, code: the error's type}
=====================  ================================================================

A continuation after a pause (the run resumed on any worker) starts with ``RUN_STARTED``
again, with the same run id: AG-UI's "a new run whose resume entries answer the
interrupts", under the id the first stream gave. A stream that reads the approval records
and then the continuation (decided elsewhere before it saw the pause) writes the same
``RUN_FINISHED`` and ``RUN_STARTED`` between them, so a replay matches it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from .._extras import missing_extra

try:
    from ag_ui.core import (
        PROTOCOL_VERSION,
        BaseEvent,
        CustomEvent,
        ReasoningEndEvent,
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
        ReasoningStartEvent,
        RunErrorEvent,
        RunFinishedEvent,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
except ImportError as exc:
    raise missing_extra("ag-ui-protocol", "agui") from exc

from .._limits import not_run_text
from .._run_log._records import event_id
from ..messages import CANCELLED_TEXT
from ..stores import RunEvent
from ._decision_input import DECISION_SCHEMA
from ._encoders import KEEPALIVE_FRAME, OPEN_FRAME, end_metadata
from ._http import utf8

__all__ = ["AGUIEncoder", "CUSTOM_PREFIX", "INTERRUPT_REASON"]

CUSTOM_PREFIX: Final = "agent_sync."
"""``CUSTOM`` events are named ``agent_sync.<record type>``."""
INTERRUPT_REASON: Final = "tool_approval"
"""The ``reason`` of the interrupt a gated tool call makes."""
_CUSTOM_TYPES: Final = frozenset(
    {"retry", "input_injected", "partial_output", "tool_progress", "resumed", "subagent"}
)
Wire = dict[str, Any]
"""An event as the JSON object sent (camelCase keys)."""
_MODELS: Final[dict[str, type[BaseEvent]]] = {
    model.model_fields["type"].default.value: model
    for model in (
        CustomEvent,
        ReasoningEndEvent,
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
        ReasoningStartEvent,
        RunErrorEvent,
        RunFinishedEvent,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
}
"""The model that validates each event this encoder writes, by its ``type``."""
_VALIDATORS: Final[dict[str, Callable[[Wire], BaseEvent]]] = {
    kind: model.__pydantic_validator__.validate_python for kind, model in _MODELS.items()
}
"""Their validators (``model_validate`` without its wrapper: the per-event cost counts)."""
_DUMPS: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode

State = Literal["idle", "running", "pausing", "interrupted", "ended"]
_DELTA_END: Final = '""}\n\n'
"""How a content frame with an empty ``delta`` ends: where each piece goes."""


@dataclass(frozen=True)
class _Message:
    """An open text or reasoning message, with its content event's frame up to the delta."""

    kind: str  # "text" | "reasoning"
    id: str
    content: str  # 'data: {"type":...,"messageId":...,"delta":' (validated in open)

    @classmethod
    def open(cls, kind: str, message_id: str) -> _Message:
        """The message, its content event validated once (``delta`` is any string)."""
        content = "TEXT_MESSAGE_CONTENT" if kind == "text" else "REASONING_MESSAGE_CONTENT"
        frame = _event(content, messageId=message_id, delta="")
        return cls(kind, message_id, frame[: -len(_DELTA_END)])

    def frame(self, text: str) -> str:
        """The content event of one piece: the frame :func:`_frame` would write for it."""
        return f"{self.content}{_DUMPS(text)}}}\n\n"


@dataclass
class _Call:
    """A tool call this stream announced."""

    answered: bool = False


class AGUIEncoder:
    """A run's records as AG-UI events, for one response (one thread).

    Args:
        run_id: The run: ``runId`` of every ``RUN_*`` event.
        thread_id: The conversation: ``threadId``.
        history: The records the client has already (a reconnect's, a continuation's):
            read to know its state, not sent.
    """

    stops_at_pause = True

    def __init__(self, run_id: str, thread_id: str, *, history: Iterable[RunEvent] = ()) -> None:
        self._run_id = run_id
        self._thread_id = thread_id
        self._state: State = "idle"
        self._open: _Message | None = None
        self._message_id: str | None = None  # the text message of the open model call
        self._calls: dict[str, _Call] = {}
        self._interrupts: list[Wire] = []
        self._pause_seq: int | None = None  # the last approval record's
        for event in history:
            self.encode(event.seq, event.data)
        self._end_history()

    def _end_history(self) -> None:
        """A history that ends at a pause: that stream ended there, with its interrupt."""
        if self._state == "pausing":
            self._state, self._interrupts = "interrupted", []

    def opening(self) -> bytes:
        """``RUN_STARTED`` unless the client is inside the run already."""
        if self._state in ("idle", "interrupted"):
            return self._frames(self._start(), None)
        return OPEN_FRAME

    def encode(self, seq: int, record: Mapping[str, Any]) -> bytes:
        """The events of one record (maybe none), the last frame with the record's id."""
        if self._state == "ended":
            return b""
        kind = record.get("type")
        events: list[str] = []
        if self._state == "pausing" and kind != "approval_required":
            events.append(self._interrupt())  # the run went on before this stream paused
        if self._state in ("idle", "interrupted"):
            events += self._start()
            if kind == "run":
                return self._frames(events, seq)
        if kind in ("text", "reasoning"):
            self._write(events, str(kind), seq, str(record.get("text", "")))
        elif kind == "step":
            self._close_message(events)
            for call in record.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    self._announce(
                        events, str(call.get("id", "")), call.get("name"), call.get("input")
                    )
            self._message_id = None
        elif kind == "tool_start":
            self._close_message(events)
            self._announce(
                events, str(record.get("id", "")), record.get("name"), record.get("input")
            )
        elif kind == "tool_end":
            self._close_message(events)
            self._tool_end(events, seq, record)
        elif kind == "approval_required":
            self._close_message(events)
            self._interrupts.append(self._interrupt_of(record))
            self._state, self._pause_seq = "pausing", seq
        elif kind in _CUSTOM_TYPES:
            if kind == "resumed":  # the cut model call's text stays; the new one is new
                self._close_message(events)
            value = {k: v for k, v in record.items() if k != "type"}
            events.append(_event("CUSTOM", name=f"{CUSTOM_PREFIX}{kind}", value=value))
        elif kind == "done":
            self._done(events, seq, record)
        elif kind == "error":
            self._error(events, seq, record)
        return self._frames(events, seq)

    def keepalive(self) -> bytes:
        """An SSE comment: AG-UI clients' SSE parsers skip it."""
        return KEEPALIVE_FRAME

    def paused(self) -> bytes:
        """``RUN_FINISHED`` with the interrupts, with the last approval record's id (a
        reconnect after it has nothing to get while the run waits): the response ends."""
        if self._state != "pausing":
            return b""
        return self._frames([self._interrupt()], self._pause_seq)

    def closing(self) -> bytes:
        """Nothing: ``RUN_FINISHED``/``RUN_ERROR`` ended the stream already."""
        return b""

    # -- frames

    def _frames(self, frames: list[str], seq: int | None) -> bytes:
        """The events' frames as bytes, the last with the record's id."""
        if not frames:
            return b""
        if seq is not None:
            frames[-1] = f"id: {event_id(self._run_id, seq)}\n{frames[-1]}"
        return utf8("".join(frames))

    # -- run

    def _start(self) -> list[str]:
        self._state = "running"
        return [
            _event(
                "RUN_STARTED",
                threadId=self._thread_id,
                runId=self._run_id,
                protocolVersion=PROTOCOL_VERSION,
            )
        ]

    def _interrupt(self) -> str:
        interrupts, self._interrupts = self._interrupts, []
        self._state = "interrupted"
        return _event(
            "RUN_FINISHED",
            threadId=self._thread_id,
            runId=self._run_id,
            outcome={"type": "interrupt", "interrupts": interrupts},
        )

    def _interrupt_of(self, record: Mapping[str, Any]) -> Wire:
        use = record.get("tool_use") or {}
        call_id = str(use.get("toolUseId", ""))
        name = str(use.get("name", ""))
        expires_at = record.get("expires_at")
        expires = None
        if isinstance(expires_at, (int, float)):
            moment = datetime.datetime.fromtimestamp(expires_at, tz=datetime.timezone.utc)
            expires = moment.isoformat()
        return _omit_none(
            id=str(record.get("approval_id", "")),
            reason=INTERRUPT_REASON,
            message=f"May the agent call {name}?",
            # a sub-agent's call is not one of this stream's calls
            toolCallId=call_id if call_id in self._calls else None,
            responseSchema=DECISION_SCHEMA,
            expiresAt=expires,
            metadata={
                "agent_sync": {
                    "run_id": record.get("run_id"),
                    "tool_use": use,
                    "decision_schema": record.get("schema"),
                }
            },
        )

    def _done(self, events: list[str], seq: int, record: Mapping[str, Any]) -> None:
        stop_reason = record.get("stop_reason")
        if stop_reason == "paused":  # a writer that logs the paused run's Done
            self._close_message(events)
            if self._interrupts:
                events.append(self._interrupt())
            return
        limit = record.get("usage_limit") if stop_reason == "usage_limit" else None
        self._close_all(events, seq, not_run_text(str(limit)) if limit else CANCELLED_TEXT)
        # a guardrail's stop is a finished run (status done), not an error
        outcome = "cancelled" if stop_reason == "cancelled" else "success"
        events.append(
            _event(
                "RUN_FINISHED",
                threadId=self._thread_id,
                runId=self._run_id,
                result=record.get("output"),
                outcome={"type": outcome},
                metadata={"agent_sync": end_metadata(record)},
            )
        )
        self._state = "ended"

    def _error(self, events: list[str], seq: int, record: Mapping[str, Any]) -> None:
        message = str(record.get("message") or "the agent failed")
        problems = record.get("problems")
        if isinstance(problems, list) and problems:
            message += ":\n" + "\n".join(f"- {problem}" for problem in problems)
        self._close_all(events, seq, message)
        code = record.get("error")
        events.append(_event("RUN_ERROR", message=message, code=str(code) if code else None))
        self._state = "ended"

    # -- messages

    def _write(self, events: list[str], kind: str, seq: int, text: str) -> None:
        if not text:
            return
        if self._open is None or self._open.kind != kind:
            self._close_message(events)
            message_id = f"{self._run_id}:{seq}"
            self._open = _Message.open(kind, message_id)
            if kind == "text":
                self._message_id = message_id
                events.append(_event("TEXT_MESSAGE_START", messageId=message_id, role="assistant"))
            else:
                events.append(_event("REASONING_START", messageId=message_id))
                events.append(
                    _event("REASONING_MESSAGE_START", messageId=message_id, role="reasoning")
                )
        events.append(self._open.frame(text))

    def _close_message(self, events: list[str]) -> None:
        if self._open is None:
            return
        kind, message_id = self._open.kind, self._open.id
        self._open = None
        if kind == "text":
            events.append(_event("TEXT_MESSAGE_END", messageId=message_id))
        else:
            events.append(_event("REASONING_MESSAGE_END", messageId=message_id))
            events.append(_event("REASONING_END", messageId=message_id))

    # -- tool calls

    def _announce(self, events: list[str], call_id: str, name: Any, input_: Any) -> None:
        if call_id in self._calls:
            return
        self._calls[call_id] = _Call()
        events.append(
            _event(
                "TOOL_CALL_START",
                toolCallId=call_id,
                toolCallName=str(name or ""),
                parentMessageId=self._message_id,
            )
        )
        events.append(_event("TOOL_CALL_ARGS", toolCallId=call_id, delta=_DUMPS(input_)))
        events.append(_event("TOOL_CALL_END", toolCallId=call_id))

    def _tool_end(self, events: list[str], seq: int, record: Mapping[str, Any]) -> None:
        call_id = str(record.get("id", ""))
        self._announce(events, call_id, record.get("name"), {})  # its step came before us
        self._calls[call_id].answered = True
        status = str(record.get("status") or "success")
        events.append(
            _event(
                "TOOL_CALL_RESULT",
                messageId=f"{self._run_id}:{seq}",
                toolCallId=call_id,
                content=_text(record.get("output")),
                role="tool",
                metadata=None if status == "success" else {"agent_sync": {"status": status}},
            )
        )

    def _close_all(self, events: list[str], seq: int, error_text: str) -> None:
        """End of run: the open message closed, every call left open answered."""
        self._close_message(events)
        for number, (call_id, call) in enumerate(self._calls.items()):
            if call.answered:
                continue
            call.answered = True
            events.append(
                _event(
                    "TOOL_CALL_RESULT",
                    messageId=f"{self._run_id}:{seq}.{number}",
                    toolCallId=call_id,
                    content=error_text,
                    role="tool",
                    metadata={"agent_sync": {"status": "error"}},
                )
            )


def _event(kind: str, **fields: Any) -> str:
    """An event's frame: ``type`` first, the fields without a value left out."""
    return _frame({"type": kind, **_omit_none(**fields)})


def _frame(wire: Wire) -> str:
    """An event's SSE frame, validated by its model first: the rule every frame passes."""
    model = _VALIDATORS[wire["type"]](wire)
    if model.__pydantic_extra__:  # a field the protocol does not know: a bug here
        unknown = sorted(model.__pydantic_extra__)
        raise ValueError(f"{wire['type']} has unknown fields {unknown}")
    return f"data: {_DUMPS(wire)}\n\n"


def _omit_none(**fields: Any) -> Wire:
    """The fields that have a value (the protocol's models leave out the others)."""
    return {name: value for name, value in fields.items() if value is not None}


def _text(output: Any) -> str:
    """A tool's output as the result's text."""
    return output if isinstance(output, str) else _DUMPS(output)
