"""RedisRunStore on a real Redis Cluster (three masters, ``redis-server --cluster-enabled
yes``, one for the whole session): the contract suite (with real processes), a cancel from
another process, a killed worker's run recovered in another, the keys spread over every
master, and the rules of the key layout (hash tags; one server keeps its key names).

A cluster refuses a script or command whose keys span hash slots (``CROSSSLOT``): every
test here would fail on a store that mixed them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest

from agent_sync._run_state import RunState
from agent_sync.errors import UsageError
from agent_sync.stores import RedisRunStore, RunStore
from agent_sync.stores._redis_keys import SLOTS, shard_tags, slot_of
from agent_sync.testing.redis_server import RedisCluster, RedisServer, redis_server_binary
from agent_sync.testing.run_store_contract import RunStoreContract, make_state
from tests.fixtures.processes import child_context
from tests.stores import test_processes, test_recovery_processes

redis = pytest.importorskip("redis", reason="pip install -e '.[redis]'")

from redis.cluster import RedisCluster as ClusterClient  # noqa: E402

from tests.stores.redis_monitor import RoundTrips  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """Three masters on free loopback ports, for the whole session."""
    if redis_server_binary() is None:
        message = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must install it: {message}")
        pytest.skip(message)
    cluster = RedisCluster.start(tmp_path_factory.mktemp("redis-cluster"), masters=3)
    yield cluster
    cluster.stop()


_CLIENTS: list[Any] = []  # this process's cluster clients, closed after each test


def _open(port: int, prefix: str) -> RunStore:
    client = ClusterClient(host="127.0.0.1", port=port)
    _CLIENTS.append(client)
    return RedisRunStore(client, prefix=prefix)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """A cluster client's sockets are closed by ``close()`` only (else: ResourceWarning)."""
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


class TestRedisClusterRunStore(RunStoreContract):
    @pytest.fixture(autouse=True)
    def _cluster(self, redis_cluster: RedisCluster) -> None:
        self.port = redis_cluster.ports[0]

    def make_store(self) -> RunStore:
        self.prefix = f"t{uuid.uuid4().hex[:12]}:"  # a fresh, empty store on the cluster
        return _open(self.port, self.prefix)

    def process_factory(self) -> Callable[[], RunStore]:
        return partial(_open, self.port, self.prefix)

    def process_context(self) -> ForkServerContext:
        return child_context()  # forkserver, the package preloaded


@pytest.fixture
def cluster_spec(redis_cluster: RedisCluster) -> tuple[str, str]:
    return ("redis-cluster", f"{redis_cluster.ports[1]}/p{uuid.uuid4().hex[:12]}:")


def test_cancel_from_another_process_on_a_cluster(
    cluster_spec: tuple[str, str], tmp_path: Path
) -> None:
    test_processes.test_cancel_from_another_process_stops_the_owner(cluster_spec, "tool", tmp_path)


def test_a_killed_workers_run_goes_on_in_another_process_on_a_cluster(
    cluster_spec: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    test_recovery_processes.test_a_killed_workers_run_goes_on_in_another_process(
        cluster_spec, "idempotent_tool", tmp_path, monkeypatch
    )


def test_the_shards_spread_over_the_slots_evenly() -> None:
    for shards in (1, 3, 16, 64):
        slots = [slot_of(tag) for tag in shard_tags(shards)]
        assert [slot * shards // SLOTS for slot in slots] == list(range(shards))


def test_conversations_spread_over_every_master(redis_cluster: RedisCluster) -> None:
    prefix = f"s{uuid.uuid4().hex[:12]}:"
    store = _open(redis_cluster.ports[0], prefix)
    for n in range(60):
        store.begin(f"c{n}", make_state(), owner="o", lease_s=30, expected_length=0)
    counts = []
    for port in redis_cluster.ports:
        node = redis.Redis(port=port)
        counts.append(sum(1 for _ in node.scan_iter(match=f"{prefix}*run:*", count=1000)))
        node.close()
    assert sum(counts) == 60 and min(counts) > 0


def test_a_cluster_prefix_with_braces_is_refused(redis_cluster: RedisCluster) -> None:
    with pytest.raises(UsageError, match="hash tags"):
        _open(redis_cluster.ports[0], "{app}:")


def _done(state: RunState) -> RunState:
    return replace(state, status="done", next_step=None, stop_reason="end_turn")


def test_one_server_keeps_its_key_names(redis_server: RedisServer) -> None:
    """On one server the keys are named as they always were: data written before the
    cluster layout stays readable, and a store of today reads what one of before wrote."""
    client: Any = redis.Redis(port=redis_server.port, decode_responses=True)
    prefix = f"k{uuid.uuid4().hex[:12]}:"
    store = RedisRunStore(client, prefix=prefix)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.append_events(state.run_id, [{"n": 1}], after=0)
    store.commit(_done(state), owner="o", version=1)
    assert sorted(client.keys(f"{prefix}*")) == sorted(
        [f"{prefix}run:{state.run_id}", f"{prefix}conv:c1:log", f"{prefix}finished",
         f"{prefix}events:{state.run_id}"]
    )  # fmt: skip
    client.close()


def test_a_run_on_a_cluster_costs_one_round_trip_more_as_it_begins(
    redis_cluster: RedisCluster,
) -> None:
    """On a cluster a run's home (its id -> its conversation's shard) is written when it
    begins, and kept when it ends (``prune`` deletes it): nothing else is added to the one
    script per verb. Another process finds the home through the conversation if it loaded it (no
    read of the home), else reads it once."""
    prefix = f"r{uuid.uuid4().hex[:12]}:"
    store, other, third = (_open(redis_cluster.ports[0], prefix) for _ in range(3))

    def sent(call: Callable[[], object]) -> list[str]:
        with RoundTrips(redis_cluster.ports, prefix) as trips:
            call()
        return trips.names

    state = make_state()
    assert sent(lambda: store.load("c1")) == ["load"]
    begin = partial(store.begin, "c1", state, owner="o", lease_s=30, expected_length=0)
    assert sent(begin) == ["SET", "begin"]
    assert sent(lambda: store.commit(state, owner="o", version=1)) == ["write"]
    assert sent(lambda: store.get(state.run_id)) == ["read"]
    assert sent(lambda: other.load("c1")) == ["load"]
    assert sent(lambda: other.cancel(state.run_id, mode="after_turn")) == ["signal"]
    assert sent(lambda: third.get(state.run_id)) == ["GET", "read"]
    assert sent(lambda: third.get(state.run_id)) == ["read"]
    assert sent(lambda: store.commit(_done(state), owner="o", version=2)) == ["write"]


def test_a_conversations_values_live_in_its_slot_one_script_each(
    redis_cluster: RedisCluster,
) -> None:
    """A conversation's values are one hash beside its log, in its slot (a compare-and-set
    is one script there); a read and a write are one round trip each."""
    prefix = f"v{uuid.uuid4().hex[:12]}:"
    store = _open(redis_cluster.ports[0], prefix)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.commit(_done(state), owner="o", version=1)
    with RoundTrips(redis_cluster.ports, prefix) as trips:
        assert store.set_value("c1", "k", "v", expected=None) is True
        assert store.get_value("c1", "k") == "v"
        assert store.set_value("c1", "k", "w", expected="stale") is False
    assert trips.names == ["set_value", "get_value", "set_value"]
    keys = []
    for port in redis_cluster.ports:
        node = redis.Redis(port=port)
        keys += [key.decode() for key in node.scan_iter(match=f"{prefix}*conv:c1:*", count=1000)]
        node.close()
    (log,) = [key for key in keys if key.endswith("conv:c1:log")]
    (values,) = [key for key in keys if key.endswith("conv:c1:values")]
    assert values == log[: -len("log")] + "values"  # the same hash tag: the same slot
    assert sorted(keys) == sorted([log, values])


def _move_slot(ports: list[int], slot: int, from_port: int, to_port: int) -> None:
    """Move ``slot`` and its keys from the master on ``from_port`` to the one on ``to_port``
    as ``redis-cli --cluster reshard`` does: IMPORTING, MIGRATING, MIGRATE, then SETSLOT NODE
    on every master."""
    nodes = {port: redis.Redis(port=port, decode_responses=True) for port in ports}
    try:
        ids = {port: node.execute_command("CLUSTER", "MYID") for port, node in nodes.items()}
        target, source = nodes[to_port], nodes[from_port]
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from_port])
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to_port])
        keys = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if keys:
            source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        for node in (target, source, *nodes.values()):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[to_port])
    finally:
        for node in nodes.values():
            node.close()


def _rejected(port: int) -> int:
    """The scripts the master on ``port`` refused so far (a ``MOVED`` among them)."""
    node = redis.Redis(port=port)
    stats = node.info("commandstats").get("cmdstat_evalsha", {})
    node.close()
    return int(stats.get("rejected_calls", 0))


def test_a_shard_moved_to_another_master_is_followed(redis_cluster: RedisCluster) -> None:
    """A script goes straight to the master of its slot by the client's slot table; when the
    slot moved (a reshard, a failover), the script refused there (``MOVED``) goes through the
    cluster client, which follows it and refreshes its table: the store goes on, and the
    next script goes to the new master at once. (The session's cluster: its slot is moved
    back after, as a reshard would; a cluster client of a later test asks afresh.)"""
    client = ClusterClient(host="127.0.0.1", port=redis_cluster.ports[0])
    store = RedisRunStore(client, prefix=f"m{uuid.uuid4().hex[:12]}:")
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    shard = store._keys.conversation("c1")
    slot, old = client.keyslot(shard), client.get_node_from_key(shard).port
    new = next(port for port in redis_cluster.ports if port != old)
    _move_slot(redis_cluster.ports, slot, old, new)
    try:
        before = _rejected(old)
        assert store.commit(state, owner="o", version=1) == 2  # refused there, then followed
        moved = _rejected(old)
        assert moved > before
        assert store.commit(_done(state), owner="o", version=2) == 3
        assert store.load("c1").run is None
        assert _rejected(old) == moved  # straight to the new master
    finally:
        store.close()
        client.close()
        _move_slot(redis_cluster.ports, slot, new, old)


def test_a_finished_runs_home_is_kept_until_prune(redis_cluster: RedisCluster) -> None:
    """A run's home outlives its end (no round trip to give it an expiry) and goes with the
    run's entry in the set of finished runs, which ``prune`` deletes: then no key of the run
    is left on any master, and its id is unknown again."""
    prefix = f"h{uuid.uuid4().hex[:12]}:"
    store = _open(redis_cluster.ports[0], prefix)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.commit(_done(state), owner="o", version=1)

    def keys() -> list[str]:
        found = []
        for port in redis_cluster.ports:
            node = redis.Redis(port=port, decode_responses=True)
            found += list(node.scan_iter(match=f"{prefix}*{state.run_id}*", count=1000))
            node.close()
        return found

    (home,) = [key for key in keys() if "home:" in key]
    node = redis.Redis(port=_open_port_of(redis_cluster, home))
    assert node.ttl(home) == -1  # kept
    node.close()
    assert store.prune(older_than=0) == 1
    assert keys() == []
    assert store.get(state.run_id) is None
    assert store.cancel(state.run_id) is False


def _open_port_of(cluster: RedisCluster, key: str) -> int:
    client = ClusterClient(host="127.0.0.1", port=cluster.ports[0])
    _CLIENTS.append(client)
    return int(client.get_node_from_key(key).port)
