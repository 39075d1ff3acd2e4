"""Waiting readers of a Redis store's event logs share one ``XREAD BLOCK`` per store object
and process (``stores._redis_waits``): a reader of a run the blocked command does not cover
ends it (the wake stream), idle readers cost no command while they wait, readers at
different numbers each get what they lack, and a server that goes away wakes every reader
with the error. A real redis-server; the appends come through another store object, as from
another process."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_sync.errors import StoreUnavailableError
from agent_sync.stores import RunEvent
from agent_sync.stores import _redis_waits as waits_module
from agent_sync.testing.redis_server import RedisServer

redis = pytest.importorskip("redis")
from agent_sync.stores import RedisRunStore  # noqa: E402

pytestmark = pytest.mark.timeout(120)

HOUR = 3600.0
WAIT = 30.0  # the longest a test waits for what must happen (a hang fails, not a slow box)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own: its command counts and clients are the test's alone."""
    server = RedisServer.start(tmp_path)
    try:
        yield server
    finally:
        server.kill()


def _stores(server: RedisServer) -> tuple[RedisRunStore, RedisRunStore]:
    """The waiting store object, and another on the same data (as another process's)."""
    prefix = f"w{uuid.uuid4().hex[:10]}:"
    return (
        RedisRunStore(redis.Redis(port=server.port), prefix=prefix),
        RedisRunStore(redis.Redis(port=server.port), prefix=prefix),
    )


def _read_in_thread(
    store: RedisRunStore, run_id: str, *, after: int, timeout: float = WAIT
) -> queue.SimpleQueue[list[RunEvent] | BaseException]:
    got: queue.SimpleQueue[list[RunEvent] | BaseException] = queue.SimpleQueue()

    def read() -> None:
        try:
            got.put(store.read_events(run_id, after=after, timeout=timeout))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got.put(exc)

    threading.Thread(target=read, daemon=True).start()
    return got


def _blocked_reads(server: RedisServer) -> int:
    admin = redis.Redis(port=server.port)
    try:
        return sum(
            1 for c in admin.client_list() if c.get("cmd") == "xread" and "b" in c.get("flags", "")
        )
    finally:
        admin.close()


def _until(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` (a look at the server's state) holds within WAIT."""
    pause = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return False


@pytest.fixture
def hour_long_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader thread's XREAD blocks for an hour: only a wake (data, a poke) ends it."""
    monkeypatch.setattr(waits_module, "READER_BLOCK_S", HOUR)
    from agent_sync.stores import _redis_events

    monkeypatch.setattr(_redis_events, "READER_BLOCK_S", HOUR)


@pytest.mark.usefixtures("hour_long_blocks")
def test_a_reader_of_a_run_the_blocked_read_does_not_cover_ends_it(
    own_server: RedisServer,
) -> None:
    store, other = _stores(own_server)
    other.append_events("first", [{"n": 1}], after=0)
    other.append_events("second", [{"n": 1}], after=0)
    first = _read_in_thread(store, "first", after=1)
    assert _until(lambda: _blocked_reads(own_server) == 1)  # blocked, for an hour, on "first"
    second = _read_in_thread(store, "second", after=1)
    other.append_events("second", [{"n": 2}], after=1)
    assert [(e.seq, e.data) for e in second.get(timeout=WAIT)] == [(2, {"n": 2})]  # type: ignore[union-attr]
    other.append_events("first", [{"n": 2}], after=1)
    assert [e.seq for e in first.get(timeout=WAIT)] == [2]  # type: ignore[union-attr]
    assert _blocked_reads(own_server) <= 1  # the store's one reader, never one per waiting run


def test_idle_readers_cost_no_command_while_they_wait(own_server: RedisServer) -> None:
    """40 readers of 40 silent logs, each waiting 1.5 s: before, each sent an XREAD BLOCK
    of 1 s twice over (80 in all); now each costs what registering costs (a read and a
    wake), and the store's one blocked command covers all of them."""
    store, other = _stores(own_server)
    run_ids = [f"r{n}" for n in range(40)]
    for run_id in run_ids:
        other.append_events(run_id, [{"n": 1}], after=0)
    admin = redis.Redis(port=own_server.port)
    admin.config_resetstat()
    readers = [_read_in_thread(store, run_id, after=1, timeout=1.5) for run_id in run_ids]
    assert all(reader.get(timeout=WAIT) == [] for reader in readers)
    calls = {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in admin.info("commandstats").items()
    }
    admin.close()
    # Registering: at most one XRANGE and one wake (XADD + PEXPIRE) per reader, and one
    # XREAD per wake; the rest of the wait is one XREAD blocking for READER_BLOCK_S (5 s).
    assert calls.get("xrange", 0) <= len(run_ids)
    assert calls.get("xadd", 0) <= len(run_ids)
    assert calls.get("xread", 0) <= len(run_ids) + 3


def test_readers_at_different_numbers_each_get_what_they_lack(own_server: RedisServer) -> None:
    store, other = _stores(own_server)
    other.append_events("r", [{"n": 1}], after=0)
    behind = _read_in_thread(store, "r", after=1)
    ahead = _read_in_thread(store, "r", after=2)  # (a reconnect that claims more than there is)
    other.append_events("r", [{"n": 2}], after=1)
    assert [e.seq for e in behind.get(timeout=WAIT)] == [2]  # type: ignore[union-attr]
    other.append_events("r", [{"n": 3}, {"n": 4}], after=2)
    assert [e.seq for e in ahead.get(timeout=WAIT)] == [3, 4]  # type: ignore[union-attr]
    again = _read_in_thread(store, "r", after=2)
    assert [e.seq for e in again.get(timeout=WAIT)] == [3, 4]  # type: ignore[union-attr]


def test_a_server_that_goes_away_wakes_every_waiting_reader_with_the_error(
    tmp_path: Path,
) -> None:
    server = RedisServer.start(tmp_path)
    try:
        prefix = f"w{uuid.uuid4().hex[:10]}:"
        client = redis.Redis(port=server.port, socket_timeout=10, retry=None)
        store = RedisRunStore(client, prefix=prefix)
        for n in range(5):
            store.append_events(f"r{n}", [{"n": 1}], after=0)
        readers = [_read_in_thread(store, f"r{n}", after=1, timeout=HOUR) for n in range(5)]
        assert _until(lambda: _blocked_reads(server) == 1)
    finally:
        server.kill()
    for reader in readers:
        assert isinstance(reader.get(timeout=WAIT), StoreUnavailableError)


def _wait_in_forked_child(store: RedisRunStore, out: Any) -> None:
    events = store.read_events("child-run", after=0, timeout=WAIT)
    out.put([e.seq for e in events])


def test_a_forked_child_waits_with_a_reader_of_its_own(own_server: RedisServer) -> None:
    """As under gunicorn --preload or Celery's prefork pool: the child inherits a store
    object whose reader thread is blocked in the parent. Both processes' waits are heard."""
    store, other = _stores(own_server)
    other.append_events("parent-run", [{"n": 1}], after=0)
    parent = _read_in_thread(store, "parent-run", after=1)
    assert _until(lambda: _blocked_reads(own_server) == 1)  # the parent's reader is blocked
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_wait_in_forked_child, args=(store, out))
    child.start()
    assert _until(lambda: _blocked_reads(own_server) == 2)  # the child's own reader
    other.append_events("child-run", [{"n": 1}], after=0)
    assert out.get(timeout=WAIT) == [1]
    child.join(WAIT)
    assert child.exitcode == 0
    other.append_events("parent-run", [{"n": 2}], after=1)
    assert [e.seq for e in parent.get(timeout=WAIT)] == [2]  # type: ignore[union-attr]
