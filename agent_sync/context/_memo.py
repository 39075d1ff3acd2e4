"""Where summaries are kept: beside the conversation in the agent's store, so every worker
of the conversation reuses them, or in the agent itself without a store.

A summary is a :class:`Summary`: its text and the part of the log it covers (``end``, with a
digest of the message before ``end`` so a summary of a replaced log is never reused). Each
conversation keeps its latest summary; a write never replaces a summary that covers more.

The stores have no conversation-scoped key/value of their own, so this module keeps it
for each store of the package on that store's own storage: a dict beside a
:class:`~agent_sync.stores.MemoryRunStore`, a ``context_summaries`` table in a
:class:`~agent_sync.stores.SQLiteRunStore`'s file, and a key under a
:class:`~agent_sync.stores.RedisRunStore`'s prefix. Another store keeps summaries per
process (logged once).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from ..messages import Message
from ..stores import MemoryRunStore, RedisRunStore, SQLiteRunStore
from ..stores._redis_client import text, translated

__all__ = ["Summary", "SummaryMemo", "digest_of", "memo_for"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    """A summary of a conversation's log before position ``end``."""

    end: int
    digest: str
    text: str

    def to_json(self) -> str:
        return json.dumps({"end": self.end, "digest": self.digest, "text": self.text})

    @classmethod
    def from_json(cls, raw: str | bytes | None) -> Summary | None:
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return cls(end=int(data["end"]), digest=str(data["digest"]), text=str(data["text"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("an unreadable stored summary was ignored")
            return None


def digest_of(message: Message) -> str:
    """A short fingerprint of one message (the last one a summary covers)."""
    text = json.dumps(message, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class SummaryMemo(Protocol):
    """A conversation's latest summary."""

    def get(self) -> Summary | None: ...

    def put(self, summary: Summary) -> None:
        """Keep ``summary`` unless the one kept covers more of the log."""
        ...


class _Local:
    """In memory (an agent without a store, or beside a memory store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._summary: Summary | None = None

    def get(self) -> Summary | None:
        return self._summary

    def put(self, summary: Summary) -> None:
        with self._lock:
            if self._summary is None or self._summary.end <= summary.end:
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

    def put(self, summary: Summary) -> None:
        self._ensure_table()
        with self._connections.transaction(write=True) as db:
            db.execute(
                "INSERT INTO context_summaries (conversation_id, end_position, summary) "
                "VALUES (?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
                "end_position = excluded.end_position, summary = excluded.summary "
                "WHERE excluded.end_position >= context_summaries.end_position",
                (self._conversation_id, summary.end, summary.to_json()),
            )


_REDIS_PUT = """
local current = redis.call('GET', KEYS[1])
if current then
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

    def put(self, summary: Summary) -> None:
        with translated():
            self._client.eval(_REDIS_PUT, 1, self._key, summary.end, summary.to_json())


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
