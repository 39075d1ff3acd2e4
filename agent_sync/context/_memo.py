"""Where summaries are kept: beside the conversation in the agent's store, so every worker
of the conversation reuses them, or in the agent itself without a store.

A summary is a :class:`Summary`: its text and the part of the log it covers (``end``, with
the prefix digest of every message before ``end``, :mod:`._coverage`, so a summary of a
replaced log is never reused). Each conversation keeps its latest summary; a write never
replaces a summary that covers more, unless it replaces the very summary its writer read
(one it found not to be of the log: a replaced history, or a summary stored by an older
version, whose coverage cannot be proven and which is therefore never used).

The stores have no conversation-scoped key/value of their own, so this module keeps it
for each store of the package on that store's own storage: a dict beside a
:class:`~agent_sync.stores.MemoryRunStore`, a ``context_summaries`` table in a
:class:`~agent_sync.stores.SQLiteRunStore`'s file, and a key under a
:class:`~agent_sync.stores.RedisRunStore`'s prefix. Another store keeps summaries per
process (logged once).
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..stores import MemoryRunStore, RedisRunStore, SQLiteRunStore
from ..stores._redis_client import text, translated

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


_SQLITE_TABLE = """
CREATE TABLE IF NOT EXISTS context_summaries (
    conversation_id TEXT PRIMARY KEY,
    end_position INTEGER NOT NULL,
    summary TEXT NOT NULL
)
"""


class _SQLite:
    """A row of the ``context_summaries`` table in the store's file (created on first use)."""

    def __init__(self, store: Any, conversation_id: str) -> None:
        self._connections = store._connections
        self._conversation_id = conversation_id
        self._ready = False

    def _ensure_table(self) -> None:
        if not self._ready:
            with self._connections.transaction(write=True) as db:
                db.execute(_SQLITE_TABLE)
            self._ready = True

    def get(self) -> Summary | None:
        self._ensure_table()
        with self._connections.transaction(write=False) as db:
            row = db.execute(
                "SELECT summary FROM context_summaries WHERE conversation_id = ?",
                (self._conversation_id,),
            ).fetchone()
        return Summary.from_json(row[0]) if row is not None else None

    def put(self, summary: Summary, *, replacing: Summary | None) -> None:
        self._ensure_table()
        with self._connections.transaction(write=True) as db:
            db.execute(
                "INSERT INTO context_summaries (conversation_id, end_position, summary) "
                "VALUES (?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
                "end_position = excluded.end_position, summary = excluded.summary "
                "WHERE excluded.end_position >= context_summaries.end_position "
                "OR context_summaries.summary = ?",
                (
                    self._conversation_id,
                    summary.end,
                    summary.to_json(),
                    replacing.raw if replacing is not None else None,
                ),
            )


_REDIS_PUT = """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[3] then
    local ok, kept = pcall(cjson.decode, current)
    if ok and tonumber(kept['end']) and tonumber(kept['end']) > tonumber(ARGV[1]) then
        return 0
    end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


class _Redis:
    """A key ``<prefix>summary:<conversation_id>`` on the store's server."""

    def __init__(self, store: Any, conversation_id: str) -> None:
        self._client = store._client
        self._key = f"{store.prefix}summary:{conversation_id}"

    def get(self) -> Summary | None:
        with translated():
            raw = self._client.get(self._key)
        return Summary.from_json(text(raw)) if raw is not None else None

    def put(self, summary: Summary, *, replacing: Summary | None) -> None:
        expected = replacing.raw if replacing is not None else ""
        with translated():
            self._client.eval(_REDIS_PUT, 1, self._key, summary.end, summary.to_json(), expected)


_WARNED: set[str] = set()


def memo_for(store: object | None, conversation_id: str | None) -> SummaryMemo:
    """Where the summaries of this agent's conversation are kept."""
    if store is None or conversation_id is None:
        return _Local()
    if isinstance(store, SQLiteRunStore):
        return _SQLite(store, conversation_id)
    if isinstance(store, RedisRunStore):
        return _Redis(store, conversation_id)
    if not isinstance(store, MemoryRunStore) and type(store).__name__ not in _WARNED:
        _WARNED.add(type(store).__name__)
        logger.warning(
            "store=<%s> | summaries are kept in this process only (the store has no place "
            "for them)",
            type(store).__name__,
        )
    return _beside(store, conversation_id)
