"""Converse-shaped messages, content blocks, tool specs and model stream events.

Every history agent_sync keeps or accepts has the Bedrock Converse shape, so it can be sent
to any provider (each provider translates) and stored as JSON::

    {"role": "user" | "assistant", "content": [block, ...]}

Model providers yield :data:`StreamEvent` dicts, the shapes of Bedrock's ``ConverseStream``
events; :mod:`agent_sync.run._assemble` assembles them into an assistant :class:`Message`.

:func:`validate_history` checks the history invariant the agent guarantees after every
return of ``invoke`` (see ``docs/cancellation.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict, Union

from ._encodable import encoding_problem

__all__ = [
    "CANCELLED_TEXT",
    "ContentBlock",
    "Message",
    "ReasoningContent",
    "Role",
    "StopReason",
    "StreamEvent",
    "ToolResult",
    "ToolResultContent",
    "ToolSpec",
    "ToolUse",
    "Usage",
    "validate_history",
    "validate_prompt",
]

CANCELLED_TEXT = "Cancelled by user"
"""Text written into the history wherever a cancellation cut a turn short."""

Role = Literal["user", "assistant"]

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "guardrail_intervened",
    "content_filtered",
]
"""Stop reasons a model stream reports (``messageStop.stopReason``)."""


class ToolUse(TypedDict):
    """A tool call requested by the model.

    Attributes:
        toolUseId: Unique id; the matching ``toolResult`` carries the same id.
        name: Tool name.
        input: Arguments, a JSON object.
    """

    toolUseId: str
    name: str
    input: dict[str, Any]


class ToolResultContent(TypedDict, total=False):
    """One piece of a tool result: exactly one of the keys.

    Attributes:
        text: Plain text.
        json: Any JSON-serialisable value.
        image: ``{"format": "png"|..., "source": {"bytes": ...}}`` (an MCP tool's image;
            providers that take no images in tool results get a text placeholder).
    """

    text: str
    json: Any
    image: dict[str, Any]


class _ToolResultRequired(TypedDict):
    toolUseId: str
    content: list[ToolResultContent]


class ToolResult(_ToolResultRequired, total=False):
    """The answer to one ``toolUse``.

    Attributes:
        toolUseId: Id of the ``toolUse`` this answers.
        status: ``"success"`` or ``"error"``.
        content: Result pieces.
    """

    status: Literal["success", "error"]


class ReasoningText(TypedDict, total=False):
    """Visible reasoning. Attributes: text, signature (provider's integrity token)."""

    text: str
    signature: str


class ReasoningContent(TypedDict, total=False):
    """A reasoning ("thinking") block: ``reasoningText`` or opaque ``redactedContent``."""

    reasoningText: ReasoningText
    redactedContent: bytes


class ContentBlock(TypedDict, total=False):
    """One content block: exactly one of the keys.

    Attributes:
        text: Plain text.
        toolUse: A tool call (assistant messages).
        toolResult: A tool's answer (user messages).
        reasoningContent: Model reasoning (assistant messages).
        image: ``{"format": "png"|..., "source": {"bytes": ...}}``.
        document: ``{"format": ..., "name": ..., "source": {"bytes": ...}}``.
    """

    text: str
    toolUse: ToolUse
    toolResult: ToolResult
    reasoningContent: ReasoningContent
    image: dict[str, Any]
    document: dict[str, Any]


class Message(TypedDict):
    """One conversation message.

    Attributes:
        role: ``"user"`` or ``"assistant"``.
        content: Its blocks, in order.
    """

    role: Role
    content: list[ContentBlock]


class ToolSpecInputSchema(TypedDict):
    """Wrapper of a tool's JSON schema. Attributes: json (the schema)."""

    json: dict[str, Any]


class ToolSpec(TypedDict):
    """A tool as the model sees it.

    Attributes:
        name: Tool name.
        description: What it does and when to use it.
        inputSchema: ``{"json": <JSON schema of the arguments object>}``.
    """

    name: str
    description: str
    inputSchema: ToolSpecInputSchema


class _UsageRequired(TypedDict):
    inputTokens: int
    outputTokens: int
    totalTokens: int


class Usage(_UsageRequired, total=False):
    """Token counts (Converse names).

    Attributes:
        inputTokens: Input tokens as the provider counts them (see ``docs/caching.md``:
            Anthropic and Bedrock exclude cached tokens, OpenAI includes them).
        outputTokens: Generated tokens.
        totalTokens: As the provider reports it (input + output).
        cacheReadInputTokens: Input tokens served from the prompt cache, when the
            provider reports it.
        cacheWriteInputTokens: Input tokens written to the prompt cache, when the
            provider reports it.
    """

    cacheReadInputTokens: int
    cacheWriteInputTokens: int


# --- model stream events (Bedrock ConverseStream shapes) ---------------------------------


class MessageStartEvent(TypedDict):
    """``{"role": "assistant"}``."""

    role: Role


class ToolUseStart(TypedDict):
    """Start of a tool call block. Attributes: toolUseId, name."""

    toolUseId: str
    name: str


class ContentBlockStart(TypedDict, total=False):
    """What a starting block is. Attributes: toolUse (text blocks need no start)."""

    toolUse: ToolUseStart


class ContentBlockStartEvent(TypedDict):
    """Attributes: contentBlockIndex, start."""

    contentBlockIndex: int
    start: ContentBlockStart


class ReasoningDelta(TypedDict, total=False):
    """Attributes: text, signature, redactedContent."""

    text: str
    signature: str
    redactedContent: bytes


class ToolUseDelta(TypedDict):
    """Attributes: input (a fragment of the JSON arguments text)."""

    input: str


class ContentBlockDelta(TypedDict, total=False):
    """Exactly one of: text, toolUse, reasoningContent."""

    text: str
    toolUse: ToolUseDelta
    reasoningContent: ReasoningDelta


class ContentBlockDeltaEvent(TypedDict):
    """Attributes: contentBlockIndex, delta."""

    contentBlockIndex: int
    delta: ContentBlockDelta


class ContentBlockStopEvent(TypedDict):
    """Attributes: contentBlockIndex."""

    contentBlockIndex: int


class MessageStopEvent(TypedDict, total=False):
    """Attributes: stopReason (a :data:`StopReason`, or a provider's own string)."""

    stopReason: str


class MetadataEvent(TypedDict, total=False):
    """Attributes: usage, metrics (``{"latencyMs": int}``)."""

    usage: Usage
    metrics: dict[str, Any]


class StreamEvent(TypedDict, total=False):
    """One event of a model stream: exactly one of the keys.

    Attributes:
        messageStart: The assistant message begins.
        contentBlockStart: A tool-use block begins (text blocks may start with a delta).
        contentBlockDelta: A piece of text, tool input JSON or reasoning.
        contentBlockStop: The block at that index is complete.
        messageStop: The message is complete; carries the stop reason.
        metadata: Usage and latency; may come after ``messageStop``.
    """

    messageStart: MessageStartEvent
    contentBlockStart: ContentBlockStartEvent
    contentBlockDelta: ContentBlockDeltaEvent
    contentBlockStop: ContentBlockStopEvent
    messageStop: MessageStopEvent
    metadata: MetadataEvent


HistoryItem = Union[Message, dict[str, Any]]


# --- validation --------------------------------------------------------------------------
#
# One set of block rules serves validate_history (Agent(messages=...), agent.messages = ...),
# validate_prompt (invoke(prompt)) and tool-result normalisation (agent_sync.tools._results): what
# passes them is content every provider translator accepts. The checks are type checks plus
# one json.dumps per JSON value, so validating a long history stays cheap.

_STRICT_JSON = json.JSONEncoder(allow_nan=False)  # what every provider's JSON encoder accepts
_PROMPT_KINDS = frozenset({"text", "image", "document"})
# Converse block kinds that only Bedrock sends on (Anthropic and OpenAI drop them): accepted
# as dicts, their fields are Bedrock's to check.
_BEDROCK_KINDS = frozenset(
    {"video", "audio", "guardContent", "cachePoint", "citationsContent", "searchResult"}
)
_KINDS = _PROMPT_KINDS | _BEDROCK_KINDS | {"toolUse", "toolResult", "reasoningContent"}


def validate_history(messages: Sequence[HistoryItem]) -> list[str]:
    """Check a history against the invariant agent_sync keeps after every ``invoke``.

    The rules: each message is a dict with ``role`` ``"user"`` or ``"assistant"`` and a
    non-empty ``content`` list of blocks; roles alternate, starting with ``"user"``;
    every ``toolUse`` in an assistant message is answered by exactly one ``toolResult`` with
    the same id in the next user message; every ``toolResult`` answers a ``toolUse`` of the
    message just before it; tool ids are unique in a message.

    Each block is a dict with exactly one known key, and holds what a provider accepts:
    ``text`` a ``str``; ``toolUse`` (assistant only) a ``toolUseId`` and ``name`` (``str``)
    and a JSON-serialisable ``input`` dict; ``toolResult`` (user only) a ``status`` of
    ``"success"``/``"error"`` and a ``content`` list whose pieces are each exactly one of
    ``{"text": str}`` or ``{"json": <JSON value>}``; ``reasoningContent`` (assistant only)
    exactly one of ``reasoningText`` (``{"text": str, "signature"?: str}``) or
    ``redactedContent`` (bytes or str); ``image`` a ``format`` and ``source.bytes``;
    ``document`` a ``format``, ``name`` and ``source.bytes``. Every string is encodable as
    UTF-8 (no lone surrogate) and no number is ``NaN`` or infinite, so the history can be
    stored and sent as strict JSON (the agent replaces lone surrogates where data comes in;
    :func:`~agent_sync.repair_history` does too).

    A history may end with a user message (a prompt waiting for an answer) or with an
    assistant message without unanswered ``toolUse`` blocks.

    Args:
        messages: The history, oldest first.

    Returns:
        Human-readable problems, empty when the history is valid. Never raises.
    """
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
            problem = _block_problem(block, role) or encoding_problem(block)
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


def validate_prompt(blocks: Sequence[Any]) -> list[str]:
    """Check content blocks given as a prompt (``invoke(blocks)``).

    A prompt is a non-empty list of ``text``, ``image`` or ``document`` blocks (see
    :func:`validate_history` for their rules) with some content: tool calls and results
    come from the loop, never from a prompt, and a prompt of blank text only would reach
    the model as an empty message.

    Returns:
        Human-readable problems, empty when the prompt is valid. Never raises.
    """
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
            problem = _block_problem(block, "user")
        if problem is not None:
            problems.append(f"{spot}: {problem}")
    if not problems and all("text" in b and not b["text"].strip() for b in blocks):
        problems.append("the prompt is empty (blank text only)")
    return problems


def tool_result_piece_problem(piece: Any) -> str | None:
    """What is wrong with one ``toolResult`` content piece, or ``None`` if it is valid.

    The one rule shared by tool-result normalisation and :func:`validate_history`: a piece
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


def _block_problem(block: Any, role: Any) -> str | None:
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


def _check_tool_use(tool_use: Any, role: Any) -> str | None:
    if role != "assistant":
        return f"toolUse in a {role} message"
    if not isinstance(tool_use, dict):
        return "toolUse must be a dict"
    tool_use_id = tool_use.get("toolUseId")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        return "toolUse without a toolUseId"
    if not isinstance(tool_use.get("name"), str):
        return "toolUse without a name"
    tool_input = tool_use.get("input")
    if not isinstance(tool_input, dict):
        return "toolUse input must be a JSON object"
    return json_problem(tool_input, "toolUse input")


def _check_tool_result(result: Any, role: Any) -> str | None:
    if role != "user":
        return f"toolResult in a {role} message"
    if not isinstance(result, dict):
        return "toolResult must be a dict"
    tool_use_id = result.get("toolUseId")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        return "toolResult without a toolUseId"
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
