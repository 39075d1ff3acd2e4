"""Fixtures shared by the store tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], RunStore]]:
    """Builds store objects on one set of data (each call: another object, as another
    worker would have)."""
    if request.param == "memory":
        shared = MemoryRunStore()
        yield lambda: shared
    elif request.param == "sqlite":
        path = str(tmp_path / "agent_sync.db")
        yield lambda: SQLiteRunStore(path)
    else:
        server = request.getfixturevalue("redis_server")
        import redis

        from agent_sync.stores import RedisRunStore

        prefix = f"rh{uuid.uuid4().hex[:10]}:"
        yield lambda: RedisRunStore(redis.Redis(port=server.port), prefix=prefix)
