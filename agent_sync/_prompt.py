"""Turning what a caller sends (a prompt, injected input, a history) into content, at the edge.

One rule for every entry point: text must not be blank; blocks must pass
:func:`~agent_sync.messages.validate_prompt`; blocks are copied, so the caller's later
changes never reach the history, and made encodable (:mod:`agent_sync._encodable`: lone
surrogates replaced, a non-finite number refused). Problems raise
:class:`~agent_sync.errors.UsageError` before anything is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

from ._encodable import Unencodable, clean_content, clean_text
from .errors import UsageError
from .messages import ContentBlock, Message, validate_history, validate_prompt

__all__ = ["Content", "content_blocks", "history_copy"]

Content = Union[str, Sequence[ContentBlock]]
"""Text, or a list of content blocks (``text``, ``image``, ``document``)."""


def content_blocks(content: object, *, what: str = "prompt") -> list[ContentBlock]:
    """``content`` as a fresh list of blocks, every string made encodable (a lone
    surrogate, as in ``os.fsdecode(b"\\xff")``, becomes U+FFFD).

    Args:
        content: A ``str`` or a sequence of content blocks.
        what: How to name it in errors (``"prompt"``, ``"injected input"``).

    Raises:
        UsageError: Blank text, an invalid block, a non-finite number, or something that
            cannot be copied.
    """
    if isinstance(content, str):
        if not content.strip():
            raise UsageError(f"the {what} is empty")
        return [{"text": clean_text(content)}]
    problems = validate_prompt(content)  # type: ignore[arg-type]
    if problems:
        raise UsageError(f"invalid {what}: {problems[0]}")
    try:
        blocks: list[ContentBlock] = clean_content(list(content), what=f"the {what}")  # type: ignore[call-overload]
    except Unencodable as exc:
        raise UsageError(f"invalid {what}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"the {what} cannot be copied ({type(exc).__name__})") from exc
    return blocks


def history_copy(messages: Sequence[Message]) -> list[Message]:
    """A private, encodable copy of a caller's history (``Agent(messages=...)``,
    ``agent.messages = ...``): lone surrogates replaced, then checked with
    :func:`~agent_sync.messages.validate_history`.

    Raises:
        UsageError: Naming the first problem (a non-finite number among them), or the
            history cannot be copied.
    """
    copied: Any = None
    failure: Exception | None = None
    if isinstance(messages, Sequence) and not isinstance(messages, (str, bytes)):
        try:
            copied = clean_content(list(messages), what="the history")
        except Exception as exc:  # noqa: BLE001 - validated below, to name the problem
            failure = exc
    problems = validate_history(messages if copied is None else copied)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UsageError(f"invalid history: {problems[0]}{more}")
    if isinstance(failure, Unencodable):
        raise UsageError(f"invalid history: {failure}") from None
    if copied is None:
        name = type(failure).__name__
        raise UsageError(f"the history cannot be copied ({name})") from failure
    return copied  # type: ignore[no-any-return]
