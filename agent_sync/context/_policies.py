"""The context policies a user configures: :class:`SlidingWindow` and :class:`Summarizing`.

They are settings (immutable, shareable between agents); what an agent learns while it runs
(the provider's tokens per character, a ceiling after an overflow) lives in its
:class:`~._keeper.ContextKeeper`, and summaries in the store (or the keeper without one).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..models.base import Model

__all__ = ["ContextPolicy", "SlidingWindow", "Summarizing"]


class ContextPolicy:
    """Base of the context policies (``Agent(..., context=...)``): what part of the stored
    conversation the model is sent on each call. The stored history is never changed.
    The agent takes :class:`SlidingWindow` and :class:`Summarizing` (not other subclasses)."""


def _positive(name: str, value: object, *, minimum: int = 1, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class SlidingWindow(ContextPolicy):
    """Send the most recent messages that fit.

    The view starts at a user prompt, or at an assistant message behind one placeholder
    user message ("earlier messages are not shown"), so it is valid for every provider: a
    tool call is never separated from its result. The current user message (and the tool
    round it answers) is always sent, even if it alone is over the limits.

    Args:
        max_messages: At most this many messages per call (the placeholder included); at
            least 3 (a placeholder, a tool call, its result).
        max_tokens: At most about this many input tokens per call (system prompt and tool
            specs included), or ``None``. Counted from the provider's reported
            ``inputTokens`` for the previous call's view (its tokens per character);
            before the first call, estimated as one token per 4 characters.
    """

    max_messages: int = 40
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _positive("max_messages", self.max_messages, minimum=3)
        _positive("max_tokens", self.max_tokens, allow_none=True)


@dataclass(frozen=True)
class Summarizing(ContextPolicy):
    """Replace the older part of the conversation with a summary once it grows too big.

    When the view would be over ``trigger_tokens``, ``model`` summarizes the messages
    before the last ``keep_last`` (with the previous summary, if any, so a summary grows
    incrementally); the view is then the summary (as a user message) followed by the kept
    messages. A summary is made from exactly the messages it replaces: what one call
    cannot take is summarized in pieces, each piece's summary the next one's previous
    summary. A call that fails or answers nothing stores nothing and leaves those messages
    unsummarized (logged). The summary is stored with the conversation (in the agent's store,
    so other workers reuse it; in the agent without one). The summary call is cancelled
    with the run and its usage is counted in the run's usage.

    Args:
        model: The model that writes summaries (a cheaper one is fine), or ``None`` for
            the agent's own model.
        keep_last: At least this many recent messages are sent as they are (the cut moves
            back to a valid start: a prompt or an assistant message).
        trigger_tokens: Summarize when the view would be over about this many input tokens
            (counted as for :attr:`SlidingWindow.max_tokens`). Each summary call holds at
            most about this many tokens (a piece holds at least one message).
        instructions: What the summarizer is told to do.
    """

    model: Model | None = None
    keep_last: int = 10
    trigger_tokens: int = 100_000
    instructions: str = (
        "Summarize the conversation below for the assistant who will continue it: the "
        "user's goals and preferences, facts learned, decisions made, tool results that "
        "still matter, and open questions. Be concise; write only the summary."
    )

    def __post_init__(self) -> None:
        if self.model is not None and not callable(getattr(self.model, "stream", None)):
            raise UsageError(
                f"model must have a stream(request, *, cancel) method, got {self.model!r}"
            )
        _positive("keep_last", self.keep_last)
        _positive("trigger_tokens", self.trigger_tokens)
        if not isinstance(self.instructions, str) or not self.instructions.strip():
            raise UsageError("instructions must be a non-empty str")
