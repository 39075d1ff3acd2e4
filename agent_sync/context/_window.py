"""Where a view of the conversation may start, and how big a message is.

A view is a suffix of the history, possibly behind one leading user message (a placeholder
or a summary). It is valid for every provider when it starts at a *prompt* (a user message
with no ``toolResult``: nothing before it is answered by it) or at an assistant message
behind that leading user message (the assistant's ``toolUse`` blocks are answered in the
next message, which the suffix holds). So a cut never separates a ``toolUse`` from its
``toolResult`` and the view never starts with a result or an assistant message.

Every function here walks back from the end of the history and stops as soon as the view
is full, so its cost grows with the view, never with the stored history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..messages import Message

__all__ = [
    "CHARS_PER_TOKEN",
    "Cut",
    "chars_of",
    "is_prompt",
    "last_cut",
    "widest_cut",
]

CHARS_PER_TOKEN = 4
"""The estimate before the provider has reported any usage: four characters a token."""

_IMAGE_CHARS = 6_000  # an image or document block counts as about 1,500 tokens


def is_prompt(message: Message) -> bool:
    """A user message that answers no tool call: a view may start with it."""
    return message["role"] == "user" and not any("toolResult" in b for b in message["content"])


def chars_of(value: Any) -> int:
    """The characters of a message (or any block): its strings, keys excluded; an image or
    document block counts as a fixed size. Cheap and proportional to the message."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        total = 0
        for key, item in value.items():
            if key in ("image", "document", "video"):
                total += _IMAGE_CHARS
            else:
                total += chars_of(item)
        return total
    if isinstance(value, (list, tuple)):
        return sum(chars_of(item) for item in value)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(str(value)) if value is not None else 0


class Cut:
    """Where a view starts: ``start`` is an index into the history; ``lead`` says whether a
    user message (placeholder or summary) goes before ``history[start]``."""

    __slots__ = ("lead", "start")

    def __init__(self, start: int, lead: bool) -> None:
        self.start = start
        self.lead = lead

    def size(self, length: int) -> int:
        """Messages in the view of a history of ``length`` messages."""
        return length - self.start + (1 if self.lead else 0)

    def __repr__(self) -> str:
        return f"Cut(start={self.start}, lead={self.lead})"


def _cut_at(messages: Sequence[Message], index: int) -> Cut | None:
    message = messages[index]
    if message["role"] == "assistant":
        return Cut(index, True)
    if is_prompt(message):
        return Cut(index, False)
    return None


def last_cut(messages: Sequence[Message], *, before: int | None = None) -> Cut:
    """The latest valid cut at or before index ``before`` (default: the last message):
    the smallest view that still ends with the history's last message.

    The history ends with a user message; a run's history always has a valid cut (its
    last prompt, or the assistant message before a tool-result message).
    """
    index = len(messages) - 1 if before is None else min(before, len(messages) - 1)
    while index >= 0:
        cut = _cut_at(messages, index)
        if cut is not None:
            return cut
        index -= 1
    return Cut(0, False)  # a history that starts with a tool result (not valid anyway)


def widest_cut(
    messages: Sequence[Message],
    *,
    max_messages: int | None,
    max_chars: float | None,
    lead_chars: int = 0,
    floor: int = 0,
    size: Callable[[Message], int] = chars_of,
) -> Cut:
    """The earliest valid cut (the most context) whose view holds at most ``max_messages``
    messages and ``max_chars`` characters, not before index ``floor``; the smallest valid
    view (:func:`last_cut`) if even that does not fit.

    Walks back from the end and stops at the first message that does not fit: its cost is
    the view's, not the history's.
    """
    length = len(messages)
    best = last_cut(messages)
    chars = 0
    index = length - 1
    counting = max_chars is not None
    while index >= floor:
        if counting:
            chars += size(messages[index])
        cut = _cut_at(messages, index)
        if cut is not None:
            count = cut.size(length)
            total = chars + (lead_chars if cut.lead else 0)
            if max_messages is not None and count > max_messages:
                break
            if max_chars is not None and total > max_chars:
                break
            if cut.start <= best.start:
                best = cut
        elif max_messages is not None and length - index > max_messages:
            break
        elif max_chars is not None and chars > max_chars:
            break
        index -= 1
    return best
