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

from collections.abc import Sequence
from typing import Any, Literal, TypedDict, Union

from ._message_checks import history_problems, prompt_problems

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
        reasoningTokens: Output tokens the model spent reasoning (already counted in
            ``outputTokens``), when the provider reports them apart: OpenAI's Chat
            Completions and Responses, Gemini's thoughts. Anthropic and Bedrock count
            thinking in ``outputTokens`` without a separate figure.
    """

    cacheReadInputTokens: int
    cacheWriteInputTokens: int
    reasoningTokens: int


OptionalUsageKey = Literal["cacheReadInputTokens", "cacheWriteInputTokens", "reasoningTokens"]
OPTIONAL_USAGE_KEYS: tuple[OptionalUsageKey, ...] = (
    "cacheReadInputTokens",
    "cacheWriteInputTokens",
    "reasoningTokens",
)
"""The :class:`Usage` counts present only when the provider reports them (not in
``__all__``: the package's own list, for whoever copies a usage)."""


# --- model stream events (Bedrock ConverseStream shapes) ---------------------------------


class _MessageStartRequired(TypedDict):
    role: Role


class MessageStartEvent(_MessageStartRequired, total=False):
    """``{"role": "assistant"}``.

    Attributes:
        role: Always ``"assistant"``.
        modelId: Optional: the id of the model that answers, when it is not the model
            called (a :class:`~agent_sync.models.FallbackModel` names the model of its chain
            that answered); the run lists it in ``result.metrics.model_ids``.
    """

    modelId: str


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


class ReasoningContentBlockDelta(TypedDict, total=False):
    """A piece of reasoning in a stream delta (Converse's ``ReasoningContentBlockDelta``).

    Attributes:
        text: A piece of the visible reasoning text.
        signature: The provider's integrity token for the reasoning block.
        redactedContent: Opaque, encrypted reasoning.
    """

    text: str
    signature: str
    redactedContent: bytes


ReasoningDelta = ReasoningContentBlockDelta
"""The former name of :class:`ReasoningContentBlockDelta`, still accepted. It was renamed
because :class:`agent_sync.events.ReasoningDelta`, the agent's event for a piece of
reasoning text, has the same name."""


class ToolUseDelta(TypedDict):
    """Attributes: input (a fragment of the JSON arguments text)."""

    input: str


class ContentBlockDelta(TypedDict, total=False):
    """Exactly one of: text, toolUse, reasoningContent."""

    text: str
    toolUse: ToolUseDelta
    reasoningContent: ReasoningContentBlockDelta


class ContentBlockDeltaEvent(TypedDict):
    """Attributes: contentBlockIndex, delta."""

    contentBlockIndex: int
    delta: ContentBlockDelta


class ContentBlockStopEvent(TypedDict):
    """Attributes: contentBlockIndex."""

    contentBlockIndex: int


class MessageStopEvent(TypedDict, total=False):
    """The message is complete.

    Attributes:
        stopReason: A :data:`StopReason`, or a provider's own string.
        providerStopReason: Optional: the stop reason in the provider's own spelling, when
            it differs from ``stopReason`` (OpenAI ``"tool_calls"``, Gemini ``"STOP"``);
            tracing records it as ``gen_ai.response.finish_reasons``.
        responseId: Optional: the provider's id of this response (``chatcmpl-...``,
            ``msg_...``).
        responseModel: Optional: the model that answered, as the provider names it
            (``"gpt-4o-2024-08-06"``).
    """

    stopReason: str
    providerStopReason: str
    responseId: str
    responseModel: str


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


# --- the public checks (the rules live in agent_sync._message_checks) --------------------


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
    return history_problems(messages)


def validate_prompt(blocks: Sequence[Any]) -> list[str]:
    """Check content blocks given as a prompt (``invoke(blocks)``).

    A prompt is a non-empty list of ``text``, ``image`` or ``document`` blocks (see
    :func:`validate_history` for their rules) with some content: tool calls and results
    come from the loop, never from a prompt, and a prompt of blank text only would reach
    the model as an empty message.

    Returns:
        Human-readable problems, empty when the prompt is valid. Never raises.
    """
    return prompt_problems(blocks)
