"""What an idle process waits on, and what still wakes it at once.

The store watcher no longer polls: on the memory and Redis stores it waits until the next
lease renewal (at most ``IDLE_S``), woken when a run registers and by pub/sub. These tests
make that safety poll an hour long, so only the wakes themselves can pass them: a signal
queued before its run was watched, a short lease registered during a long wait, and a
pub/sub connection killed under the listener. SQLite followers: waiting readers of many logs
share one poller per store and process, and still hear another process's append.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_sync.cancel import CancelMode
from agent_sync.stores import MemoryRunStore, RunEvent, RunStore, SQLiteRunStore, _watcher
from agent_sync.testing.redis_server import RedisServer
from agent_sync.testing.run_store_contract import make_state
from tests.fixtures.processes import child_context

pytestmark = pytest.mark.timeout(120)

HOUR = 3600.0


class _Recorder:
    """A run driver for the watcher: records what it is handed."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.reasons: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        self.reasons.put(reason)
        self.cancelled.set()
        return True

    def inject(self, content: object) -> None:
        pass


def _observed(base: type[Any]) -> type[Any]:
    """``base`` whose ``renew`` also sets ``renewed`` (the real store's renew runs)."""

    def renew(self: Any, run_id: str, *, owner: str, lease_s: float) -> bool:
        renewed: bool = base.renew(self, run_id, owner=owner, lease_s=lease_s)
        self.renewed[run_id].set()
        return renewed

    return type(f"Observed{base.__name__}", (base,), {"renew": renew})


@pytest.fixture(params=["memory", "redis"])
def stores(request: pytest.FixtureRequest) -> Iterator[Callable[[], RunStore]]:
    """Store objects on one set of data (for Redis, each another object: as another
    process's), whose ``renewed[run_id]`` event is set when the watcher renews that run."""
    made: list[Any] = []

    def make() -> RunStore:
        if request.param == "memory":
            if made:
                return made[0]  # type: ignore[no-any-return]
            store = _observed(MemoryRunStore)()
        else:
            import redis

            from agent_sync.stores import RedisRunStore

            server = request.getfixturevalue("redis_server")
            store = _observed(RedisRunStore)(redis.Redis(port=server.port), prefix=prefix)
        store.renewed = _Renewed()
        made.append(store)
        return store  # type: ignore[no-any-return]

    prefix = f"idle{uuid.uuid4().hex[:10]}:"
    yield make
    for store in made:
        _stop_watcher(store)


class _Renewed(dict[str, threading.Event]):
    def __missing__(self, run_id: str) -> threading.Event:
        event = self[run_id] = threading.Event()
        return event


@pytest.fixture
def hour_long_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher's safety poll an hour long: only a wake ends its wait."""
    monkeypatch.setattr(_watcher, "IDLE_S", HOUR)


def _stop_watcher(store: RunStore) -> None:
    watcher = _watcher.watch(store)
    with watcher._lock:
        watcher._entries.clear()
        thread = watcher._thread
    if thread is not None and watcher._wake is not None:
        watcher._wake()  # ends its hour-long wait: it finds nothing to watch and returns
        thread.join(30)
        assert not thread.is_alive()


def _begin(store: RunStore, *, lease_s: float = HOUR) -> str:
    state = make_state()
    store.begin(f"c-{state.run_id}", state, owner="me", lease_s=lease_s, expected_length=0)
    return state.run_id


@pytest.mark.usefixtures("hour_long_waits")
def test_a_signal_queued_before_its_run_is_watched_reaches_it_at_once(
    stores: Callable[[], RunStore],
) -> None:
    store, other = stores(), stores()
    watcher = _watcher.watch(store)
    first, first_run = _Recorder(), _begin(store)
    watcher.add(first_run, first, owner="me", lease_s=HOUR)
    second, second_run = _Recorder(), _begin(store)
    assert other.cancel(second_run, "sent before the owner watched it")
    assert other.cancel(first_run, "sent after it")
    # Signals are heard in order: once the first run has its cancel, the watcher has passed
    # over the second run's (not watched then), and is back in its hour-long wait.
    assert first.reasons.get(timeout=30) == "sent after it"
    watcher.add(second_run, second, owner="me", lease_s=HOUR)
    assert second.cancelled.wait(30)  # the registration woke the watcher: it took the signal


@pytest.mark.usefixtures("hour_long_waits")
def test_a_short_lease_registered_during_a_long_wait_is_renewed_in_time(
    stores: Callable[[], RunStore],
) -> None:
    store: Any = stores()
    watcher = _watcher.watch(store)
    long_run = _begin(store)
    watcher.add(long_run, _Recorder(), owner="me", lease_s=HOUR)  # a wait of an hour
    short_run = _begin(store, lease_s=30)
    watcher.add(short_run, _Recorder(), owner="me", lease_s=0.3)  # renewed every 0.1 s
    assert store.renewed[short_run].wait(30)
    assert not store.renewed[long_run].is_set()


def _listening(port: int, prefix: str) -> tuple[RunStore, RunStore, Any]:
    """A Redis store whose watcher listens (a first run registered, its cancel from another
    store object heard), that other store object, and the watcher."""
    import redis

    from agent_sync.stores import RedisRunStore

    store = RedisRunStore(redis.Redis(port=port), prefix=prefix)
    other = RedisRunStore(redis.Redis(port=port), prefix=prefix)
    watcher = _watcher.watch(store)
    first, first_run = _Recorder(), _begin(store)
    watcher.add(first_run, first, owner="me", lease_s=HOUR)
    assert other.cancel(first_run, "the listener is subscribed")
    assert first.cancelled.wait(30)
    return store, other, watcher


@pytest.mark.usefixtures("hour_long_waits")
def test_a_cancel_sent_while_the_pubsub_connection_was_down_still_arrives(
    tmp_path: Path,
) -> None:
    import redis

    server = RedisServer.start(tmp_path)  # its own server: the test kills its connections
    try:
        store, other, watcher = _listening(server.port, "killed:")
        second, second_run = _Recorder(), _begin(store)
        watcher.add(second_run, second, owner="me", lease_s=HOUR)
        admin = redis.Redis(port=server.port)
        assert admin.client_kill_filter(_type="pubsub") >= 1  # redis-py reconnects by itself
        assert other.cancel(second_run, "sent around the reconnection")
        assert second.cancelled.wait(30)  # taken after subscribing again, or heard
        admin.close()
        _stop_watcher(store)
    finally:
        server.kill()


@pytest.mark.usefixtures("hour_long_waits")
def test_a_run_registering_wakes_the_redis_watcher_without_a_command(
    redis_server: RedisServer,
) -> None:
    """The registration wakes the process's waiting listener locally: the take that looks at
    the new run's signals is all it sends (a ``PUBLISH`` to itself was a round trip from the
    waker, and on a Redis Cluster a message every master relays)."""
    from tests.stores.redis_monitor import RoundTrips

    prefix = f"wake{uuid.uuid4().hex[:10]}:"
    store, other, watcher = _listening(redis_server.port, prefix)
    second, second_run = _Recorder(), _begin(store)
    assert other.cancel(second_run, "sent before the owner watched it")
    with RoundTrips([redis_server.port], prefix) as trips:
        watcher.add(second_run, second, owner="me", lease_s=HOUR)
        assert second.cancelled.wait(30)  # woken: it took the signal
    assert "take" in trips.names
    assert "PUBLISH" not in trips.names
    _stop_watcher(store)


def _append_in_child(path: str, run_id: str) -> None:
    SQLiteRunStore(path).append_events(run_id, [{"from": "child"}], after=1)


def test_sqlite_readers_of_many_logs_share_one_poller_and_hear_another_process(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "follow.db")
    store = SQLiteRunStore(path)
    run_ids = [f"r{n}" for n in range(50)]
    for run_id in run_ids:
        store.append_events(run_id, [{"n": 1}], after=0)
    got: dict[str, list[RunEvent]] = {}

    def follow(run_id: str) -> None:
        got[run_id] = store.read_events(run_id, after=1, timeout=90)

    readers = {r: threading.Thread(target=follow, args=(r,), daemon=True) for r in run_ids}
    for reader in readers.values():
        reader.start()
    child = child_context().Process(target=_append_in_child, args=(path, "r7"))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    readers["r7"].join(60)
    assert [(e.seq, e.data) for e in got["r7"]] == [(2, {"from": "child"})]
    pollers = [t for t in threading.enumerate() if t.name == "agent_sync-sqlite-events"]
    assert len(pollers) == 1  # one per store and process, whatever the number of readers
    assert all(readers[r].is_alive() for r in run_ids if r != "r7")  # no log of theirs moved
    for run_id in run_ids:
        if run_id != "r7":
            store.append_events(run_id, [{"n": 2}], after=1)  # this object's: a direct wake
    for run_id in run_ids:
        readers[run_id].join(60)
        assert [e.seq for e in got[run_id]] == [2]


def test_sqlite_reader_hears_another_store_object_on_the_same_file(tmp_path: Path) -> None:
    path = str(tmp_path / "two.db")
    reading, writing = SQLiteRunStore(path), SQLiteRunStore(path)
    writing.append_events("r1", [{"n": 1}], after=0)
    got: list[RunEvent] = []
    reader = threading.Thread(
        target=lambda: got.extend(reading.read_events("r1", after=1, timeout=90))
    )
    reader.start()
    writing.append_events("r1", [{"n": 2}], after=1)
    reader.join(60)
    assert [(e.seq, e.data) for e in got] == [(2, {"n": 2})]
