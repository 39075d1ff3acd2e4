"""Keeping a run's history valid: the tool-result message, closing a turn cut short, and
where injected input goes.

:func:`close_turn` is the one place that knows how to leave a history valid after a run is
cut short (cancel, timeout, max_cycles, Ctrl-C, a failure): answer every unanswered
``toolUse`` with a cancelled ``toolResult`` and, if asked, end with an assistant message.

Below the run and the stores: the run keeps its history valid with it, and a store closes
the turn of a run it cancels while paused or fails when its owner died.
"""

from __future__ import annotations

from collections.abc import Sequence

from .messages import CANCELLED_TEXT, ContentBlock, Message, ToolResult
from .tools._results import error_result

__all__ = [
    "add_user_blocks",
    "answer_pending",
    "close_cancelled_turn",
    "close_turn",
    "tool_result_message",
]


def tool_result_message(results: list[ToolResult]) -> Message:
    """The user message that carries a batch of tool results."""
    return {"role": "user", "content": [{"toolResult": result} for result in results]}


def close_turn(messages: list[Message], closing_text: str | None = CANCELLED_TEXT) -> None:
    """Make ``messages`` valid after a run was cut short, in place.

    Every ``toolUse`` of a trailing assistant message gets a cancelled ``toolResult``; then,
    if ``closing_text`` is given and the history ends with a user message, an assistant
    message with that text closes the turn.
    """
    if not messages:
        return
    last = messages[-1]
    if last["role"] == "assistant":
        pending = [b["toolUse"]["toolUseId"] for b in last["content"] if "toolUse" in b]
        if not pending:
            return
        messages.append(tool_result_message([error_result(i, CANCELLED_TEXT) for i in pending]))
    if closing_text is not None:
        closing: list[ContentBlock] = [{"text": closing_text}]
        messages.append({"role": "assistant", "content": closing})


def add_user_blocks(messages: list[Message], blocks: list[ContentBlock]) -> None:
    """Put ``blocks`` into the history's next user message, in place.

    If the history ends with a user message (tool results, or a prompt not answered yet),
    they join it, after what it holds; after an assistant message, its pending ``toolUse``
    blocks are answered first ("Cancelled by user"), then the blocks go into that user
    message, or into a new one.
    """
    if not blocks:
        return
    if messages and messages[-1]["role"] == "assistant":
        close_turn(messages, None)
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": "user", "content": list(blocks)})


def answer_pending(
    messages: list[Message], text: str = CANCELLED_TEXT, *, known: Sequence[ToolResult] = ()
) -> None:
    """Answer a trailing assistant message's calls, in place: each with its result in
    ``known`` where there is one (a round paused on a sub-agent's approvals keeps its
    finished calls' real results), else an error result of ``text``. No-op when the history
    does not end with calls."""
    if not messages or messages[-1]["role"] != "assistant":
        return
    results = {result["toolUseId"]: result for result in known}
    pending = [b["toolUse"]["toolUseId"] for b in messages[-1]["content"] if "toolUse" in b]
    if pending:
        answers = [results.get(i) or error_result(i, text) for i in pending]
        messages.append(tool_result_message(answers))


def close_cancelled_turn(
    messages: list[Message],
    *,
    results: Sequence[ToolResult] = (),
    queued: Sequence[ContentBlock] = (),
    unanswered_text: str = CANCELLED_TEXT,
    closing_text: str = CANCELLED_TEXT,
) -> None:
    """The one history a cancel leaves, wherever the run was (running, paused, lost), in
    place: the trailing calls answered (``results`` where known, else ``unanswered_text``),
    the ``queued`` input written to the next user message, then ``closing_text`` ("Cancelled
    by user"; a usage limit's stop says which limit) closes the turn."""
    answer_pending(messages, unanswered_text, known=results)
    add_user_blocks(messages, list(queued))
    close_turn(messages, closing_text)
