"""Where summaries are kept: beside the conversation in the agent's store, so every worker
of the conversation reuses them, or in the agent itself without a store.

A summary is a :class:`Summary`: its text and the part of the log it covers (``end``, with
the prefix digest of every message before ``end``, :mod:`._coverage`, so a summary of a
replaced log is never reused). Each conversation keeps its latest summary; a write never
replaces a summary that covers more, unless it replaces the very summary its writer read
(one it found not to be of the log: a replaced history, or a summary stored by an older
version, whose coverage cannot be proven and which is therefore never used).

With a store, the summary is the conversation's value under
:data:`~agent_sync.stores._value_rules.SUMMARY_KEY` (:meth:`RunStore.get_value`), and a
write is a compare-and-set on the value read (:meth:`RunStore.set_value`), read again and
decided again when another worker wrote first; nothing of a store but its protocol is used.
A store written before the protocol had values (no ``get_value``/``set_value``) keeps
summaries in this process, beside the store (logged once per store type): they are made
again in another process, and nothing of the conversation is lost (its log keeps every
message).
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..stores import RunStore
from ..stores._value_rules import MAX_VALUE_BYTES, SUMMARY_KEY

__all__ = ["Summary", "SummaryMemo", "memo_for"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    """A summary of a conversation's log before position ``end``.

    ``digest`` is the prefix digest of ``log[:end]`` (:mod:`._coverage`); ``""`` for a
    stored summary whose coverage cannot be proven (written by an older version, or
    unreadable): it is never used, only replaced. ``stored`` is the exact value read from
    the store (for a write that replaces it).
    """

    end: int
    digest: str
    text: str
    stored: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> str:
        return json.dumps({"end": self.end, "prefix": self.digest, "text": self.text})

    @property
    def raw(self) -> str:
        """The value as stored: the one read, or the one this summary is written as."""
        return self.stored if self.stored is not None else self.to_json()

    @classmethod
    def from_json(cls, raw: str | bytes | None) -> Summary | None:
        """The summary stored as ``raw``; an unprovable one if ``raw`` is of an older
        version (a single message's ``digest``) or unreadable."""
        if raw is None:
            return None
        stored = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        try:
            data = json.loads(stored)
            return cls(
                end=int(data["end"]),
                digest=str(data.get("prefix", "")),
                text=str(data["text"]),
                stored=stored,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            logger.warning("an unreadable stored summary was ignored")
            return cls(end=0, digest="", text="", stored=stored)


class SummaryMemo(Protocol):
    """A conversation's latest summary."""

    def get(self) -> Summary | None: ...

    def put(self, summary: Summary, *, replacing: Summary | None) -> None:
        """Keep ``summary`` unless the one kept covers more of the log and is not
        ``replacing`` (the summary its writer read and found stale or extended)."""
        ...


class _Local:
    """In memory (an agent without a store, or beside a memory store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._summary: Summary | None = None

    def get(self) -> Summary | None:
        return self._summary

    def put(self, summary: Summary, *, replacing: Summary | None) -> None:
        with self._lock:
            kept = self._summary
            if kept is None or kept is replacing or kept.end <= summary.end:
                self._summary = summary


_BESIDE: weakref.WeakKeyDictionary[Any, dict[str, _Local]] = weakref.WeakKeyDictionary()
_BESIDE_LOCK = threading.Lock()


def _beside(store: object, conversation_id: str) -> _Local:
    """The in-memory summary of a conversation, kept beside (and as long as) ``store``."""
    with _BESIDE_LOCK:
        by_conversation = _BESIDE.setdefault(store, {})
        return by_conversation.setdefault(conversation_id, _Local())


_ATTEMPTS = 20  # compare-and-sets lost in a row to other writers before giving up


class _Stored:
    """The conversation's value under ``SUMMARY_KEY`` in the store (any store with values)."""

    def __init__(self, store: RunStore, conversation_id: str) -> None:
        self._store = store
        self._conversation_id = conversation_id

    def get(self) -> Summary | None:
        return Summary.from_json(self._store.get_value(self._conversation_id, SUMMARY_KEY))

    def put(self, summary: Summary, *, replacing: Summary | None) -> None:
        value = summary.to_json()
        if len(value.encode("utf-8", "replace")) > MAX_VALUE_BYTES:
            logger.warning("chars=<%d> | a summary too large to store was not kept", len(value))
            return
        for _ in range(_ATTEMPTS):
            current = self._store.get_value(self._conversation_id, SUMMARY_KEY)
            kept = Summary.from_json(current)
            if (
                kept is not None
                and (replacing is None or current != replacing.raw)
                and kept.end > summary.end
            ):
                return  # another worker kept one that covers more
            if self._store.set_value(self._conversation_id, SUMMARY_KEY, value, expected=current):
                return
        logger.warning(  # a cache entry not kept: the next call summarizes again
            "attempts=<%d> | the stored summary kept changing; this one was not kept", _ATTEMPTS
        )


_WARNED: set[str] = set()


def memo_for(store: object | None, conversation_id: str | None) -> SummaryMemo:
    """Where the summaries of this agent's conversation are kept: the store's values, in
    this process without a store (or beside a store without values)."""
    if store is None or conversation_id is None:
        return _Local()
    if callable(getattr(store, "get_value", None)) and callable(getattr(store, "set_value", None)):
        return _Stored(store, conversation_id)  # type: ignore[arg-type]
    if type(store).__name__ not in _WARNED:
        _WARNED.add(type(store).__name__)
        logger.warning(
            "store=<%s> | summaries are kept in this process only (the store has no "
            "get_value/set_value)",
            type(store).__name__,
        )
    return _beside(store, conversation_id)
