"""Run stores: conversations, runs and pending approvals that outlive a process.

- :class:`RunStore`: the protocol (the rules are in its module's docstring);
- :class:`MemoryRunStore`: in one process (tests, single-process apps);
- :class:`SQLiteRunStore`: the standard library's ``sqlite3``, many processes on one host;
- :class:`RedisRunStore`: a Redis server (redis-py, ``pip install agent_sync[redis]``),
  processes on many hosts.

Every store passes one contract suite, :mod:`agent_sync.testing.run_store_contract`.
"""

from __future__ import annotations

from ._memory import MemoryRunStore
from ._protocol import ConversationRecord, RunEvent, RunSignal, RunStore, StoredRun
from ._redis import RedisRunStore
from ._sqlite import SQLiteRunStore

__all__ = [
    "ConversationRecord",
    "MemoryRunStore",
    "RedisRunStore",
    "RunEvent",
    "RunSignal",
    "RunStore",
    "SQLiteRunStore",
    "StoredRun",
]
