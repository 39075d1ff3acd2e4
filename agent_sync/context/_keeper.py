"""One agent's context state, and the three things the model step asks of it: the view to
send (:meth:`ContextKeeper.view`), a smaller one after the provider refused the view as too
long (:meth:`ContextKeeper.shrink`), and the usage the provider reported for a view
(:meth:`ContextKeeper.observe`).

Token counts: before the first call a token is estimated as 4 characters
(:data:`~._window.CHARS_PER_TOKEN`); after each call, the ratio of the ``inputTokens`` the
provider reported (cache reads and writes included) to the characters of what it was sent
(messages, system prompt and tool specs) replaces the estimate.

After an overflow the view is shrunk to at most half (messages and characters) and the
size of that view is kept as a ceiling for the agent's later calls, so the next call does
not overflow first again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..messages import Message, Usage
from ._coverage import PrefixDigests, shared_digests
from ._memo import Summary, SummaryMemo, memo_for
from ._pieces import Summarizer, summarize_log
from ._policies import ContextPolicy, SlidingWindow, Summarizing
from ._window import CHARS_PER_TOKEN, Cut, chars_of, last_cut, widest_cut

if TYPE_CHECKING:
    from ..run._context import RunContext

__all__ = ["PLACEHOLDER_TEXT", "SUMMARY_HEADING", "ContextKeeper"]

logger = logging.getLogger(__name__)

PLACEHOLDER_TEXT = "(Earlier messages of this conversation are not shown.)"
"""The user message put before a view that starts at an assistant message."""

SUMMARY_HEADING = "Summary of the earlier conversation:"
"""The first line of the user message that carries a summary."""


class ContextKeeper:
    """A policy and what one agent learned applying it (see the module docstring).

    Used by the agent's loop thread; a lock keeps it sound if copies of the agent's settings
    run in parallel.
    """

    def __init__(
        self, policy: ContextPolicy, *, store: object | None, conversation_id: str | None
    ) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._tokens_per_char = 1.0 / CHARS_PER_TOKEN
        self._ceiling_chars: float | None = None
        self._fixed: tuple[int, int] | None = None  # (key, characters) of system + tools
        self._memo: SummaryMemo | None = None
        self._digests: PrefixDigests | None = None
        self._store, self._conversation_id = store, conversation_id

    # -- what the model step asks --

    def view(self, ctx: RunContext) -> list[Message]:
        """The messages to send for this call (never the history itself: a new list)."""
        messages = ctx.messages
        fixed = self._fixed_chars(ctx)
        policy = self.policy
        if isinstance(policy, Summarizing):
            view = self._summarized(ctx, policy, fixed)
        else:
            assert isinstance(policy, SlidingWindow)
            budget = self._chars_for(policy.max_tokens, fixed)
            cut = widest_cut(
                messages,
                max_messages=policy.max_messages,
                max_chars=budget,
                lead_chars=len(PLACEHOLDER_TEXT),
            )
            view = render(messages, cut, None)
        ceiling = self._ceiling_chars
        if ceiling is not None:
            view = self._within(view, max_messages=None, max_chars=ceiling)
        return view

    def shrink(self, sent: Sequence[Message]) -> list[Message] | None:
        """At most half of ``sent`` (messages and characters), still valid; ``None`` if it
        cannot shrink (it is the current round alone)."""
        total = sum(chars_of(m) for m in sent)
        smaller = self._within(list(sent), max_messages=len(sent) // 2, max_chars=total / 2)
        if len(smaller) >= len(sent):
            return None
        with self._lock:
            kept = sum(chars_of(m) for m in smaller)
            if self._ceiling_chars is None or kept < self._ceiling_chars:
                self._ceiling_chars = kept
        logger.debug(
            "messages=<%d>, kept=<%d> | the provider refused the view as too long; "
            "retrying with a smaller one",
            len(sent),
            len(smaller),
        )
        return smaller

    def observe(self, ctx: RunContext, sent: Sequence[Message], usage: Usage | None) -> None:
        """Learn the provider's tokens per character from the usage reported for ``sent``."""
        if usage is None or (
            isinstance(self.policy, SlidingWindow) and self.policy.max_tokens is None
        ):
            return  # nothing counts tokens: do not pay for counting characters
        tokens = (
            int(usage.get("inputTokens", 0))
            + int(usage.get("cacheReadInputTokens", 0))
            + int(usage.get("cacheWriteInputTokens", 0))
        )
        chars = self._fixed_chars(ctx) + sum(chars_of(m) for m in sent)
        if tokens > 0 and chars > 0:
            self._tokens_per_char = tokens / chars

    def fresh(self, store: object | None, conversation_id: str | None) -> ContextKeeper:
        """This policy for another conversation, with nothing learned yet."""
        return ContextKeeper(self.policy, store=store, conversation_id=conversation_id)

    # -- internals --

    def _chars_for(self, tokens: int | None, fixed: int) -> float | None:
        if tokens is None:
            return None
        return max(0.0, tokens / self._tokens_per_char - fixed)

    def _fixed_chars(self, ctx: RunContext) -> int:
        settings = ctx.settings
        key = hash((settings.system_prompt, id(settings.tool_specs)))
        fixed = self._fixed
        if fixed is None or fixed[0] != key:
            specs = json.dumps(list(settings.tool_specs), default=str)
            fixed = (key, len(settings.system_prompt or "") + len(specs))
            self._fixed = fixed
        return fixed[1]

    def _within(
        self, view: list[Message], *, max_messages: int | None, max_chars: float | None
    ) -> list[Message]:
        """A valid tail of ``view`` within the limits, its first (lead) user message kept
        as the lead if it is a summary, else a placeholder."""
        cut = widest_cut(
            view, max_messages=max_messages, max_chars=max_chars, lead_chars=len(PLACEHOLDER_TEXT)
        )
        if cut.start == 0 and not cut.lead:
            return view
        summary = _summary_in(view[0])
        if summary is not None and cut.start > 0:
            return render(view, Cut(cut.start, True), summary)
        return render(view, cut, None)

    def _summarized(self, ctx: RunContext, policy: Summarizing, fixed: int) -> list[Message]:
        messages = ctx.messages
        length = len(messages)
        memo = self._memo_of()
        stored = memo.get()
        kept = stored if stored is not None and self._covers(stored, messages) else None
        start = kept.end if kept is not None else 0
        previous = kept.text if kept is not None else None
        trigger = self._chars_for(policy.trigger_tokens, fixed)
        assert trigger is not None
        lead = len(previous or "")
        if not _over(messages, start, trigger - lead):
            return render(messages, Cut(start, previous is not None), previous)
        cut = last_cut(messages, before=length - policy.keep_last)
        if cut.start <= start:  # nothing older than the kept messages is left to summarize
            return render(messages, Cut(start, previous is not None), previous)
        replacing = stored
        chain: list[str] = []  # the prefix digests up to the cut, computed at the first piece

        def keep(end: int, text: str) -> Summary:
            nonlocal replacing
            if not chain:
                chain.extend(self._prefix.chain(messages, cut.start))
            summary = Summary(end=end, digest=chain[end - 1], text=text)
            memo.put(summary, replacing=replacing)
            replacing = summary
            return summary

        summarizer = Summarizer(
            model=policy.model if policy.model is not None else ctx.settings.model,
            instructions=policy.instructions,
            scope=ctx.scope,
            count_usage=ctx.add_usage,
            # the summary call sends neither the agent's system prompt nor its tools
            window_chars=policy.trigger_tokens / self._tokens_per_char,
        )
        made = summarize_log(
            messages, start, cut.start, previous=previous, summarizer=summarizer, keep=keep
        )
        if made is None:
            return render(messages, Cut(start, previous is not None), previous)
        return render(messages, Cut(made.end, True), made.text)

    def _covers(self, summary: Summary, messages: Sequence[Message]) -> bool:
        """Whether ``summary`` is of this log: the same messages up to its end."""
        end = summary.end
        return (
            bool(summary.digest)
            and 0 < end < len(messages)
            and self._prefix.of(messages, end) == summary.digest
        )

    @property
    def _prefix(self) -> PrefixDigests:
        digests = self._digests
        if digests is None:
            store, conversation_id = self._store, self._conversation_id
            if store is None or conversation_id is None:
                digests = PrefixDigests()
            else:
                digests = shared_digests(store, conversation_id)
            self._digests = digests
        return digests

    def _memo_of(self) -> SummaryMemo:
        memo = self._memo
        if memo is None:
            memo = self._memo = memo_for(self._store, self._conversation_id)
        return memo


def render(messages: Sequence[Message], cut: Cut, summary: str | None) -> list[Message]:
    """The view from ``cut``: behind a placeholder (or the summary) when the cut says so; a
    summary before a prompt is put into that prompt's message (roles alternate)."""
    tail = list(messages[cut.start :])
    if not cut.lead and summary is None:
        return tail
    text = PLACEHOLDER_TEXT if summary is None else f"{SUMMARY_HEADING}\n{summary}"
    if tail and tail[0]["role"] == "user":
        first = tail[0]
        return [{"role": "user", "content": [{"text": text}, *first["content"]]}, *tail[1:]]
    return [{"role": "user", "content": [{"text": text}]}, *tail]


def _summary_in(message: Message) -> str | None:
    """The summary a view's first message carries, if it is one."""
    content = message["content"]
    if message["role"] != "user" or not content:
        return None
    text = content[0].get("text")
    if isinstance(text, str) and text.startswith(SUMMARY_HEADING + "\n"):
        return text[len(SUMMARY_HEADING) + 1 :]
    return None


def _over(messages: Sequence[Message], start: int, limit: float) -> bool:
    """Whether ``messages[start:]`` has more than ``limit`` characters (walks back from the
    end and stops at the limit)."""
    chars = 0
    for index in range(len(messages) - 1, start - 1, -1):
        chars += chars_of(messages[index])
        if chars > limit:
            return True
    return False
