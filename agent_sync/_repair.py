"""``repair_history``: the explicit way to accept a damaged history.

``Agent(messages=...)`` and ``agent.messages = ...`` refuse a history that breaks the
invariant (:func:`~agent_sync.validate_history`); a history saved by other code, edited by
hand or cut off mid-turn can be passed through :func:`repair_history` first. The repair is
done in passes, each of which keeps what the earlier ones established:

1. blocks: each message keeps the blocks that :func:`validate_history` accepts for its
   role; blank text is filled; messages that are not messages are dropped;
2. roles: empty messages are dropped and same-role neighbours merged;
3. tools: every ``toolUse`` gets exactly one ``toolResult`` in the next user message (an
   error result when none was recorded); results that answer nothing, or answer twice, are
   dropped; a second ``toolUse`` with the same id in one message is dropped;
4. roles again (dropping orphan results can empty a message), and a history that starts
   with the assistant gets a placeholder user message first.

It repairs Converse histories only. A message of another shape is not damage to drop: a
``system``/``tool`` message or OpenAI-style ``tool_calls`` (the OpenAI Chat Completions
shape) raises :class:`~agent_sync.errors.UsageError` naming the shape expected, and text
given as a plain string (``"content": "hi"``) becomes a text block. So a repair never loses
a message silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._encodable import clean_content
from ._message_checks import block_problem
from .errors import UsageError
from .messages import ContentBlock, Message
from .tools._results import error_result

__all__ = ["repair_history"]

MISSING_RESULT_TEXT = "No result was recorded for this tool call."
"""The error result given to a ``toolUse`` whose result is missing."""
BLANK_TEXT = "(empty)"
"""What blank text is filled with (providers reject empty text blocks)."""
START_TEXT = "(conversation start)"
"""The user message put before a history that starts with the assistant."""


def repair_history(messages: Sequence[Any]) -> list[Message]:
    """A valid copy of ``messages``, repaired as little as possible.

    Orphan ``toolUse`` blocks are answered with an error result, orphan ``toolResult``
    blocks dropped, same-role neighbours merged, blank text filled, and blocks a provider
    would reject (see :func:`~agent_sync.validate_history`) dropped. The input is not
    modified. ``validate_history(repair_history(h)) == []`` for every list ``h``.

    Args:
        messages: A history, possibly damaged.

    Returns:
        A new, valid history (possibly empty).

    Raises:
        UsageError: ``messages`` is not a list (or other sequence) of messages, or holds a
            message of another shape (a ``system`` or ``tool`` message, OpenAI-style
            ``tool_calls``): the error names the message and the shape expected.
    """
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
        raise UsageError(f"a history is a list of messages, not {type(messages).__name__}")
    for index, item in enumerate(messages):
        problem = _foreign_shape(item)
        if problem is not None:
            raise UsageError(f"message {index}: {problem}. {EXPECTED_SHAPE}")
    cleaned = [m for m in (_clean_message(item) for item in messages) if m is not None]
    merged = _merge_roles(cleaned)
    paired = _pair_tools(merged)
    repaired = _merge_roles(paired)
    if repaired and repaired[0]["role"] == "assistant":
        repaired.insert(0, {"role": "user", "content": [{"text": START_TEXT}]})
    return repaired


EXPECTED_SHAPE = (
    "repair_history takes a Converse history: "
    '{"role": "user" | "assistant", "content": [{"text": "..."}, ...]} messages '
    "(system text goes to Agent(system_prompt=...); tool calls are toolUse/toolResult blocks)"
)
"""The shape named by the error for a message of another shape."""

_FOREIGN_KEYS = ("tool_calls", "function_call", "tool_call_id")  # OpenAI Chat Completions


def _foreign_shape(item: Any) -> str | None:
    """Why ``item`` is a message of another API's shape (not damage to repair), if it is."""
    if not isinstance(item, dict):
        return None
    role = item.get("role")
    if isinstance(role, str) and role not in ("user", "assistant"):
        return f"a {role!r} message has no place in a Converse history"
    foreign = [key for key in _FOREIGN_KEYS if key in item]
    if foreign:
        return f"{foreign[0]!r} is the OpenAI message shape"
    content = item.get("content")
    if isinstance(content, list) and any(
        isinstance(block, dict) and "type" in block for block in content
    ):
        return 'content parts with a "type" are the OpenAI/Anthropic shape'
    return None


def _clean_message(item: Any) -> Message | None:
    if not isinstance(item, dict) or item.get("role") not in ("user", "assistant"):
        return None
    role = item["role"]
    content = item.get("content")
    if isinstance(content, str):  # text as a plain string: its one text block
        content = [{"text": content}]
    if not isinstance(content, list):
        return None
    blocks: list[ContentBlock] = []
    for block in content:
        if block_problem(block, role) is not None:
            continue
        try:
            block = clean_content(block)  # a copy, lone surrogates replaced
        except Exception:  # noqa: BLE001 - a NaN or a value with no JSON form: not storable
            continue
        if "text" in block and not block["text"].strip():
            block["text"] = BLANK_TEXT
        blocks.append(block)
    return {"role": role, "content": blocks}


def _merge_roles(messages: list[Message]) -> list[Message]:
    merged: list[Message] = []
    for message in messages:
        if not message["content"]:
            continue
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(message["content"])
        else:
            merged.append(message)
    return merged


def _pair_tools(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    pending: list[str] = []  # toolUseIds of the last assistant message, in order
    for message in messages:  # roles alternate here (_merge_roles ran first)
        if message["role"] == "assistant":
            message, pending = _dedupe_tool_uses(message)
            out.append(message)
            continue
        out.append(_answer(message, pending))
        pending = []
    if pending:
        out.append(_results_message(pending, []))
    return out


def _dedupe_tool_uses(message: Message) -> tuple[Message, list[str]]:
    seen: list[str] = []
    blocks: list[ContentBlock] = []
    for block in message["content"]:
        if "toolUse" in block:
            tool_use_id = block["toolUse"]["toolUseId"]
            if tool_use_id in seen:
                continue
            seen.append(tool_use_id)
        blocks.append(block)
    return {"role": "assistant", "content": blocks}, seen


def _answer(message: Message, pending: list[str]) -> Message:
    """``message`` (a user message) carrying exactly one result per pending id, first."""
    answered: dict[str, ContentBlock] = {}
    others: list[ContentBlock] = []
    for block in message["content"]:
        if "toolResult" in block:
            tool_use_id = block["toolResult"]["toolUseId"]
            if tool_use_id in pending and tool_use_id not in answered:
                answered[tool_use_id] = block
        else:
            others.append(block)
    return _results_message(pending, others, answered)


def _results_message(
    pending: list[str],
    others: list[ContentBlock],
    answered: dict[str, ContentBlock] | None = None,
) -> Message:
    answered = answered or {}
    results: list[ContentBlock] = [
        answered.get(i) or {"toolResult": error_result(i, MISSING_RESULT_TEXT)} for i in pending
    ]
    return {"role": "user", "content": results + others}
