"""Which part of a log a summary covers, proven by a digest of every covered message.

A summary of ``messages[:end]`` is kept with the *prefix digest* of ``messages[:end]``: a
chain ``d(0) = ""``, ``d(i + 1) = sha256(d(i), canonical JSON of messages[i])``. The digest
of one message would not do: chats repeat messages ("Noted.", "OK"), so a replaced history
can have the same message at the same position and still be another conversation. Two logs
have the same prefix digest only if they hold the same messages up to ``end``.

:class:`PrefixDigests` remembers the chain for the message objects it was computed from, so
checking a summary again on the same (or a grown) history costs one comparison of the
lists (the same objects compare at C speed), and only new or changed messages are hashed:
the cost of summarizing N messages is linear in N, never N squared.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence

from ..messages import Message

__all__ = ["PrefixDigests", "chain_digest"]


def chain_digest(previous: str, message: Message) -> str:
    """``d(i + 1)`` from ``d(i)`` (``previous``) and ``messages[i]``."""
    canonical = json.dumps(
        message, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    digest = hashlib.sha256(previous.encode("ascii"))
    digest.update(b"\x00")
    digest.update(canonical.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


class PrefixDigests:
    """The prefix digests of one history, remembered per message (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[Message] = []  # the messages the digests were computed from
        self._digests: list[str] = []  # _digests[i] = d(i + 1)

    def of(self, messages: Sequence[Message], end: int) -> str:
        """The prefix digest of ``messages[:end]`` (``""`` for ``end == 0``)."""
        if end <= 0:
            return ""
        if end > len(messages):
            raise ValueError(f"end={end} is past the history's {len(messages)} messages")
        with self._lock:
            known = self._messages
            same = min(len(known), end)
            # Equal lists: the same objects compare by identity (C speed); a replaced
            # history's messages by content, which is what the digest proves anyway.
            if known[:same] != list(messages[:same]):
                same = next(index for index in range(same) if known[index] != messages[index])
                del known[same:], self._digests[same:]
            digests = self._digests
            for index in range(len(known), end):
                message = messages[index]
                digests.append(chain_digest(digests[-1] if digests else "", message))
                known.append(message)
            return digests[end - 1]
