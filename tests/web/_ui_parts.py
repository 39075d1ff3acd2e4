"""Reading UI message streams in tests, and the rules the AI SDK client holds them to.

:func:`check_stream` replays what ``processUIMessageStream`` of the ``ai`` package (6.0)
requires of a stream, and the fields its ``uiMessageChunkSchema`` makes mandatory, so the
pure-Python tests catch what the real client would reject: a delta for a part that is not
open, an output for a call it never saw, a part after the end, a missing field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["DONE", "REQUIRED_FIELDS", "check_stream", "parse_frames", "types_of"]

DONE: Final = "[DONE]"
"""How :func:`parse_frames` shows ``data: [DONE]``."""

REQUIRED_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "start": frozenset(),
    "start-step": frozenset(),
    "finish-step": frozenset(),
    "text-start": frozenset({"id"}),
    "text-delta": frozenset({"id", "delta"}),
    "text-end": frozenset({"id"}),
    "reasoning-start": frozenset({"id"}),
    "reasoning-delta": frozenset({"id", "delta"}),
    "reasoning-end": frozenset({"id"}),
    "tool-input-available": frozenset({"toolCallId", "toolName", "input"}),
    "tool-approval-request": frozenset({"approvalId", "toolCallId"}),
    "tool-output-available": frozenset({"toolCallId", "output"}),
    "tool-output-error": frozenset({"toolCallId", "errorText"}),
    "tool-output-denied": frozenset({"toolCallId"}),
    "data-agent-sync": frozenset({"data"}),
    "error": frozenset({"errorText"}),
    "abort": frozenset(),
    "finish": frozenset(),
}
"""Each part type the encoder writes, and the fields the SDK's schema requires of it."""

_FINISH_REASONS: Final = {"stop", "length", "content-filter", "tool-calls", "error", "other"}


def parse_frames(raw: bytes) -> list[Any]:
    """The parts of a UI message stream body (comments skipped, ``[DONE]`` as a string)."""
    parts: list[Any] = []
    text = raw.decode()
    assert text.endswith("\n\n"), "a stream ends with a blank line"
    for frame in text[:-2].split("\n\n"):
        lines = frame.split("\n")
        if all(line.startswith(":") for line in lines):
            continue
        assert len(lines) == 1 and lines[0].startswith("data: "), frame
        payload = lines[0][len("data: ") :]
        parts.append(DONE if payload == DONE else json.loads(payload))
    return parts


def types_of(parts: Iterable[Any]) -> list[str]:
    """The part types, ``[DONE]`` included."""
    return [part if part == DONE else part["type"] for part in parts]


def check_stream(parts: list[Any], *, client_has: Iterable[str] = ()) -> set[str]:
    """Assert the stream is one the AI SDK client takes; the tool calls it announced.

    Args:
        parts: From :func:`parse_frames`.
        client_has: Tool call ids the client's message already holds (earlier streams of
            the same message).
    """
    assert parts and parts[0]["type"] == "start" and isinstance(parts[0].get("messageId"), str)
    assert parts[-1] == DONE and parts.count(DONE) == 1
    known, announced = set(client_has), set()
    active: dict[str, str] = {}  # part id -> "text" | "reasoning"
    in_step, ended = False, False
    for part in parts[:-1]:
        kind = part["type"]
        assert not ended, f"{kind} after the end"
        assert kind in REQUIRED_FIELDS, f"unexpected part {kind}"
        missing = REQUIRED_FIELDS[kind] - set(part)
        assert not missing, f"{kind} lacks {sorted(missing)}"
        if kind == "start-step":
            assert not in_step, "start-step inside a step"
            in_step = True
        elif kind == "finish-step":
            assert in_step, "finish-step outside a step"
            in_step = False
            active.clear()  # what the client does
        elif kind.endswith("-start") and kind != "start-step":
            assert in_step, f"{kind} outside a step"
            assert part["id"] not in active
            active[part["id"]] = kind.split("-")[0]
        elif kind.endswith(("-delta", "-end")):
            assert active.get(part["id"]) == kind.split("-")[0], f"{kind} for no open part"
            if kind.endswith("-end"):
                del active[part["id"]]
        elif kind == "tool-input-available":
            # announced again, the client resets the call's state and calls onToolCall
            # again (the AI SDK's own server never re-announces a call)
            assert part["toolCallId"] not in known, f"call {part['toolCallId']} announced again"
            known.add(part["toolCallId"])
            announced.add(part["toolCallId"])
        elif kind.startswith("tool-"):
            assert part["toolCallId"] in known, f"{kind} for a call the client lacks"
        elif kind == "finish":
            assert part.get("finishReason", "other") in _FINISH_REASONS
            assert not active and not in_step, "finish with a part or step open"
            ended = True
        elif kind == "error":
            ended = True
        elif kind == "data-agent-sync":
            assert part.get("transient") is True
    assert ended, "the stream must end with finish or error"
    return announced
