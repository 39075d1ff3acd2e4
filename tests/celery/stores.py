"""The store a test and its Celery worker share, named by two environment variables."""

from __future__ import annotations

import os

from agent_sync.stores import RedisRunStore, SQLiteRunStore
from agent_sync.stores._event_log import EventLogStore

STORE = "AGENT_SYNC_TEST_STORE"  # sqlite:///<absolute path> or redis://host:port/db
PREFIX = "AGENT_SYNC_TEST_PREFIX"  # the Redis store's key prefix
LEASE_S = 3.0  # short: a killed worker's run is lost, then found, within the test


def store_from_env() -> EventLogStore:
    """The store the environment names (a new object: each process has its own)."""
    url = os.environ[STORE]
    if url.startswith("sqlite:///"):
        return SQLiteRunStore(url.removeprefix("sqlite:///"), lease_s=LEASE_S)
    import redis

    return RedisRunStore(redis.Redis.from_url(url), prefix=os.environ[PREFIX], lease_s=LEASE_S)
