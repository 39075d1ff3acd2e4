"""The rules a Converse history, a prompt and a tool result's content are checked against.

One set of block rules serves :func:`agent_sync.messages.validate_history`
(``Agent(messages=...)``, ``agent.messages = ...``), :func:`agent_sync.messages.validate_prompt`
(``invoke(prompt)``), :func:`agent_sync.repair_history` (which keeps the blocks they accept)
and tool-result normalisation (:mod:`agent_sync.tools._results`): what passes them is content
every provider translator accepts. The checks are type checks plus one ``json.dumps`` per JSON
value, so validating a long history stays cheap. The shapes themselves are the TypedDicts of
:mod:`agent_sync.messages`; this module works on plain values (what a caller sends is not
yet known to have them) and imports nothing of the package but :mod:`agent_sync._encodable`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ._encodable import encoding_problem

__all__ = [
    "block_problem",
    "history_problems",
    "json_problem",
    "prompt_problems",
    "tool_result_piece_problem",
]

_STRICT_JSON = json.JSONEncoder(allow_nan=False)  # what every provider's JSON encoder accepts
_PROMPT_KINDS = frozenset({"text", "image", "document"})
# Converse block kinds that only Bedrock sends on (Anthropic and OpenAI drop them): accepted
# as dicts, their fields are Bedrock's to check.
_BEDROCK_KINDS = frozenset(
    {"video", "audio", "guardContent", "cachePoint", "citationsContent", "searchResult"}
)
_KINDS = _PROMPT_KINDS | _BEDROCK_KINDS | {"toolUse", "toolResult", "reasoningContent"}


def history_problems(messages: Sequence[Any]) -> list[str]:
    """The problems :func:`agent_sync.messages.validate_history` reports (its docstring states
    the rules); empty when the history is valid. Never raises."""
    problems: list[str] = []
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        return [f"a history is a list of messages, not {type(messages).__name__}"]
    pending: dict[str, str] = {}  # toolUseId -> tool name, awaiting a result
    previous_role: str | None = None
    for index, message in enumerate(messages):
        where = f"message {index}"
        if not isinstance(message, dict):
            problems.append(f"{where}: not a dict")
            continue
        role = message.get("role")
        content = message.get("content")
        if role not in ("user", "assistant"):
            problems.append(f"{where}: role {_short(role)} is not 'user' or 'assistant'")
            role = None
        if not isinstance(content, list) or not content:
            problems.append(f"{where}: content must be a non-empty list")
            content = []
        if previous_role is None and role == "assistant":
            problems.append(f"{where}: the history must start with a user message")
        elif role is not None and role == previous_role:
            problems.append(f"{where}: two {role} messages in a row")
        previous_role = role if role is not None else previous_role

        answered: set[str] = set()
        used_here: set[str] = set()
        for position, block in enumerate(content):
            spot = f"{where} block {position}"
            problem = block_problem(block, role) or encoding_problem(block)
            if problem is not None:
                problems.append(f"{spot}: {problem}")
                continue
            if "toolUse" in block:
                tool_use_id = block["toolUse"]["toolUseId"]
                if tool_use_id in used_here:
                    problems.append(f"{spot}: toolUseId {tool_use_id!r} used twice")
                used_here.add(tool_use_id)
            elif "toolResult" in block:
                tool_use_id = block["toolResult"]["toolUseId"]
                if tool_use_id in answered:
                    problems.append(f"{spot}: toolUse {tool_use_id!r} answered twice")
                elif tool_use_id not in pending:
                    problems.append(f"{spot}: toolResult {tool_use_id!r} answers no toolUse")
                else:
                    answered.add(tool_use_id)
        if role == "assistant":
            _report_unanswered(pending, answered=set(), where=where, problems=problems)
            pending = {
                block["toolUse"]["toolUseId"]: block["toolUse"].get("name", "?")
                for block in content
                if isinstance(block, dict)
                and isinstance(block.get("toolUse"), dict)
                and isinstance(block["toolUse"].get("toolUseId"), str)
            }
        else:
            _report_unanswered(pending, answered, where, problems)
            pending = {}
    _report_unanswered(pending, set(), "end of history", problems)
    return problems


def prompt_problems(blocks: Sequence[Any]) -> list[str]:
    """The problems :func:`agent_sync.messages.validate_prompt` reports: a prompt is a
    non-empty list of ``text``, ``image`` or ``document`` blocks, not blank text only. Never
    raises."""
    if isinstance(blocks, (str, bytes, dict)) or not isinstance(blocks, Sequence) or not blocks:
        return ["a prompt is a str or a non-empty list of content blocks"]
    problems: list[str] = []
    for position, block in enumerate(blocks):
        spot = f"prompt block {position}"
        kind = next(iter(block)) if isinstance(block, dict) and len(block) == 1 else None
        if kind in _KINDS and kind not in _PROMPT_KINDS:
            problem: str | None = (
                f"a {kind} block cannot be part of a prompt (text, image or document)"
            )
        else:
            problem = block_problem(block, "user")
        if problem is not None:
            problems.append(f"{spot}: {problem}")
    if not problems and all("text" in b and not b["text"].strip() for b in blocks):
        problems.append("the prompt is empty (blank text only)")
    return problems


def tool_result_piece_problem(piece: Any) -> str | None:
    """What is wrong with one ``toolResult`` content piece, or ``None`` if it is valid.

    The one rule shared by tool-result normalisation and :func:`history_problems`: a piece
    is a dict with exactly one key, ``text`` (a ``str``), ``json`` (a value that
    ``json.dumps`` accepts, without NaN or infinities) or ``image`` (as an image block's).
    """
    if not isinstance(piece, dict) or len(piece) != 1:
        return "a piece is a dict with exactly one key, 'text' or 'json'"
    if "text" in piece:
        if not isinstance(piece["text"], str):
            return f"text must be a string, not {type(piece['text']).__name__}"
        return None
    if "json" in piece:
        return json_problem(piece["json"], "json")
    if "image" in piece:
        return _check_image(piece["image"], "user")
    return f"unknown piece kind {_short(next(iter(piece)))} (use 'text' or 'json')"


def json_problem(value: Any, what: str) -> str | None:
    """Why ``value`` cannot be sent as JSON (``what`` names it), or ``None`` if it can."""
    try:
        _STRICT_JSON.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        found = encoding_problem(value)  # a NaN or an infinity, and where
        if found is not None:
            return f"{what} is not JSON-serialisable: {found}"
        return f"{what} is not JSON-serialisable ({type(exc).__name__})"
    return None


def block_problem(block: Any, role: Any) -> str | None:
    """What is wrong with one content block of a ``role`` message, or ``None`` if a provider
    accepts it: a dict with exactly one known kind, holding what that kind holds (the rules
    :func:`agent_sync.messages.validate_history` states). Lone surrogates in its strings are
    :func:`agent_sync._encodable.encoding_problem`'s to find."""
    if not isinstance(block, dict) or len(block) != 1:
        return "a block is a dict with exactly one key"
    kind = next(iter(block))
    if kind not in _KINDS:
        return f"unknown block kind {_short(kind)}"
    check = _BLOCK_CHECKS.get(kind)
    if check is not None:
        return check(block[kind], role)
    return None if isinstance(block[kind], dict) else f"{kind} must be a dict"


def _check_text(text: Any, role: Any) -> str | None:
    return None if isinstance(text, str) else f"text must be a string, not {type(text).__name__}"


def _tool_block_problem(kind: str, value: Any, role: Any, expected_role: str) -> str | None:
    """The rule a ``toolUse`` and a ``toolResult`` share: the right role, a dict, an id."""
    if role != expected_role:
        return f"{kind} in a {role} message"
    if not isinstance(value, dict):
        return f"{kind} must be a dict"
    tool_use_id = value.get("toolUseId")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        return f"{kind} without a toolUseId"
    return None


def _check_tool_use(tool_use: Any, role: Any) -> str | None:
    problem = _tool_block_problem("toolUse", tool_use, role, "assistant")
    if problem is not None:
        return problem
    if not isinstance(tool_use.get("name"), str):
        return "toolUse without a name"
    tool_input = tool_use.get("input")
    if not isinstance(tool_input, dict):
        return "toolUse input must be a JSON object"
    return json_problem(tool_input, "toolUse input")


def _check_tool_result(result: Any, role: Any) -> str | None:
    problem = _tool_block_problem("toolResult", result, role, "user")
    if problem is not None:
        return problem
    if result.get("status", "success") not in ("success", "error"):
        return "toolResult status must be 'success' or 'error'"
    content = result.get("content")
    if not isinstance(content, list):
        return "toolResult content must be a list"
    for position, piece in enumerate(content):
        problem = tool_result_piece_problem(piece)
        if problem is not None:
            return f"toolResult content piece {position}: {problem}"
    return None


def _check_reasoning(reasoning: Any, role: Any) -> str | None:
    if role != "assistant":
        return f"reasoningContent in a {role} message"
    if not isinstance(reasoning, dict) or len(reasoning) != 1:
        return "reasoningContent is a dict with one key, 'reasoningText' or 'redactedContent'"
    if "redactedContent" in reasoning:
        if not isinstance(reasoning["redactedContent"], (bytes, str)):
            return "reasoningContent redactedContent must be bytes or str"
        return None
    text = reasoning.get("reasoningText")
    if not isinstance(text, dict) or not isinstance(text.get("text", ""), str):
        return "reasoningContent reasoningText must be a dict with a str 'text'"
    if not isinstance(text.get("signature", ""), str) or set(text) - {"text", "signature"}:
        return "reasoningContent reasoningText takes 'text' and 'signature' (str) only"
    return None


def _check_media(kind: str, value: Any, names: tuple[str, ...]) -> str | None:
    if not isinstance(value, dict):
        return f"{kind} must be a dict"
    for name in names:
        if not isinstance(value.get(name), str) or not value[name]:
            return f"{kind} needs a {name!r} (str)"
    source = value.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("bytes"), (bytes, str)):
        return f"{kind} needs a source {{'bytes': bytes or base64 str}}"
    return None


def _check_image(image: Any, role: Any) -> str | None:
    return _check_media("image", image, ("format",))


def _check_document(document: Any, role: Any) -> str | None:
    return _check_media("document", document, ("format", "name"))


_BLOCK_CHECKS: dict[str, Callable[[Any, Any], str | None]] = {
    "text": _check_text,
    "toolUse": _check_tool_use,
    "toolResult": _check_tool_result,
    "reasoningContent": _check_reasoning,
    "image": _check_image,
    "document": _check_document,
}


def _short(value: Any) -> str:
    """A bounded repr for problem messages (never raises)."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not break validation
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _report_unanswered(
    pending: dict[str, str], answered: set[str], where: str, problems: list[str]
) -> None:
    for tool_use_id, name in pending.items():
        if tool_use_id not in answered:
            problems.append(f"{where}: toolUse {tool_use_id!r} ({name}) has no toolResult")
