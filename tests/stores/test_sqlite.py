"""SQLiteRunStore: the contract (with real processes), file safety, and fail closed. Agents
in separate processes sharing one conversation: tests/stores/test_processes.py."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from contextlib import closing
from dataclasses import replace
from functools import partial
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest

from agent_sync.errors import StoreUnavailableError
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.stores._sqlite_pool import READERS
from agent_sync.testing.run_store_contract import RunStoreContract, make_state
from tests.fixtures.processes import child_context


def _open(path: str) -> RunStore:
    return SQLiteRunStore(path)


class TestSQLiteRunStore(RunStoreContract):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path
        self.count = 0

    def make_store(self) -> RunStore:
        self.count += 1
        self.path = str(self.folder / f"store{self.count}.db")
        return SQLiteRunStore(self.path)

    def process_factory(self):  # type: ignore[no-untyped-def]
        return partial(_open, self.path)

    def process_context(self) -> ForkServerContext:
        return child_context()  # forkserver, the package preloaded


def test_the_file_is_created_private(tmp_path: Path) -> None:
    SQLiteRunStore(tmp_path / "s.db")
    assert stat.S_IMODE(os.stat(tmp_path / "s.db").st_mode) == 0o600


def _touch_and_close(path: str) -> None:
    SQLiteRunStore(path).load("c1")  # opens, reads, and closes at exit: the last one out?


def _has_run(path: str, run_id: str, out: object) -> None:
    out.put(SQLiteRunStore(path).get(run_id) is not None)  # type: ignore[attr-defined]


def test_a_second_store_on_the_same_file_keeps_the_first_ones_writes(tmp_path: Path) -> None:
    """Opening a store must not drop the SQLite locks of other stores in this process:
    a connection that lost them can write into a WAL another process already removed."""
    path = str(tmp_path / "s.db")
    first = SQLiteRunStore(path)
    first.load("c1")  # `first` now has a connection on the file
    SQLiteRunStore(path)  # a second store on the same file, in the same process
    context = child_context()
    toucher = context.Process(target=_touch_and_close, args=(path,))
    toucher.start()
    toucher.join(60)
    assert toucher.exitcode == 0
    state = make_state()
    first.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    out = context.Queue()
    reader = context.Process(target=_has_run, args=(path, state.run_id, out))
    reader.start()
    assert out.get(timeout=60) is True, "another process cannot see the first store's write"
    reader.join(60)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_an_unwritable_file_fails_closed(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "s.db")
    os.chmod(tmp_path / "s.db", 0o400)
    with pytest.raises(StoreUnavailableError):
        SQLiteRunStore(tmp_path / "s.db").begin(
            "c1", make_state(), owner="o", lease_s=30, expected_length=0
        )
    assert store.load("c1").run is None


def test_a_missing_folder_is_store_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        SQLiteRunStore(tmp_path / "no" / "such" / "s.db")


def test_a_corrupt_file_is_store_unavailable(tmp_path: Path) -> None:
    (tmp_path / "s.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailableError):
        SQLiteRunStore(tmp_path / "s.db")


def test_a_file_from_before_event_logs_opens_and_gains_them(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    state = make_state()
    SQLiteRunStore(path).begin("c1", state, owner="o", lease_s=30, expected_length=0)
    with closing(sqlite3.connect(path)) as db:  # the file as the previous version left it
        db.executescript("DROP TABLE events; DROP TABLE event_logs;")
    store = SQLiteRunStore(path)
    record = store.load("c1")
    assert record.run is not None and record.run.state == state
    assert store.append_events(state.run_id, [{"n": 1}], after=0) == 1
    assert [e.data for e in store.read_events(state.run_id)] == [{"n": 1}]


def _rows(path: str, run_id: str) -> tuple[int, int]:
    with closing(sqlite3.connect(path)) as db:
        events = db.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (run_id,))
        logs = db.execute("SELECT COUNT(*) FROM event_logs WHERE run_id = ?", (run_id,))
        return events.fetchone()[0], logs.fetchone()[0]


def test_prune_deletes_the_rows_of_dropped_event_logs(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = SQLiteRunStore(path)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.append_events(state.run_id, [{"n": 1}, {"n": 2}], after=0)
    store.commit(
        make_state(run_id=state.run_id, status="done", next_step=None), owner="o", version=1
    )
    store.append_events("r_over", [{"n": 1}], after=0, keep_s=0)
    store.append_events("r_kept", [{"n": 1}], after=0, keep_s=60)
    assert _rows(path, "r_over") == (1, 1)  # read as empty, deleted by prune
    assert store.prune(older_than=0) == 1
    assert _rows(path, state.run_id) == (0, 0)
    assert _rows(path, "r_over") == (0, 0)
    assert _rows(path, "r_kept") == (1, 1)


def test_event_logs_fail_closed_while_another_writer_holds_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = SQLiteRunStore(path, busy_timeout_s=0.05)
    store.append_events("r1", [{"n": 1}], after=0)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process's write in progress
        with pytest.raises(StoreUnavailableError):
            store.append_events("r1", [{"n": 2}], after=1)
        assert [e.seq for e in store.read_events("r1")] == [1]  # readers never wait (WAL)
        other.execute("ROLLBACK")
    assert store.append_events("r1", [{"n": 2}], after=1) == 2


# -- one clock for leases (issue 22/4) --


def _get_with_a_clock_ahead(path: str, run_id: str, out: Any) -> None:
    """A worker whose clock runs 60 s ahead (``time.time`` patched: what freezegun, a
    faked clock or a bad host does to one process) reads another worker's live run."""
    real = time.time
    time.time = lambda: real() + 60.0  # type: ignore[assignment]
    snap = SQLiteRunStore(path).get(run_id)
    out.put(None if snap is None else snap.status)


def test_a_worker_whose_clock_runs_ahead_does_not_fail_a_live_run(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = SQLiteRunStore(path)
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)  # live for 30 s
    context = child_context()
    out = context.Queue()
    ahead = context.Process(target=_get_with_a_clock_ahead, args=(path, state.run_id, out))
    ahead.start()
    assert out.get(timeout=60) == "running"  # not "failed": its lease is the database's time
    ahead.join(60)
    record = store.load("c1")
    assert record.run is not None and record.run.state.status == "running"
    assert store.commit(replace(state, cycle=1), owner="o", version=1) == 2  # the owner goes on


# -- readers never wait for the writer (issue 22/13) --


def test_readers_never_wait_for_another_connections_write(tmp_path: Path) -> None:
    """A write held elsewhere (another process's transaction) must not block ``get``,
    ``load`` or ``read_events``: they read the last committed snapshot (WAL)."""
    path = str(tmp_path / "s.db")
    store = SQLiteRunStore(path, busy_timeout_s=0.05)  # a read that waited would fail
    state = make_state()
    store.begin("c1", state, owner="o", lease_s=30, expected_length=0)
    store.append_events(state.run_id, [{"n": 1}], after=0)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # in WAL: the write lock, held
        other.execute("UPDATE runs SET version = version")  # a write in progress
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "running"
        record = store.load("c1")
        assert record.run is not None and record.run.state == state
        assert [e.seq for e in store.read_events(state.run_id)] == [1]
        with pytest.raises(StoreUnavailableError):  # a write still waits, and fails closed
            store.inject(state.run_id, "x")
        other.execute("ROLLBACK")


# -- a deleted file (issue 22/14) --


def _begin_in_a_new_thread(store: SQLiteRunStore) -> BaseException | None:
    caught: list[BaseException | None] = [None]

    def begin() -> None:
        try:
            store.begin("c2", make_state(), owner="o", lease_s=30, expected_length=0)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            caught[0] = exc

    thread = threading.Thread(target=begin)
    thread.start()
    thread.join(30)
    return caught[0]


def test_a_deleted_file_fails_closed_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteRunStore(path)
    store.begin("c1", make_state(), owner="o", lease_s=30, expected_length=0)
    for name in ("s.db", "s.db-wal", "s.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)  # an operator cleans up under a live worker
    for failure in (_begin_in_a_new_thread(store), _begin_in_a_new_thread(store)):
        assert isinstance(failure, StoreUnavailableError)
        assert str(path) in str(failure) and "deleted" in str(failure)
    with pytest.raises(StoreUnavailableError, match="deleted"):
        store.inject("run_x", "x")
    store.close()  # its connections: a read now needs a new one, which is refused too
    with pytest.raises(StoreUnavailableError, match="deleted"):
        store.load("c1")
    assert not path.exists()  # no empty 0644 file without tables in its place
    fresh = SQLiteRunStore(path)  # a restart: created as on first open
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert fresh.load("c1").messages == ()
    assert fresh.begin("c1", make_state(), owner="o", lease_s=30, expected_length=0) == 1


# -- descriptors per process (issue 22/11) --


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_connections_are_bounded_per_store_not_per_thread(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "s.db")
    store.begin("c1", make_state(), owner="o", lease_s=30, expected_length=0)
    before = _descriptors()
    threads = 32
    loaded, done = threading.Barrier(threads + 1), threading.Event()

    def reader() -> None:
        store.load("c1")
        store.get("run_unknown")
        loaded.wait(30)  # every thread alive, each having used the store
        done.wait(30)

    workers = [threading.Thread(target=reader) for _ in range(threads)]
    for worker in workers:
        worker.start()
    loaded.wait(30)
    try:
        opened = _descriptors() - before
    finally:
        done.set()
        for worker in workers:
            worker.join(30)
    assert opened <= 3 * READERS, f"{opened} descriptors for {threads} threads"


def test_a_file_from_before_lost_runs_opens_and_gains_them(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    running = make_state()
    SQLiteRunStore(path).begin("c1", running, owner="o", lease_s=0, expected_length=0)
    with closing(sqlite3.connect(path)) as db:  # the file as the previous version left it
        db.executescript("DROP INDEX runs_lost; ALTER TABLE runs DROP COLUMN resumable;")
    store = SQLiteRunStore(path)
    assert store.lost_runs() == []  # a run begun before: on_owner_lost "fail"
    snap = store.get(running.run_id)
    assert snap is not None and snap.status == "failed"
    lost = make_state(on_owner_lost="resume")
    store.begin("c2", lost, owner="o", lease_s=0, expected_length=0)
    assert [run.state.run_id for run in store.lost_runs()] == [lost.run_id]


def test_lost_runs_reads_an_index_not_the_runs(tmp_path: Path) -> None:
    from agent_sync.stores._sqlite_runs import LOST_RUNS

    path = str(tmp_path / "s.db")
    SQLiteRunStore(path)
    with closing(sqlite3.connect(path)) as db:
        plan = " ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {LOST_RUNS}", (10,)))
    assert "USING INDEX runs_lost" in plan  # a range of the running resumable runs
    assert "SCAN" not in plan and "TEMP B-TREE" not in plan  # no scan, and sorted already
