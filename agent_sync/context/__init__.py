"""Context policies: which part of a long conversation the model is sent on each call.

``Agent(..., context=SlidingWindow(max_messages=40))`` or
``Agent(..., context=Summarizing(model, keep_last=10, trigger_tokens=100_000))``. The policy
builds the model's *view* of the conversation for every model call; the stored history
(``agent.messages``, the store's log) keeps every message. A view is valid for every
provider: it never separates a ``toolUse`` from its ``toolResult``, never starts with a
tool result or an assistant message, and ends with the current user message. When the
provider refuses a view as too long (:class:`~agent_sync.errors.ContextWindowOverflowError`)
the call is retried once with at most half of it. See ``docs/context.md``.
"""

from __future__ import annotations

from ._keeper import PLACEHOLDER_TEXT, SUMMARY_HEADING
from ._policies import ContextPolicy, SlidingWindow, Summarizing
from ._window import CHARS_PER_TOKEN

__all__ = [
    "CHARS_PER_TOKEN",
    "PLACEHOLDER_TEXT",
    "SUMMARY_HEADING",
    "ContextPolicy",
    "SlidingWindow",
    "Summarizing",
]
