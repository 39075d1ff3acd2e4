"""Racing recoverers in real processes: four processes that all see one lost run (its owner
died, ``on_owner_lost="resume"``) claim it at once, behind a barrier; exactly one wins, on
SQLite and on Redis. Children are spawned and report through a queue, never by timing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from agent_sync.errors import RunConflictError
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.testing.redis_server import RedisServer
from agent_sync.testing.run_store_contract import make_state
from tests.fixtures.processes import child_context

pytestmark = pytest.mark.timeout(120)

RECOVERERS = 4

Spec = tuple[str, str]  # ("sqlite", path) or ("redis", "port/prefix")


def open_store(spec: Spec) -> RunStore:
    kind, where = spec
    if kind == "sqlite":
        return SQLiteRunStore(where)
    import redis

    from agent_sync.stores import RedisRunStore

    port, prefix = where.split("/", 1)
    return RedisRunStore(redis.Redis(port=int(port), socket_timeout=10), prefix=prefix)


@pytest.fixture(params=["sqlite", "redis"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    if request.param == "sqlite":
        return ("sqlite", str(tmp_path / "store.db"))
    server: RedisServer = request.getfixturevalue("redis_server")
    return ("redis", f"{server.port}/p{uuid.uuid4().hex[:12]}:")


def recoverer(spec: Spec, name: str, barrier: Any, out: Any) -> None:
    """A process that finds the lost run and claims it the moment the others do."""
    store = open_store(spec)
    try:
        (lost,) = store.lost_runs()
        barrier.wait(60)
        try:
            version = store.claim(lost.state.run_id, owner=name, lease_s=30, version=lost.version)
            out.put((name, "won", version))
        except RunConflictError as exc:
            out.put((name, "refused", str(exc)))
    except BaseException as exc:  # reported, so the test fails with the reason
        out.put((name, "error", repr(exc)))


def test_four_processes_claim_a_lost_run_and_one_wins(spec: Spec) -> None:
    store = open_store(spec)
    state = make_state(on_owner_lost="resume")
    store.begin("c1", state, owner="dead", lease_s=0, expected_length=0)  # its owner died
    context = child_context()
    barrier, out = context.Barrier(RECOVERERS), context.Queue()
    names = [f"recoverer-{n}" for n in range(RECOVERERS)]
    children = [
        context.Process(target=recoverer, args=(spec, name, barrier, out)) for name in names
    ]
    for child in children:
        child.start()
    reports = [out.get(timeout=90) for _ in children]
    for child in children:
        child.join(30)
        assert child.exitcode == 0
    outcomes = sorted(outcome for _, outcome, _ in reports)
    assert outcomes == ["refused"] * (RECOVERERS - 1) + ["won"], reports
    (winner,) = [(name, version) for name, outcome, version in reports if outcome == "won"]
    record = store.load("c1")
    assert record.run is not None and record.run.state == state
    assert (record.run.owner, record.run.version) == winner
    assert store.lost_runs() == []
