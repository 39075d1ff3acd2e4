"""A per-process cache of the conversation logs agents here have synced with a store.

A web handler builds its agent per request; without this, each new agent reads the whole
log, so serving a long conversation costs more (3-5 ms at 1,000 messages on SQLite, 10x the
10-message cost). With it, a new agent starts from the log this process last synced for the
same (store, conversation) and reads only the tail, as a kept agent does.

Why sharing is safe: :func:`~agent_sync.run._durable.load_log` always reads the last synced
message again (``since = synced - 1``), and a log is only ever appended to, its last message
rewritten, or replaced as a whole (a new generation, read again from the start). So the
messages an agent takes from here are ones no agent changes in place: an agent only ever
changes its history's last message, which it read from the store itself. (A user who edits
``agent.messages`` in place, which the docs forbid, could see that edit in another agent of
the same conversation in this process; assigning a new history is the way to change it.)

Bounded: least recently used conversations are dropped past :data:`MAX_MESSAGES` messages
in all. Thread rules: one plain lock, taken with ``with`` (Ctrl-C safe, see
:mod:`agent_sync._signal_safe`), never across a store call; reset in a forked child.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ..messages import Message

__all__ = ["MAX_MESSAGES", "forget_all", "recall", "remember"]

MAX_MESSAGES = 50_000
"""The cache's bound, in messages over all conversations (each shared with the agents that
hold them, so the cost is mostly the references)."""


class _Log(NamedTuple):
    store: weakref.ref[object]  # the entry is for this store only (ids are reused)
    messages: tuple[Message, ...]  # the log's first messages
    generation: int  # ... as read under this generation of the log


_lock = threading.Lock()
_logs: OrderedDict[tuple[int, str], _Log] = OrderedDict()
_size = 0  # messages held, over all entries


def recall(store: object, conversation_id: str) -> tuple[list[Message], int, int]:
    """What this process last synced of the conversation: ``(messages, synced,
    generation)`` for :func:`load_log` (a new list; ``([], 0, 0)`` if nothing)."""
    key = (id(store), conversation_id)
    with _lock:
        entry = _logs.get(key)
        if entry is None or entry.store() is not store:
            return [], 0, 0
        _logs.move_to_end(key)
    return list(entry.messages), len(entry.messages), entry.generation


def remember(
    store: object, conversation_id: str, messages: list[Message], synced: int, generation: int
) -> None:
    """Record that ``messages[:synced]`` are the log's first messages under ``generation``."""
    global _size
    if synced <= 1:
        return  # nothing a new agent would take from here (it reads the last one again)
    try:
        ref = weakref.ref(store)
    except TypeError:
        return  # a store that cannot be weakly referenced is not cached
    entry = _Log(ref, tuple(messages[:synced]), generation)
    key = (id(store), conversation_id)
    with _lock:
        old = _logs.pop(key, None)
        if old is not None:
            _size -= len(old.messages)
        _logs[key] = entry
        _size += len(entry.messages)
        while _size > MAX_MESSAGES and _logs:
            _, dropped = _logs.popitem(last=False)
            _size -= len(dropped.messages)


def forget_all() -> None:
    """Empty the cache (tests, and a forked child's fresh start)."""
    global _lock, _size
    _lock = threading.Lock()  # a fork may have copied it held
    _logs.clear()
    _size = 0


os.register_at_fork(after_in_child=forget_all)
