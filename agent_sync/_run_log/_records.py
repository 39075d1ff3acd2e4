"""Records: what a web run stores in its event log, one per native SSE frame.

A run served by the chat routes appends, for each event worth telling a client, one
**record** (a JSON object with a ``type``) to its store's event log (``store.append_events``)
before anyone is sent it. The record holds enough to encode both protocols: the native
frame (:func:`native_frame`: ``id: <run_id>:<seq>``, ``event: <type>``, the record's other
fields as ``data``, minus those only the AI SDK encoder reads) and the AI SDK UI message
stream parts (:mod:`agent_sync.web._ui_stream`). Encoding is a pure function of the record
and its number, so a replay on any worker is the same bytes.

Records, in the order a run makes them:

==================  =====================================================================
``run``             ``{"run_id", "conversation_id"}``: the first, once per run
``text``            ``{"text"}``: a piece of the answer
``reasoning``       ``{"text"}``: a piece of visible reasoning
``retry``           ``{"attempt", "delay", "error"}``: a throttled call is retried
``step``            ``{"cycle", "tool_calls": [{"id", "name", "input"}]}``: a model call
                    ended; the tool calls it asked for (empty for a final answer)
``approval_required``  ``{"run_id", "approval_id", "tool_use": {"toolUseId", "name",
                    "input"}, "schema", "expires_at"}``: one per pending request, appended
                    together once the pause is committed
``tool_start``      ``{"id", "name", "input"}``
``tool_progress``   ``{"id", "progress", "total", "message"}``: a running call's progress
``tool_end``        ``{"id", "name", "status", "duration_s"}`` (``status``: ``success``,
                    ``error``, or ``denied`` for a call a reviewer denied) and ``output``
                    (AI SDK only: a lone text block as a string, a lone JSON block as its
                    value, else the blocks without binary data)
``input_injected``  ``{"content": [blocks]}``: injected input went out (no binary data)
``partial_output``  ``{"partial"}``: the structured answer so far (``output_type``; a
                    growing answer's partials are kept geometrically, see ``_partials``)
``resumed``         ``{"run_id", "cycle"}``: the run's worker died and another goes on
                    from its last committed step (``on_owner_lost="resume"``): the text,
                    reasoning and partial output since the last ``step`` record are void
                    (that model call is made again); a call started before it is run
                    again (no second ``tool_start``) or ends with an error ``tool_end``
``subagent``        ``{"run_id", "parent_run_id", "tool_use_id", "event": {record}}``: a
                    sub-agent's record (``agent.as_tool()``): ``run_id`` is the child run,
                    ``event`` the record its event makes (a ``step`` there has no
                    ``cycle``; a grandchild's is a ``subagent`` record in it; the child's
                    ``done`` comes too)
``guardrail``       ``{"name", "stage", "reason"}``: a guardrail tripped (``done`` follows)
``done``            ``{"run_id", "stop_reason", "cancel_reason", "usage", "text",
                    "usage_limit"?, "guardrail"?, "output"?, "unchecked_input"?}``: last
                    (``usage_limit``: the limit that stopped a ``"usage_limit"`` run;
                    ``guardrail``: the trip ``{"name", "stage", "reason", "run_id"}`` of a
                    ``"guardrail"`` run; ``output``: with an ``output_type``, the validated
                    answer as JSON; ``unchecked_input``: injected input the run handed back,
                    its input guardrails never passed it, as ``input_injected`` blocks)
``error``           ``{"error", "message", "retryable", "status"?, "problems"?}``: last,
                    the run failed (``StoreUnavailable``/``StoreError``: its records could
                    not be stored; ``OutputValidationError``: ``problems``, one line per
                    field of the last answer that did not validate)
==================  =====================================================================

A pause is not an end: after ``approval_required`` the log waits for the resumed run's
records. ``done`` or ``error`` is the log's last record, appended once the conversation is
released (a client that reacts to it by sending its next message is not refused).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from .._encodable import Unencodable, clean_json, clean_text
from .._run_state import RunSnapshot
from ..errors import ModelError, ModelHTTPError, OutputValidationError, StoreUnavailableError
from ..events import (
    AgentEvent,
    ApprovalRequired,
    Done,
    GuardrailTripped,
    InputInjected,
    MessageComplete,
    ModelRetry,
    PartialOutput,
    ReasoningDelta,
    SubAgentEvent,
    TextDelta,
    ToolEnd,
    ToolProgress,
    ToolStart,
    end_summary,
)
from ..messages import CANCELLED_TEXT

__all__ = [
    "TERMINAL_TYPES",
    "cancelled_tool_ends",
    "resumed_record",
    "closing_record",
    "done_record",
    "done_summary",
    "error_record",
    "event_id",
    "is_terminal",
    "log_failure_record",
    "native_frame",
    "parse_event_id",
    "records_of",
    "run_record",
]

logger = logging.getLogger(__name__)

TERMINAL_TYPES: Final = frozenset({"done", "error"})
"""A log whose last record has one of these types is complete."""

_MAX_PROBLEMS: Final = 50
"""The most problems an ``OutputValidationError`` record lists."""
_AI_SDK_ONLY: Final = {"tool_end": frozenset({"output"})}
"""Record fields the native frames leave out, by record type: tool output is not sent to
``EventSource`` clients (it may hold data not meant for the browser); the AI SDK protocol
carries it. (A ``done`` record's ``output`` is the run's answer: every client gets it.)"""


def run_record(run_id: str, conversation_id: str) -> dict[str, Any]:
    """The first record of a run."""
    return {"type": "run", "run_id": run_id, "conversation_id": conversation_id}


def records_of(
    event: AgentEvent, *, cycle: int, denied: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The records an agent event makes (none for ``Done``: see :func:`done_record`).

    Args:
        event: An event of ``agent.stream()`` or ``agent.resume_stream()``.
        cycle: The number of model calls so far (for ``step``).
        denied: ``toolUseId`` of the calls a reviewer denied (their ``tool_end`` says so).
    """
    if isinstance(event, (TextDelta, ReasoningDelta)):
        return [{"type": event.type, "text": event.text}]
    if isinstance(event, MessageComplete):
        if event.message["role"] != "assistant":
            return []
        calls = [
            {"id": use["toolUseId"], "name": use["name"], "input": use["input"]}
            for block in event.message["content"]
            if (use := block.get("toolUse")) is not None
        ]
        return [{"type": "step", "cycle": cycle, "tool_calls": calls}]
    if isinstance(event, ToolStart):
        use = event.tool_use
        return [
            {
                "type": "tool_start",
                "id": use["toolUseId"],
                "name": use["name"],
                "input": use["input"],
            }
        ]
    if isinstance(event, ToolProgress):
        return [progress_record(event)]
    if isinstance(event, ToolEnd):
        use = event.tool_use
        status: str = event.result.get("status", "success")
        if use["toolUseId"] in denied:
            status = "denied"
        return [
            {
                "type": "tool_end",
                "id": use["toolUseId"],
                "name": use["name"],
                "status": status,
                "duration_s": round(event.duration_s, 3),
                "output": _output(event.result.get("content", [])),
            }
        ]
    if isinstance(event, ModelRetry):
        return [
            {"type": "retry", "attempt": event.attempt, "delay": event.delay, "error": event.error}
        ]
    if isinstance(event, GuardrailTripped):
        return [
            {"type": "guardrail", "name": event.name, "stage": event.stage, "reason": event.reason}
        ]
    if isinstance(event, PartialOutput):
        return [{"type": "partial_output", "partial": event.partial}]
    if isinstance(event, InputInjected):
        return [{"type": "input_injected", "content": public_blocks(event.content)}]
    if isinstance(event, SubAgentEvent):
        return [
            {
                "type": "subagent",
                "run_id": event.run_id,
                "parent_run_id": event.parent_run_id,
                "tool_use_id": event.tool_use_id,
                "event": record,
            }
            for record in _child_records(event.event)
        ]
    if isinstance(event, ApprovalRequired):
        return [
            {
                "type": "approval_required",
                "run_id": event.run_id,
                "approval_id": request.id,
                "tool_use": {
                    "toolUseId": request.tool_use["toolUseId"],
                    "name": request.tool_use["name"],
                    "input": request.tool_use["input"],
                },
                "schema": request.schema,
                "expires_at": request.expires_at,
            }
            for request in event.approvals
        ]
    return []


def _child_records(event: AgentEvent) -> list[dict[str, Any]]:
    """The records a sub-agent's event makes inside its ``subagent`` record."""
    if isinstance(event, Done):
        return [done_record(event)]
    records = records_of(event, cycle=0)
    for record in records:
        if record["type"] == "step":
            del record["cycle"]  # the child's model calls are not counted here
    return records


def resumed_record(run_id: str, cycle: int) -> dict[str, Any]:
    """The record a recovered run's log goes on with (see the table above)."""
    return {"type": "resumed", "run_id": run_id, "cycle": cycle}


def cancelled_tool_ends(calls: Mapping[str, str]) -> list[dict[str, Any]]:
    """``tool_end`` records for calls that started but got no ``ToolEnd`` (the run was cut
    short: the history answers each with "Cancelled by user")."""
    return [
        {
            "type": "tool_end",
            "id": call_id,
            "name": name,
            "status": "error",
            "duration_s": 0.0,
            "output": CANCELLED_TEXT,
        }
        for call_id, name in calls.items()
    ]


def done_summary(event: Done) -> dict[str, Any]:
    """A ``Done`` event as the web sends it (the ``done`` SSE frame, the done record):
    :meth:`Done.to_dict`, and ``unchecked_input`` when the run handed injected input back
    (its input guardrails never passed it), as ``input_injected`` shows blocks."""
    return _handing_back(event.to_dict(), event.result.unchecked_input)


def _handing_back(summary: dict[str, Any], unchecked: Sequence[Any]) -> dict[str, Any]:
    """A run's end summary with the input it handed back (``unchecked_input``, when there
    is any): the one place both ends of a log (its writer's, the store's) add it."""
    if unchecked:
        summary["unchecked_input"] = public_blocks(unchecked)
    return summary


def done_record(event: Done) -> dict[str, Any]:
    """The last record of a run that ended (not paused); a run with an ``output_type``
    adds ``output``: its validated answer as JSON (``null`` if it ended without one); a
    run that handed injected input back adds ``unchecked_input`` (:func:`done_summary`:
    the client sends it again)."""
    record = {"type": "done", **done_summary(event)}
    output = event.result.output
    if isinstance(output, str) and output == record["text"]:
        return record  # no output type: the output is the text, sent once
    try:
        record["output"] = clean_json(output, what="the output", convert=True)
    except Unencodable as exc:
        logger.warning("run_id=<%s> | the output has no JSON form: %s", event.run_id, exc)
    return record


def error_record(exc: BaseException) -> dict[str, Any]:
    """The last record of a run that failed, safe to show: a model error's own message
    (built from the provider's error body, never from request headers), a store outage as
    such, anything else generic (its text could hold anything; it goes to the server log
    only)."""
    if isinstance(exc, StoreUnavailableError):
        return dict(_STORE_UNAVAILABLE)
    if isinstance(exc, OutputValidationError):
        # the problems name fields of the model's own answer, which the client was shown
        return {
            "type": "error",
            "error": "OutputValidationError",
            "message": "the answer did not match the required output",
            "problems": [clean_text(problem) for problem in exc.errors[:_MAX_PROBLEMS]],
            "retryable": True,
        }
    if isinstance(exc, ModelError):
        record: dict[str, Any] = {
            "type": "error",
            "error": type(exc).__name__,
            "message": exc.message,
            "retryable": exc.retryable,
        }
        if isinstance(exc, ModelHTTPError) and exc.status is not None:
            record["status"] = exc.status
        return record
    return {
        "type": "error",
        "error": "InternalError",
        "message": "the agent failed",
        "retryable": False,
    }


def log_failure_record(exc: BaseException) -> dict[str, Any]:
    """The last record of a run whose records could not be stored (its log is cut short):
    the store is unavailable, or it refused a record."""
    if isinstance(exc, StoreUnavailableError):
        return dict(_STORE_UNAVAILABLE)
    return {
        "type": "error",
        "error": "StoreError",
        "message": "the answer could not be stored; the run was stopped",
        "retryable": False,
    }


_STORE_UNAVAILABLE: Final = {
    "type": "error",
    "error": "StoreUnavailable",
    "message": "the run store is unavailable; the answer could not be stored",
    "retryable": True,
}


def closing_record(snapshot: RunSnapshot) -> dict[str, Any]:
    """The last record of a run that ended without its writer telling (it was cancelled
    while paused, or its worker died): what the store knows of the end, and the input it
    handed back (a cancelled run's queued input that its input checks never passed)."""
    if snapshot.status == "failed":
        # What the store knows: the run failed before its end reached the log. Its worker
        # may have died, or lost the store meanwhile (a live writer that saw the store fail
        # appends a StoreUnavailable record itself, once the store is back).
        return {
            "type": "error",
            "error": "RunFailed",
            "message": "the run stopped before its answer was stored "
            "(its worker stopped, or the run store was unavailable)",
            "retryable": True,
        }
    summary = end_summary(
        snapshot.run_id,
        snapshot.stop_reason or ("cancelled" if snapshot.status == "cancelled" else "end_turn"),
        snapshot.cancel_reason,
        snapshot.usage,
        "",
        usage_limit=snapshot.usage_limit,
        guardrail=snapshot.guardrail.to_dict() if snapshot.guardrail is not None else None,
    )
    # an ended run's queued input was never sent: its input checks never passed it
    # (RunState.queued_on_cancel): handed back
    unchecked = [block for blocks in snapshot.queued_inputs for block in blocks]
    return {"type": "done", **_handing_back(summary, unchecked)}


def is_terminal(record: Mapping[str, Any]) -> bool:
    """Whether this record ends its log."""
    return record.get("type") in TERMINAL_TYPES


def event_id(run_id: str, seq: int) -> str:
    """A frame's SSE id: ``<run_id>:<seq>``."""
    return f"{run_id}:{seq}"


def parse_event_id(value: str) -> tuple[str, int] | None:
    """``(run_id, seq)`` of an SSE id, or ``None`` if it is not one of ours."""
    run_id, sep, number = value.strip().rpartition(":")
    if not sep or not run_id or not (number.isascii() and number.isdigit()) or len(number) > 12:
        return None
    return run_id, int(number)


def native_frame(run_id: str, seq: int, record: Mapping[str, Any]) -> bytes:
    """The native SSE frame of a stored record: ``id``, ``event`` and one JSON ``data`` line.

    ``json.dumps`` escapes every control character, so the payload is one line and cannot
    inject SSE fields; a record read back from the store encodes to the same bytes.
    """
    data = _native_fields(record)
    data.pop("type", None)
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"id: {event_id(run_id, seq)}\nevent: {record['type']}\ndata: {payload}\n\n".encode()


def _native_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without the fields only the AI SDK encoder reads, nested records too (a
    sub-agent's ``tool_end`` in a ``subagent`` record keeps its output to itself)."""
    hidden = _AI_SDK_ONLY.get(record.get("type"))  # type: ignore[arg-type]
    if hidden is None:
        data = dict(record)
    else:
        data = {key: value for key, value in record.items() if key not in hidden}
    nested = data.get("event")
    if data.get("type") == "subagent" and isinstance(nested, Mapping):
        data["event"] = _native_fields(nested)
    return data


def public_blocks(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """Content blocks as a client may see them: text and JSON as they are, media and
    documents by their format and name only (no binary data)."""
    shown: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if "text" in block:
            shown.append({"text": block["text"]})
        elif "json" in block:
            shown.append({"json": block["json"]})
        else:
            for kind in ("image", "document", "video"):
                media = block.get(kind)
                if isinstance(media, Mapping):
                    shown.append({kind: {k: media[k] for k in ("format", "name") if k in media}})
                    break
    return shown


def _output(content: Sequence[Any]) -> Any:
    """A tool result's content for the AI SDK's ``output``: a lone text block as a string,
    a lone JSON block as its value, else the blocks without binary data."""
    if len(content) == 1 and isinstance(content[0], Mapping):
        only = content[0]
        if "text" in only:
            return only["text"]
        if "json" in only:
            return only["json"]
    return public_blocks(content)


def progress_record(event: ToolProgress) -> dict[str, Any]:
    """The ``tool_progress`` record (and SSE frame data) of a ``ToolProgress`` event."""
    return {
        "type": "tool_progress",
        "id": event.tool_use_id,
        "progress": event.progress,
        "total": event.total,
        "message": event.message,
    }
