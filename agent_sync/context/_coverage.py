"""Which part of a log a summary covers, proven by a digest of every covered message.

A summary of ``messages[:end]`` is kept with the *prefix digest* of ``messages[:end]``: a
chain ``d(0) = ""``, ``d(i + 1) = sha256(d(i), canonical JSON of messages[i])``. The digest
of one message would not do: chats repeat messages ("Noted.", "OK"), so a replaced history
can have the same message at the same position and still be another conversation. Two logs
have the same prefix digest only if they hold the same messages up to ``end``.

:class:`PrefixDigests` remembers the chain for the message objects it was computed from, so
checking a summary again on the same (or a grown) history costs one comparison of the
lists (the same objects compare at C speed), and only new or changed messages are hashed:
the cost of summarizing N messages is linear in N, never N squared. Agents of a conversation
in one process share them (:func:`shared_digests`: a web handler builds its agent per
request, and the messages it reads are the ones this process last read, see
:mod:`agent_sync.run._log_cache`), so a new agent does not hash the whole log again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence

from ..messages import Message

__all__ = ["MAX_SHARED", "PrefixDigests", "chain_digest", "shared_digests"]


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
        with self._lock:
            return self._extend(messages, end)[end - 1]

    def chain(self, messages: Sequence[Message], end: int) -> list[str]:
        """The prefix digests of ``messages[:1]`` to ``messages[:end]``, in one pass: what
        a caller checking many ends of one history (a summary made in pieces) looks up,
        where calling :meth:`of` for each would compare the prefix again each time."""
        if end <= 0:
            return []
        with self._lock:
            return self._extend(messages, end)[:end]

    def _extend(self, messages: Sequence[Message], end: int) -> list[str]:
        """The digests, computed at least up to ``end`` for ``messages`` (lock held)."""
        if end > len(messages):
            raise ValueError(f"end={end} is past the history's {len(messages)} messages")
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
        return digests


MAX_SHARED = 32
"""The conversations whose digests a process keeps for its next agents (least recently
used dropped first)."""

_shared_lock = threading.Lock()
_shared: OrderedDict[tuple[int, str], tuple[weakref.ref[object], PrefixDigests]] = OrderedDict()


def shared_digests(store: object, conversation_id: str) -> PrefixDigests:
    """The prefix digests of a conversation of ``store``, shared by this process's agents."""
    key = (id(store), conversation_id)
    with _shared_lock:
        entry = _shared.get(key)
        if entry is not None and entry[0]() is store:
            _shared.move_to_end(key)
            return entry[1]
        digests = PrefixDigests()
        _shared[key] = (weakref.ref(store), digests)
        while len(_shared) > MAX_SHARED:
            _shared.popitem(last=False)
        return digests
