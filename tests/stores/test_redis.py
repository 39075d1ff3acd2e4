"""RedisRunStore against a real redis-server: the contract (with real processes), both
reply decodings and RESP3, prefixes, key expiry, and a server that is down (fail closed)."""

from __future__ import annotations

import os
import resource
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from multiprocessing.context import ForkServerContext
from typing import Any

import pytest

from agent_sync.errors import StoreUnavailableError, UsageError
from agent_sync.stores import RedisRunStore, RunStore
from agent_sync.testing.redis_server import RedisServer
from agent_sync.testing.run_store_contract import RunStoreContract, make_state
from tests.fixtures.processes import child_context

redis = pytest.importorskip("redis", reason="pip install -e '.[redis]'")

from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

from tests.stores.redis_monitor import RoundTrips  # noqa: E402

NO_RETRY = Retry(NoBackoff(), 0)  # redis-py retries a refused connection by default


def _open(port: int, prefix: str) -> RunStore:
    return RedisRunStore(redis.Redis(port=port), prefix=prefix)


class TestRedisRunStore(RunStoreContract):
    @pytest.fixture(autouse=True)
    def _server(self, redis_server: RedisServer) -> None:
        self.port = redis_server.port

    def make_store(self) -> RunStore:
        self.prefix = f"t{uuid.uuid4().hex[:12]}:"  # a fresh, empty store on one server
        return RedisRunStore(redis.Redis(port=self.port), prefix=self.prefix)

    def process_factory(self):  # type: ignore[no-untyped-def]
        return partial(_open, self.port, self.prefix)

    def process_context(self) -> ForkServerContext:
        return child_context()  # forkserver, the package preloaded


class TestRedisRunStoreDecodedReplies(RunStoreContract):
    """The same contract through a client that decodes replies to ``str``."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: RedisServer) -> None:
        self.port = redis_server.port

    def make_store(self) -> RunStore:
        client = redis.Redis(port=self.port, decode_responses=True)
        return RedisRunStore(client, prefix=f"d{uuid.uuid4().hex[:12]}:")


class TestRedisRunStoreResp3(RunStoreContract):
    """The same contract through a RESP3 client (``protocol=3``: some replies are maps)."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: RedisServer) -> None:
        self.port = redis_server.port

    def make_store(self) -> RunStore:
        client = redis.Redis(port=self.port, protocol=3)
        return RedisRunStore(client, prefix=f"r{uuid.uuid4().hex[:12]}:")


def _store(redis_server: RedisServer, **options: Any) -> RedisRunStore:
    return RedisRunStore(
        redis.Redis(port=redis_server.port), prefix=f"x{uuid.uuid4().hex[:12]}:", **options
    )


def test_prefixes_keep_stores_apart(redis_server: RedisServer) -> None:
    one, two = _store(redis_server), _store(redis_server)
    state = make_state()
    one.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    assert two.load("c1").run is None
    assert two.get(state.run_id) is None


def test_a_finished_run_expires_and_its_log_stays(redis_server: RedisServer) -> None:
    store = _store(redis_server, finished_ttl_s=60)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    done = make_state(run_id=state.run_id, status="done", next_step=None)
    store.commit(done, owner="o", version=1)
    client = redis.Redis(port=redis_server.port)
    ttl = client.ttl(f"{store.prefix}run:{state.run_id}")
    assert 0 < ttl <= 60
    assert client.ttl(f"{store.prefix}conv:c1:log") == -1  # logs never expire


def test_a_store_that_is_down_fails_closed_and_keeps_what_was_committed(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> None:
    server = RedisServer.start(tmp_path_factory.mktemp("down"))
    try:
        store = RedisRunStore(
            redis.Redis(port=server.port, socket_timeout=5, retry=NO_RETRY), prefix="down:"
        )
        state = make_state()
        store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
        done = make_state(run_id=state.run_id, status="done", next_step=None)
        store.commit(done, owner="o", version=1)
        port = server.port
        server.kill()
        for action in (
            lambda: store.load("c1"),
            lambda: store.get(state.run_id),
            lambda: store.cancel(state.run_id),
            lambda: store.wait_signals([state.run_id], 0.01),
            lambda: store.append_events(state.run_id, [{"n": 1}], after=0),
            lambda: store.read_events(state.run_id, timeout=0.01),
            lambda: store.begin("c1", make_state(), owner="o", lease_s=30, expected_length=1),
        ):
            with pytest.raises(StoreUnavailableError):
                action()
    finally:
        server.kill()
    # a server back on the same port: the store works again (no state lost in the client)
    folder = tmp_path_factory.mktemp("again")
    with RedisServer.start(folder, port=port):
        assert store.load("c1").messages == ()  # no persistence: a new, empty server
        store.begin("c1", make_state(), owner="o", lease_s=30, expected_length=0)


def test_options_are_checked(redis_server: RedisServer) -> None:
    client = redis.Redis(port=redis_server.port)
    with pytest.raises(UsageError):
        RedisRunStore(client, prefix="")
    with pytest.raises(UsageError):
        RedisRunStore(client, lease_s=0)
    with pytest.raises(UsageError):
        RedisRunStore(client, finished_ttl_s=0)


def test_the_repr_shows_no_credentials(redis_server: RedisServer) -> None:
    client = redis.Redis(
        port=redis_server.port, username="app", password="s3cret-password", retry=NO_RETRY
    )
    store = RedisRunStore(client, prefix="app:")
    assert "s3cret" not in repr(store)
    with pytest.raises(StoreUnavailableError) as caught:
        store.load("c1")  # the server has no such user: AUTH fails
    assert "s3cret" not in str(caught.value)


def test_an_event_log_expires_with_its_run_and_once_complete_after_keep_s(
    redis_server: RedisServer,
) -> None:
    store = _store(redis_server, finished_ttl_s=60)
    client = redis.Redis(port=redis_server.port)
    key = f"{store.prefix}events:r1"
    store.append_events("r1", [{"n": 1}], after=0)
    assert 59_000 < client.pttl(key) <= 60_000  # an open log: finished_ttl_s from its last append
    client.pexpire(key, 5_000)
    store.append_events("r1", [{"n": 2}], after=1)
    assert 59_000 < client.pttl(key) <= 60_000  # renewed by each append
    store.append_events("r1", [], after=2, keep_s=30)
    assert 29_000 < client.pttl(key) <= 30_000
    assert 29_000 < client.pttl(f"{store.prefix}events-complete:r1") <= 30_000
    forever = _store(redis_server, finished_ttl_s=None)
    forever.append_events("r1", [{"n": 1}], after=0)
    assert client.pttl(f"{forever.prefix}events:r1") == -1
    forever.append_events("r1", [{"n": 2}], after=1, keep_s=float("inf"))
    assert client.pttl(f"{forever.prefix}events:r1") == -1
    assert [e.seq for e in forever.read_events("r1")] == [1, 2]


def test_prune_deletes_the_keys_of_a_pruned_runs_event_log(redis_server: RedisServer) -> None:
    store = _store(redis_server)
    client = redis.Redis(port=redis_server.port)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.append_events(state.run_id, [{"n": 1}], after=0, keep_s=60)
    store.commit(
        make_state(run_id=state.run_id, status="done", next_step=None), owner="o", version=1
    )
    keys = [f"{store.prefix}events:{state.run_id}", f"{store.prefix}events-complete:{state.run_id}"]
    assert client.exists(*keys) == 2
    assert store.prune(older_than=0) == 1
    assert client.exists(*keys) == 0


@pytest.mark.parametrize("socket_timeout", [0.2, 0.5, 1.0])
def test_read_events_waits_within_the_clients_socket_timeout(
    redis_server: RedisServer, socket_timeout: float
) -> None:
    client = redis.Redis(port=redis_server.port, socket_timeout=socket_timeout, retry=NO_RETRY)
    store = RedisRunStore(client, prefix=f"x{uuid.uuid4().hex[:12]}:")
    # A wait past the socket timeout (and past one block of at most half of it): no
    # TimeoutError, shorter blocks.
    wait_s = min(0.6, socket_timeout + 0.1)
    assert store.read_events("r1", timeout=wait_s) == []
    barrier = threading.Barrier(2)

    def append() -> None:
        barrier.wait(10)
        store.append_events("r1", [{"n": 1}], after=0)

    appender = threading.Thread(target=append)
    appender.start()
    barrier.wait(10)
    events = store.read_events("r1", timeout=20)
    appender.join(25)
    assert [e.seq for e in events] == [1]


@pytest.mark.parametrize("given", ["redis://:s3cret@localhost:6379/0", b"redis://localhost"])
def test_a_url_instead_of_a_client_is_a_clear_usage_error(given: Any) -> None:
    with pytest.raises(UsageError, match=r"redis\.Redis\.from_url") as caught:
        RedisRunStore(given)
    assert "s3cret" not in str(caught.value)  # a URL may hold a password: never shown


def test_a_run_id_naming_the_signal_queue_of_a_run_is_unknown(redis_server: RedisServer) -> None:
    """Before keys were namespaced, ``<run id>:signals`` named the run's signal list: a
    WRONGTYPE error (503 at the web edge) instead of an unknown run."""
    store = _store(redis_server)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.inject(state.run_id, "queued")
    assert store.get(f"{state.run_id}:signals") is None
    assert store.cancel(f"{state.run_id}:signals") is False
    assert [s.kind for s in store.wait_signals([state.run_id], timeout=5)] == ["inject"]


def test_the_index_of_lost_runs_holds_only_running_resumable_runs(
    redis_server: RedisServer,
) -> None:
    store = _store(redis_server)
    client = redis.Redis(port=redis_server.port)
    index = f"{store.prefix}resumable"

    def indexed() -> list[str]:
        return [member.decode() for member in client.zrange(index, 0, -1)]

    paused = make_state(on_owner_lost="resume")
    store.begin("c1", paused, owner="o", lease_s=30, expected_length=0)
    assert indexed() == [paused.run_id]
    version = store.commit(replace(paused, status="paused"), owner="o", version=1)
    assert indexed() == []
    version = store.claim(paused.run_id, owner="p", lease_s=0, version=version)
    assert indexed() == [paused.run_id]
    assert [run.state.run_id for run in store.lost_runs()] == [paused.run_id]
    store.commit(replace(paused, status="done", next_step=None), owner="p", version=version)
    assert indexed() == []
    store.begin("c2", make_state(), owner="o", lease_s=0, expected_length=0)  # "fail"
    assert indexed() == []
    assert store.load("c2").run is None  # failed on read
    cancelled = make_state(on_owner_lost="resume")
    store.begin("c3", cancelled, owner="o", lease_s=0, expected_length=0)
    assert store.cancel(cancelled.run_id) is True  # lost: cancelled at once
    assert indexed() == []
    assert store.prune(older_than=0) == 3
    assert indexed() == []
    assert client.keys(f"{store.prefix}run:*") == []


def test_each_verb_of_a_run_is_one_round_trip(redis_server: RedisServer) -> None:
    """Each verb is one script: the look for a run past its lease (to be failed first) is part
    of the scripts that read or change a conversation (``load``, ``begin``, ``replace``) or a
    run (``get``), not a round trip of its own before each."""
    store = _store(redis_server)
    state = make_state()

    def sent(call: Any) -> list[str]:
        with RoundTrips([redis_server.port], store.prefix) as trips:
            call()
        return trips.names

    assert sent(lambda: store.load("c1")) == ["load"]
    begin = partial(store.begin, "c1", state, owner="o", lease_s=30, expected_length=0)
    assert sent(begin) == ["begin"]
    assert sent(lambda: store.get(state.run_id)) == ["read"]
    assert sent(lambda: store.commit(state, owner="o", version=1)) == ["write"]
    done = replace(state, status="done", next_step=None, stop_reason="end_turn")
    assert sent(lambda: store.commit(done, owner="o", version=2)) == ["write"]
    assert sent(lambda: store.replace_log("c1", [])) == ["replace"]


@pytest.fixture
def descriptors_past_1024() -> Iterator[None]:
    """The process's next descriptors are numbered past 1024 (a busy server's are):
    ``select()`` refuses a set with one of them, ``epoll`` does not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"at most {hard} descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    fillers = []
    try:
        while not fillers or fillers[-1] <= 1030:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for descriptor in fillers:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.usefixtures("descriptors_past_1024")
def test_a_listener_whose_sockets_are_past_descriptor_1024_waits_and_hears(
    redis_server: RedisServer,
) -> None:
    """The listener's wait for its pub/sub socket or a wake went through ``select()``,
    which raised ``ValueError`` for a descriptor past 1024 (any busy web server's)."""
    store = _store(redis_server)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    assert store.wait_signals(["nothing"], timeout=0.05) == []  # waited on both sockets
    store.inject(state.run_id, "queued")
    assert [s.kind for s in store.wait_signals([state.run_id], timeout=5)] == ["inject"]
