"""The summary call: the older messages as a transcript in one user message (valid for any
provider whatever those messages hold), sent to the summarizing model like any model call:
cancelled with the run's :class:`~agent_sync.cancel.CancelScope`, its usage counted."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..cancel import CancelledError, CancelScope
from ..errors import ModelStreamError, UsageError
from ..messages import Message, StreamEvent, Usage
from ..models.base import Model, ModelRequest
from ..run._assemble import EMPTY_RESPONSE_TEXT, MessageAssembler

__all__ = ["SYSTEM_PROMPT", "message_text", "request_chars", "summarize", "transcript"]

_BLOCK_CHARS = 4_000  # a longer tool input or result is cut in the transcript


def _clip(text: str) -> str:
    if len(text) <= _BLOCK_CHARS:
        return text
    return f"{text[:_BLOCK_CHARS]} ... [{len(text) - _BLOCK_CHARS} characters cut]"


def _result_text(content: Sequence[Any]) -> str:
    parts = []
    for item in content:
        if "text" in item:
            parts.append(str(item["text"]))
        elif "json" in item:
            parts.append(json.dumps(item["json"], ensure_ascii=False, default=str))
        else:
            parts.append(f"[{next(iter(item), 'content')}]")
    return " ".join(parts)


def transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text: who said what, which tools were called and answered."""
    return "\n".join(line for line in map(message_text, messages) if line)


def message_text(message: Message) -> str:
    """One message's lines of the transcript (``""`` if it holds nothing to tell)."""
    lines: list[str] = []
    speaker = "User" if message["role"] == "user" else "Assistant"
    for block in message["content"]:
        if "text" in block:
            lines.append(f"{speaker}: {block['text']}")
        elif "toolUse" in block:
            use = block["toolUse"]
            arguments = json.dumps(use.get("input"), ensure_ascii=False, default=str)
            lines.append(f"Assistant called tool {use.get('name')}: {_clip(arguments)}")
        elif "toolResult" in block:
            result = block["toolResult"]
            status = " (error)" if result.get("status") == "error" else ""
            body = _clip(_result_text(result.get("content", ())))
            lines.append(f"Tool result{status}: {body}")
        elif "reasoningContent" in block:
            continue  # the model's private reasoning is not part of the conversation
        else:
            lines.append(f"{speaker}: [{next(iter(block), 'content')}]")
    return "\n".join(lines)


SYSTEM_PROMPT = "You write summaries of conversations."
_PREVIOUS_HEADING = "Summary of the conversation before this part:\n"
_CONVERSATION_HEADING = "The conversation:\n"


def request_chars(instructions: str, previous: str | None) -> int:
    """The characters of a summary request besides its transcript."""
    extra = len(_PREVIOUS_HEADING) + 2 + len(previous) if previous else 0
    return len(SYSTEM_PROMPT) + len(instructions) + 2 + len(_CONVERSATION_HEADING) + extra


def summarize(
    model: Model,
    *,
    instructions: str,
    previous: str | None,
    conversation: str,
    scope: CancelScope,
    count_usage: Callable[[Usage | None], None],
) -> str:
    """One call to ``model``: a summary of ``conversation`` (a non-empty transcript of the
    messages the summary replaces), continuing ``previous``.

    Raises:
        UsageError: ``conversation`` is empty (a summary is never made from nothing).
        CancelledError: The run was cancelled before or during the call.
        ModelError: The call failed, or returned no text.
    """
    if not conversation.strip():
        raise UsageError("a summary is made from the messages it replaces, not from nothing")
    parts = [instructions]
    if previous:
        parts.append(f"{_PREVIOUS_HEADING}{previous}")
    parts.append(f"{_CONVERSATION_HEADING}{conversation}")
    request = ModelRequest(
        messages=({"role": "user", "content": [{"text": "\n\n".join(parts)}]},),
        system_prompt=SYSTEM_PROMPT,
    )
    scope.raise_if_cancelled()  # never send a request after a cancel
    assembler = MessageAssembler(emit_deltas=False)
    stream: Iterator[StreamEvent] = iter(())
    try:
        stream = iter(model.stream(request, cancel=scope))
        for event in stream:
            assembler.add(event)
            if scope.event.is_set():
                raise CancelledError(scope.reason or "cancelled")
    except BaseException as exc:
        count_usage(assembler.usage)
        if scope.cancelled and isinstance(exc, Exception) and not isinstance(exc, CancelledError):
            raise CancelledError(scope.reason or "cancelled") from exc
        raise
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    count_usage(assembler.usage)
    if assembler.stop_reason is None:
        raise ModelStreamError("the summary call's stream ended before its stop event")
    content = assembler.finish().message["content"]
    text = "".join(str(block["text"]) for block in content if "text" in block).strip()
    if not text or content == [{"text": EMPTY_RESPONSE_TEXT}]:  # the assembler's stand-in
        raise ModelStreamError("the summary call returned no text")
    return text
