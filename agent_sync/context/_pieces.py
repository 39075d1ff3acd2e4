"""A summary of exactly the messages it replaces, made in pieces that each fit one call.

The rule: a summary is made from the messages it replaces, never from nothing. What one
summary call cannot take is summarized in pieces, in order; each piece's summary is the
next piece's ``previous``, so the last one covers them all. A piece ends where a view may
start (:func:`~._window.is_prompt` or an assistant message), so the summary made so far
always gives a valid view, and it is kept (:meth:`~._memo.SummaryMemo.put`) as soon as it is
made: a failure or a cancel later loses only the piece in hand. An empty or failed answer
ends the work: what was summarized so far is used, the rest is left unsummarized.

Each message's transcript is made once and each covered prefix digested once, so the cost
is linear in the messages summarized.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..cancel import CancelledError, CancelScope
from ..messages import Message, Usage
from ..models.base import Model
from ._memo import Summary
from ._summary import message_text, request_chars, summarize
from ._window import is_prompt

__all__ = ["MIN_PIECE_CHARS", "Summarizer", "summarize_log"]

logger = logging.getLogger(__name__)

MIN_PIECE_CHARS = 2_000
"""A lone message longer than the window is cut to the window, but never below this."""


@dataclass(frozen=True, kw_only=True)
class Summarizer:
    """What a summary call needs: the model, its instructions, the run's scope and usage,
    and how many characters one call may hold (the model's window, estimated)."""

    model: Model
    instructions: str
    scope: CancelScope
    count_usage: Callable[[Usage | None], None]
    window_chars: float


def summarize_log(
    messages: Sequence[Message],
    start: int,
    end: int,
    *,
    previous: str | None,
    summarizer: Summarizer,
    keep: Callable[[int, str], Summary],
) -> Summary | None:
    """Summarize ``messages[start:end]`` (``end`` a valid cut), continuing ``previous``
    (the summary of ``messages[:start]``), in pieces; ``keep(position, text)`` stores each
    piece's summary. The last summary kept, or ``None`` if no piece was summarized.

    Raises:
        CancelledError: The run was cancelled (what was kept stays kept).
    """
    lines = [message_text(messages[index]) for index in range(start, end)]
    position, text, made = start, previous, None
    while position < end:
        budget = summarizer.window_chars - request_chars(summarizer.instructions, text)
        stop = _piece_end(messages, lines, start, position, end, budget)
        conversation = "\n".join(line for line in lines[position - start : stop - start] if line)
        if conversation:
            try:
                text = summarize(
                    summarizer.model,
                    instructions=summarizer.instructions,
                    previous=text,
                    conversation=_cut_to(conversation, max(int(budget), MIN_PIECE_CHARS)),
                    scope=summarizer.scope,
                    count_usage=summarizer.count_usage,
                )
            except CancelledError:
                raise
            except Exception as exc:
                if summarizer.scope.cancelled:
                    raise CancelledError(summarizer.scope.reason or "cancelled") from exc
                logger.warning(
                    "error=<%s>, summarized=<%d>, left=<%d> | the summary call failed; the "
                    "messages it was to summarize are sent as they are",
                    type(exc).__name__,
                    position - start,
                    end - position,
                )
                return made
        position = stop
        if text is not None:  # a piece with nothing to tell is covered by the summary so far
            made = keep(position, text)
    return made


def _piece_end(
    messages: Sequence[Message],
    lines: Sequence[str],
    offset: int,
    position: int,
    end: int,
    budget: float,
) -> int:
    """Where the piece from ``position`` ends: the last valid cut whose transcript fits
    ``budget``, or the first valid cut after ``position`` if none does (at least one
    message: every piece makes progress)."""
    chars = 0
    best = None
    index = position
    while index < end:
        chars += len(lines[index - offset]) + 1
        after = index + 1
        if after == end or _may_start(messages[after]):
            if chars > budget and best is not None:
                return best
            best = after
            if chars > budget:
                return best
        index += 1
    return end if best is None else best


def _may_start(message: Message) -> bool:
    return message["role"] == "assistant" or is_prompt(message)


def _cut_to(conversation: str, limit: int) -> str:
    """A lone message over the window, cut so the call stays within it."""
    if len(conversation) <= limit:
        return conversation
    return f"{conversation[:limit]} ... [{len(conversation) - limit} characters cut]"
