"""Run stores: conversations and runs that outlive a process, shared by every process
that opens the same store.

- :class:`RunStore`: the protocol (the rules are in its module's docstring);
- :class:`RunEventLog`: the protocol of a run's event log (what the web layer uses);
- :class:`MemoryRunStore`: in one process (tests, single-process apps);
- :class:`SQLiteRunStore`: the standard library's ``sqlite3``, many processes on one host;
- :class:`RedisRunStore`: a Redis server (redis-py, ``pip install agent_sync[redis]``),
  processes on many hosts.

Every store passes one contract suite, :mod:`agent_sync.testing.run_store_contract`.
"""

from __future__ import annotations

from ._event_log import RunEvent, RunEventLog
from ._memory import MemoryRunStore
from ._protocol import ConversationRecord, RunSignal, RunStore, StoredRun
from ._redis import RedisRunStore
from ._sqlite import SQLiteRunStore

__all__ = [
    "ConversationRecord",
    "MemoryRunStore",
    "RedisRunStore",
    "RunEvent",
    "RunEventLog",
    "RunSignal",
    "RunStore",
    "SQLiteRunStore",
    "StoredRun",
]
