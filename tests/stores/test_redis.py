"""RedisRunStore against a real redis-server: the contract (with real processes), both
reply decodings, prefixes, key expiry, and a server that is down (fail closed)."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest

from agent_sync.errors import StoreUnavailableError, UsageError
from agent_sync.stores import RedisRunStore, RunStore
from agent_sync.testing.redis_server import RedisServer
from agent_sync.testing.run_store_contract import RunStoreContract, make_state

redis = pytest.importorskip("redis", reason="pip install -e '.[redis]'")
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

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


class TestRedisRunStoreDecodedReplies(RunStoreContract):
    """The same contract through a client that decodes replies to ``str``."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: RedisServer) -> None:
        self.port = redis_server.port

    def make_store(self) -> RunStore:
        client = redis.Redis(port=self.port, decode_responses=True)
        return RedisRunStore(client, prefix=f"d{uuid.uuid4().hex[:12]}:")


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
