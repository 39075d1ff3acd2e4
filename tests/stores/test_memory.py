"""MemoryRunStore passes the run store contract."""

from __future__ import annotations

from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing.run_store_contract import RunStoreContract


class TestMemoryRunStore(RunStoreContract):
    def make_store(self) -> RunStore:
        return MemoryRunStore()


def test_memory_store_is_a_run_store() -> None:
    assert isinstance(MemoryRunStore(), RunStore)
