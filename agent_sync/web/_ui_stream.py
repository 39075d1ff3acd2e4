"""The AI SDK's UI message stream (protocol v1): a run's records as ``useChat`` reads them.

One response is one SSE stream of JSON *parts*, ``data: <part>`` each, ending with
``data: [DONE]``. Every stream of a run opens with ``start`` ``{messageId: run_id}``, so the
client appends each stream of the run (the first, a continuation after a pause, a replay
after a reload) to one assistant message. The part names and fields are those of the
``uiMessageChunkSchema`` of the ``ai`` package (checked against ``ai`` 6.0).

Mapping (one encoder per response; it may start at any record of a log):

=====================  ================================================================
``text``/``reasoning``  ``text-start``/``reasoning-start`` (id from the record's seq, so
                        unique in the message and the same on a replay), then ``-delta``;
                        the other kind's open part is closed first; ``start-step`` first
                        if no step is open
``step``                the model call ended: its open part closed (``text-end``); its
                        tool calls remembered; the step stays open for their outputs and
                        ends with ``finish-step`` when the next model call writes, or at
                        the end
``approval_required``   ``tool-input-available``, ``tool-approval-request``
``tool_start``          ``tool-input-available`` (unless already sent)
``tool_end``            ``tool-output-available`` / ``-error`` / ``-denied``
``retry``,              a transient ``data-agent-sync`` part ``{event, ...}`` (``onData``
``input_injected``,     sees it; it is not kept in the message); ``resumed`` closes the open
``partial_output``,     text part first (the text of the model call the dead worker was
``tool_progress``,      streaming stays; the call made again writes a new part)
``resumed``
``subagent``            the same, ``{event: "subagent", run_id, parent_run_id,
                        tool_use_id, record}``: the child's record (a grandchild's is a
                        ``subagent`` record in it)
``done``                ``finish`` (``stop``, ``length`` or ``other``); cancelled: the
                        open part closed, ``abort`` ``{reason}``, then ``finish``; a
                        run that handed input back: ``finish`` with ``messageMetadata``
                        ``{agent_sync: end_metadata}`` (``unchecked_input`` in it)
``error``               ``error`` ``{errorText}`` (the client stops reading there; an
                        answer that never validated lists its ``problems`` there)
=====================  ================================================================

Why a tool call is announced lazily (when it starts or is asked about, not when its model
call ends): while a run is paused, calls of the same model call that need no approval have
not run (nothing of a round runs before every gated call is answered). Had the client seen
them, they would sit in ``input-available`` and ``lastAssistantMessageIsComplete
WithApprovalResponses`` (which wants every call of the last step answered) would never send
the decisions. The continuation announces them when they start.

A continuation starts after the approval records: the calls of the earlier steps are
already in the client's message, so outputs are written without a step of their own (the
client finds a call by id in the whole message), and a call the client already has (the
approved one: ``client_has``, from :func:`shown_calls`) is not announced again, as the
AI SDK's own server does not: a ``tool-input-available`` there would sit outside any step.
At the end of a run (cancelled, failed) a call left without an output gets
``tool-output-error``, as the history answers it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .._limits import not_run_text
from ..messages import CANCELLED_TEXT
from ._encoders import KEEPALIVE_FRAME, end_metadata
from ._http import utf8

__all__ = ["DONE_FRAME", "UI_STREAM_HEADERS", "UIStreamEncoder", "shown_calls", "ui_part_frame"]

UI_STREAM_HEADERS: Final[dict[str, str]] = {
    "Content-Type": "text/event-stream",
    "x-vercel-ai-ui-message-stream": "v1",
    "Cache-Control": "no-cache",
    # nginx buffers proxied responses by default, which would hold parts back.
    "X-Accel-Buffering": "no",
}
"""The headers of a UI message stream response (the AI SDK checks none, but proxies and
its own tooling read them)."""

DATA_PART: Final = "data-agent-sync"
"""The type of the transient parts for retries and injected input."""

DONE_FRAME: Final = b"data: [DONE]\n\n"
"""The last frame of every UI message stream."""

_FINISH_REASONS: Final[Mapping[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "guardrail": "content-filter",
}
"""``done`` stop reasons the protocol names; any other is ``other``."""


def ui_part_frame(part: Mapping[str, Any]) -> bytes:
    """One part as its SSE frame: ``data: <json>`` and a blank line.

    ``json.dumps`` escapes every control character (``\\n``, ``\\r`` among them), so the
    payload is one line and cannot end the frame early.
    """
    payload = json.dumps(part, ensure_ascii=False, separators=(",", ":"), default=str)
    return utf8(f"data: {payload}\n\n")


def shown_calls(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """The tool call ids a client that read ``records`` (a run's log from its start) has
    in its message: what a continuation after them must not announce again."""
    encoder = UIStreamEncoder("")
    for seq, record in enumerate(records, 1):
        encoder._finished = False  # a logged pause does not end what the client keeps
        encoder.encode(seq, record)
    return {call_id for call_id, call in encoder._calls.items() if call.shown}


@dataclass
class _Call:
    """A tool call of a step this stream saw."""

    name: str
    input: Any
    shown: bool = False
    """Announced with ``tool-input-available``."""
    answered: bool = False
    """Its output part was sent."""


class UIStreamEncoder:
    """Records to UI message stream parts, for one response (one thread).

    Args:
        message_id: The run id: the assistant message id on every stream of the run.
        client_has: Tool call ids the client's message already holds (a continuation's:
            :func:`shown_calls`); they are not announced again.
    """

    stops_at_pause = True

    def __init__(self, message_id: str, *, client_has: Iterable[str] = ()) -> None:
        self._message_id = message_id
        self._open: tuple[str, str] | None = None  # ("text" | "reasoning", part id)
        self._in_step = False
        self._model_done = False  # the open step's model call ended (its `step` record)
        # by toolCallId, in the order the steps asked
        self._calls: dict[str, _Call] = {
            call_id: _Call("", None, shown=True) for call_id in client_has
        }
        self._finished = False  # `finish` (or `error`) sent: later records add nothing
        self._done_sent = False

    def opening(self) -> bytes:
        """The ``start`` part: the message id ties every stream of the run together."""
        return ui_part_frame({"type": "start", "messageId": self._message_id})

    def encode(self, seq: int, record: Mapping[str, Any]) -> bytes:
        """The parts of one record (often none), as frames."""
        if self._finished:
            return b""
        parts: list[dict[str, Any]] = []
        kind = record.get("type")
        if kind in ("text", "reasoning"):
            self._write(parts, kind, seq, str(record.get("text", "")))
        elif kind == "step":
            self._end_model_call(parts, record.get("tool_calls") or ())
        elif kind == "approval_required":
            use = record.get("tool_use") or {}
            call_id = str(use.get("toolUseId", ""))
            self._announce(parts, call_id, use.get("name"), use.get("input"))
            parts.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": str(record.get("approval_id", "")),
                    "toolCallId": call_id,
                }
            )
        elif kind == "tool_start":
            self._announce(
                parts, str(record.get("id", "")), record.get("name"), record.get("input")
            )
        elif kind == "tool_end":
            self._tool_end(parts, record)
        elif kind == "subagent":  # the child's record under "record" ("event" names the kind)
            data = {k: v for k, v in record.items() if k not in ("type", "event")}
            data.update(event=kind, record=record.get("event"))
            parts.append({"type": DATA_PART, "data": data, "transient": True})
        elif kind in (
            "retry", "input_injected", "partial_output", "tool_progress", "resumed", "guardrail"
        ):  # fmt: skip
            if kind == "resumed":  # the cut model call's text stays; the new one is a new part
                self._close_part(parts)
            data = {"event": kind, **{k: v for k, v in record.items() if k != "type"}}
            parts.append({"type": DATA_PART, "data": data, "transient": True})
        elif kind == "done":
            self._done(parts, record)
        elif kind == "error":
            message = str(record.get("message") or "the agent failed")
            problems = record.get("problems")
            if isinstance(problems, list) and problems:  # errorText is all useChat shows
                message += ":\n" + "\n".join(f"- {problem}" for problem in problems)
            self._close_all(parts, error_text=message)
            parts.append({"type": "error", "errorText": message})
            self._finished = True
        return b"".join(ui_part_frame(part) for part in parts)

    def keepalive(self) -> bytes:
        """An SSE comment: the SDK's event-source parser skips it."""
        return KEEPALIVE_FRAME

    def paused(self) -> bytes:
        """The end of a response at a pause: ``finish`` ``{finishReason: "tool-calls"}``.

        The client shows the approval requests; its next request carries the decisions.
        """
        parts: list[dict[str, Any]] = []
        if not self._finished:
            self._pause(parts)
        return b"".join(ui_part_frame(part) for part in parts) + self.closing()

    def closing(self) -> bytes:
        """``data: [DONE]``, once."""
        if self._done_sent:
            return b""
        self._done_sent = True
        return DONE_FRAME

    # -- steps and content parts

    def _open_step(self, parts: list[dict[str, Any]]) -> None:
        """``start-step`` for a model call that writes (ending the previous step first),
        unless its step is already open."""
        if self._in_step and not self._model_done:
            return
        if self._in_step:
            parts.append({"type": "finish-step"})
        parts.append({"type": "start-step"})
        self._in_step, self._model_done = True, False

    def _write(self, parts: list[dict[str, Any]], kind: str, seq: int, text: str) -> None:
        """A piece of text or reasoning: into the open part of its kind, or a new one."""
        if not text:
            return
        self._open_step(parts)
        if self._open is None or self._open[0] != kind:
            self._close_part(parts)
            self._open = (kind, f"{kind}-{seq}")
            parts.append({"type": f"{kind}-start", "id": self._open[1]})
        parts.append({"type": f"{kind}-delta", "id": self._open[1], "delta": text})

    def _close_part(self, parts: list[dict[str, Any]]) -> None:
        """``text-end``/``reasoning-end`` for the open part, if any."""
        if self._open is not None:
            kind, part_id = self._open
            parts.append({"type": f"{kind}-end", "id": part_id})
            self._open = None

    def _end_model_call(self, parts: list[dict[str, Any]], tool_calls: Any) -> None:
        """A ``step`` record: the model call's output is over; its calls are remembered
        (announced when they start or are asked about)."""
        self._open_step(parts)  # a model call that only asked for tools still is a step
        self._close_part(parts)
        self._model_done = True
        for call in tool_calls:
            if isinstance(call, Mapping) and "id" in call:
                self._calls.setdefault(
                    str(call["id"]), _Call(str(call.get("name", "")), call.get("input"))
                )

    def _close_step(self, parts: list[dict[str, Any]]) -> None:
        """Close the open part, then ``finish-step`` if a step is open."""
        self._close_part(parts)
        if self._in_step:
            parts.append({"type": "finish-step"})
            self._in_step = False

    # -- tool calls

    def _announce(self, parts: list[dict[str, Any]], call_id: str, name: Any, input_: Any) -> None:
        """``tool-input-available`` for a call, once per stream."""
        call = self._calls.get(call_id)
        if call is None:  # its step was before this stream began: the client may lack it
            call = self._calls[call_id] = _Call(str(name or ""), input_)
        if not call.shown:
            call.shown = True
            parts.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": call_id,
                    "toolName": call.name,
                    "input": call.input,
                }
            )

    def _tool_end(self, parts: list[dict[str, Any]], record: Mapping[str, Any]) -> None:
        """A call's output part, by its status (announced first if the client lacks it)."""
        call_id = str(record.get("id", ""))
        call = self._calls.get(call_id)
        if call is not None and not call.shown:
            self._announce(parts, call_id, call.name, call.input)
        if call is not None:
            call.answered = True
        status = record.get("status")
        output = record.get("output")
        if status == "denied":
            parts.append({"type": "tool-output-denied", "toolCallId": call_id})
        elif status == "error":
            parts.append(
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": _text(output)}
            )
        else:
            # the SDK itself writes null for a missing output: the part must keep the field
            parts.append({"type": "tool-output-available", "toolCallId": call_id, "output": output})

    def _close_all(self, parts: list[dict[str, Any]], *, error_text: str) -> None:
        """End of run: close the open part, answer the calls left open, end the step."""
        self._close_part(parts)
        for call_id, call in self._calls.items():
            if call.answered:
                continue
            self._announce(parts, call_id, call.name, call.input)
            call.answered = True
            parts.append(
                {"type": "tool-output-error", "toolCallId": call_id, "errorText": error_text}
            )
        self._close_step(parts)

    # -- ends

    def _pause(self, parts: list[dict[str, Any]]) -> None:
        """The run waits for decisions: end the step and the message, open calls stay."""
        self._close_step(parts)
        parts.append({"type": "finish", "finishReason": "tool-calls"})
        self._finished = True

    def _done(self, parts: list[dict[str, Any]], record: Mapping[str, Any]) -> None:
        """The run's end: open calls answered, ``abort`` if cancelled, then ``finish``."""
        stop_reason = record.get("stop_reason")
        if stop_reason == "paused":  # a writer that logs the paused run's Done
            self._pause(parts)
            return
        limit = record.get("usage_limit") if stop_reason == "usage_limit" else None
        # the calls left open were answered as the history answered them
        self._close_all(parts, error_text=not_run_text(str(limit)) if limit else CANCELLED_TEXT)
        if stop_reason == "cancelled":
            abort: dict[str, Any] = {"type": "abort"}
            reason = record.get("cancel_reason")
            if isinstance(reason, str) and reason:
                abort["reason"] = reason
            parts.append(abort)
        finish: dict[str, Any] = {
            "type": "finish",
            "finishReason": _FINISH_REASONS.get(str(stop_reason), "other"),
        }
        if record.get("unchecked_input"):  # the client must send it again: it is told
            finish["messageMetadata"] = {"agent_sync": end_metadata(record)}
        parts.append(finish)
        self._finished = True


def _text(output: Any) -> str:
    """A tool error's output as the ``errorText`` string."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, separators=(",", ":"), default=str)
