"""``PatternGuard``: a regular expression that trips or redacts, at any stage (DESIGN 13).

A pattern checks a whole text at once (a prompt, a tool's input or result) with :meth:`scan`;
streamed output goes through :class:`~agent_sync._guardrails._release.OutputGate`, which asks
:meth:`PatternGuard.settled` where a match can no longer change as more text arrives.

``max_match`` is the longest match the pattern can have (a longer one is cut at it): it is
what the output gate holds back, ``max_match - 1`` characters, so that a match split across
chunks is seen whole before any of it is released.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from ..errors import UsageError

Stage = Literal["input", "output", "tool_call", "tool_result"]
STAGES: Final[tuple[Stage, ...]] = ("input", "output", "tool_call", "tool_result")
PatternAction = Literal["trip", "redact"]

_MAX_MATCH_LIMIT: Final = 4096  # a hold-back longer than this would hold whole answers back


@dataclass(frozen=True)
class PatternMatch:
    """Where a pattern matched in a text: ``text[start:end]``."""

    start: int
    end: int


class PatternGuard:
    """A deterministic guardrail: a regular expression that trips the run or is redacted.

    Args:
        pattern: The regular expression (a string or a compiled pattern).
        stage: Where it checks: ``"input"``, ``"output"``, ``"tool_call"`` or
            ``"tool_result"``.
        action: ``"trip"`` stops the run at the first match; ``"redact"`` replaces each
            match with ``replacement``.
        replacement: What a redacted match becomes.
        max_match: The longest match the pattern can have, in characters (a longer match is
            cut at it). Streamed output holds back ``max_match - 1`` characters so a match
            split across chunks is caught whole.
        name: The name a trip reports (default ``"pattern"``).

    Raises:
        UsageError: An argument is invalid (the pattern does not compile, matches the empty
            string, or ``max_match`` is out of range).
    """

    __slots__ = ("action", "max_match", "name", "pattern", "replacement", "stage")

    def __init__(
        self,
        pattern: str | re.Pattern[str],
        *,
        stage: Stage = "output",
        action: PatternAction = "trip",
        replacement: str = "[redacted]",
        max_match: int = 64,
        name: str | None = None,
    ) -> None:
        self.pattern = _compiled(pattern)
        if stage not in STAGES:
            raise UsageError(f"PatternGuard stage must be one of {list(STAGES)}, got {stage!r}")
        if action not in ("trip", "redact"):
            raise UsageError(f"PatternGuard action must be 'trip' or 'redact', got {action!r}")
        if not isinstance(replacement, str):
            raise UsageError(
                f"PatternGuard replacement must be a str, got {type(replacement).__name__}"
            )
        if (
            not isinstance(max_match, int)
            or isinstance(max_match, bool)
            or not 1 <= max_match <= _MAX_MATCH_LIMIT
        ):
            raise UsageError(
                f"PatternGuard max_match must be an int from 1 to {_MAX_MATCH_LIMIT}, "
                f"got {max_match!r}"
            )
        if self.pattern.search(replacement) is not None:
            raise UsageError("PatternGuard replacement must not match its own pattern")
        if name is not None and (not isinstance(name, str) or not name):
            raise UsageError("PatternGuard name must be a non-empty str")
        self.stage: Stage = stage
        self.action: PatternAction = action
        self.replacement = replacement
        self.max_match = max_match
        self.name = name or "pattern"

    def __repr__(self) -> str:
        return (
            f"PatternGuard({self.pattern.pattern!r}, stage={self.stage!r}, "
            f"action={self.action!r}, max_match={self.max_match}, name={self.name!r})"
        )

    def first_match(self, text: str, start: int = 0) -> PatternMatch | None:
        """The first match in ``text`` at or after ``start``, cut at ``max_match`` (one that
        more text could still change too: :meth:`settled` tells)."""
        found = self.pattern.search(text, start)
        if found is None:
            return None
        begin = found.start()
        bounded = self.pattern.match(text, begin, min(len(text), begin + self.max_match))
        end = bounded.end() if bounded is not None else min(found.end(), begin + self.max_match)
        return PatternMatch(begin, max(end, begin + 1))

    def settled(self, match: PatternMatch, text_length: int) -> bool:
        """Whether more text cannot change ``match`` (its whole reach has arrived)."""
        return match.start + self.max_match <= text_length

    def scan(self, text: str) -> str | None:
        """Check a whole text: ``None`` if the pattern trips on it, else the text with each
        match redacted (the same text when nothing matched)."""
        pieces: list[str] = []
        at = 0
        while (match := self.first_match(text, at)) is not None:
            if self.action == "trip":
                return None
            pieces += (text[at : match.start], self.replacement)
            at = match.end
        if not pieces:
            return text
        pieces.append(text[at:])
        return "".join(pieces)


def _compiled(pattern: object) -> re.Pattern[str]:
    if isinstance(pattern, re.Pattern):
        if not isinstance(pattern.pattern, str):
            raise UsageError("PatternGuard needs a str pattern, not bytes")
        compiled: re.Pattern[str] = pattern
    elif isinstance(pattern, str):
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"PatternGuard pattern does not compile: {exc}") from None
    else:
        raise UsageError(f"PatternGuard pattern must be a str, got {type(pattern).__name__}")
    if compiled.fullmatch("") is not None:
        raise UsageError("PatternGuard pattern matches the empty string: it would match anywhere")
    return compiled
