"""Converse-shaped messages, content blocks, tool specs and model stream events.

Every history agent_sync keeps or accepts has the Bedrock Converse shape, so it can be sent
to any provider (each provider translates) and stored as JSON::

    {"role": "user" | "assistant", "content": [block, ...]}

Model providers yield :data:`StreamEvent` dicts, the shapes of Bedrock's ``ConverseStream``
events; :mod:`agent_sync.stream` assembles them into an assistant :class:`Message`.

:func:`validate_history` checks the history invariant the agent guarantees after every
return of ``invoke`` (see ``docs/cancellation.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict, Union

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
    """

    text: str
    json: Any


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


def validate_history(messages: Sequence[HistoryItem]) -> list[str]:
    """Check a history against the invariant agent_sync keeps after every ``invoke``.

    The rules: each message is a dict with ``role`` ``"user"`` or ``"assistant"`` and a
    non-empty ``content`` list of dict blocks; roles alternate, starting with ``"user"``;
    every ``toolUse`` in an assistant message is answered by exactly one ``toolResult`` with
    the same id in the next user message; every ``toolResult`` answers a ``toolUse`` of the
    message just before it; tool ids are unique in a message; ``toolUse.input`` is a dict.

    A history may end with a user message (a prompt waiting for an answer) or with an
    assistant message without unanswered ``toolUse`` blocks.

    Args:
        messages: The history, oldest first.

    Returns:
        Human-readable problems, empty when the history is valid.
    """
    problems: list[str] = []
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
            problems.append(f"{where}: role {role!r} is not 'user' or 'assistant'")
        if not isinstance(content, list) or not content:
            problems.append(f"{where}: content must be a non-empty list")
            content = []
        if previous_role is None and role != "user":
            problems.append(f"{where}: the history must start with a user message")
        elif role == previous_role:
            problems.append(f"{where}: two {role} messages in a row")
        previous_role = role if isinstance(role, str) else previous_role

        answered: set[str] = set()
        used_here: set[str] = set()
        for position, block in enumerate(content):
            spot = f"{where} block {position}"
            if not isinstance(block, dict) or len(block) != 1:
                problems.append(f"{spot}: a block is a dict with exactly one key")
                continue
            if "toolUse" in block:
                _check_tool_use(block["toolUse"], role, spot, used_here, problems)
            elif "toolResult" in block:
                _check_tool_result(block["toolResult"], role, spot, pending, answered, problems)
            elif "text" in block and not isinstance(block["text"], str):
                problems.append(f"{spot}: text must be a string")
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


def _report_unanswered(
    pending: dict[str, str], answered: set[str], where: str, problems: list[str]
) -> None:
    for tool_use_id, name in pending.items():
        if tool_use_id not in answered:
            problems.append(f"{where}: toolUse {tool_use_id!r} ({name}) has no toolResult")


def _check_tool_use(
    tool_use: Any, role: Any, spot: str, used_here: set[str], problems: list[str]
) -> None:
    if role != "assistant":
        problems.append(f"{spot}: toolUse in a {role} message")
    if not isinstance(tool_use, dict):
        problems.append(f"{spot}: toolUse must be a dict")
        return
    tool_use_id = tool_use.get("toolUseId")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        problems.append(f"{spot}: toolUse without a toolUseId")
    elif tool_use_id in used_here:
        problems.append(f"{spot}: toolUseId {tool_use_id!r} used twice")
    else:
        used_here.add(tool_use_id)
    if not isinstance(tool_use.get("name"), str):
        problems.append(f"{spot}: toolUse without a name")
    if not isinstance(tool_use.get("input"), dict):
        problems.append(f"{spot}: toolUse input must be a JSON object")


def _check_tool_result(
    result: Any,
    role: Any,
    spot: str,
    pending: dict[str, str],
    answered: set[str],
    problems: list[str],
) -> None:
    if role != "user":
        problems.append(f"{spot}: toolResult in a {role} message")
    if not isinstance(result, dict):
        problems.append(f"{spot}: toolResult must be a dict")
        return
    tool_use_id = result.get("toolUseId")
    if tool_use_id in answered:
        problems.append(f"{spot}: toolUse {tool_use_id!r} answered twice")
    elif tool_use_id not in pending:
        problems.append(f"{spot}: toolResult {tool_use_id!r} answers no toolUse")
    else:
        answered.add(tool_use_id)
    if result.get("status", "success") not in ("success", "error"):
        problems.append(f"{spot}: toolResult status must be 'success' or 'error'")
    if not isinstance(result.get("content"), list):
        problems.append(f"{spot}: toolResult content must be a list")
