"""SQLiteRunStore: the contract (with real processes), file safety, and fail closed. Agents
in separate processes sharing one conversation: tests/stores/test_processes.py."""

from __future__ import annotations

import multiprocessing
import os
import stat
from functools import partial
from pathlib import Path

import pytest

from agent_sync.errors import StoreUnavailableError
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.testing.run_store_contract import RunStoreContract, make_state


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
    context = multiprocessing.get_context("spawn")
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
