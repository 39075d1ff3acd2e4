"""Turning what a caller sends (a prompt, injected input) into content blocks, at the edge.

One rule for every entry point: text must not be blank; blocks must pass
:func:`~agent_sync.messages.validate_prompt`; blocks are deep-copied, so the caller's later
changes never reach the history. Problems raise :class:`~agent_sync.errors.UsageError`
before anything is touched.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Union

from .errors import UsageError
from .messages import ContentBlock, validate_prompt

__all__ = ["Content", "content_blocks"]

Content = Union[str, Sequence[ContentBlock]]
"""Text, or a list of content blocks (``text``, ``image``, ``document``)."""


def content_blocks(content: object, *, what: str = "prompt") -> list[ContentBlock]:
    """``content`` as a fresh list of blocks.

    Args:
        content: A ``str`` or a sequence of content blocks.
        what: How to name it in errors (``"prompt"``, ``"injected input"``).

    Raises:
        UsageError: Blank text, an invalid block, or something that cannot be copied.
    """
    if isinstance(content, str):
        if not content.strip():
            raise UsageError(f"the {what} is empty")
        return [{"text": content}]
    problems = validate_prompt(content)  # type: ignore[arg-type]
    if problems:
        raise UsageError(f"invalid {what}: {problems[0]}")
    try:
        return copy.deepcopy(list(content))  # type: ignore[call-overload]
    except Exception as exc:
        raise UsageError(f"the {what} cannot be copied ({type(exc).__name__})") from exc
