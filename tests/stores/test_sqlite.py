"""SQLiteRunStore: the contract (with real processes), file safety, fail closed, and agents
in separate processes sharing one conversation."""

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


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
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


def _owner(path: str, ready: object, out: object) -> None:
    """A worker process: runs a stalled agent on conversation c1 until cancelled."""
    from agent_sync import Agent
    from agent_sync.testing import ScriptedModel

    agent = Agent(
        ScriptedModel([{"text": "thinking", "chunk_size": 1, "stall_after": 1}]),
        store=SQLiteRunStore(path),
        conversation_id="c1",
    )
    import threading

    def report_when_running() -> None:
        while agent.active_run is None:
            threading.Event().wait(0.001)
        ready.put(agent.active_run.run_id)  # type: ignore[attr-defined, union-attr]

    threading.Thread(target=report_when_running, daemon=True).start()
    result = agent.invoke("go")
    out.put((result.stop_reason, result.cancel_reason))  # type: ignore[attr-defined]


@pytest.mark.timeout(120)
def test_cancel_from_another_process_stops_the_owner(tmp_path: Path) -> None:
    from agent_sync import Agent
    from agent_sync.errors import ConcurrentInvocationError
    from agent_sync.messages import validate_history
    from agent_sync.testing import ScriptedModel

    path = str(tmp_path / "s.db")
    SQLiteRunStore(path)
    context = multiprocessing.get_context("spawn")
    ready, out = context.Queue(), context.Queue()
    worker = context.Process(target=_owner, args=(path, ready, out))
    worker.start()
    run_id = ready.get(timeout=60)
    store = SQLiteRunStore(path)
    here = Agent(ScriptedModel(["never"]), store=store, conversation_id="c1")
    with pytest.raises(ConcurrentInvocationError):
        here.invoke("me too")
    assert store.cancel(run_id, "stop from here") is True
    assert out.get(timeout=60) == ("cancelled", "stop from here")
    worker.join(30)
    logged = list(store.load("c1").messages)
    assert validate_history(logged) == [] and logged[-1]["role"] == "assistant"
    here = Agent(ScriptedModel(["my turn"]), store=store, conversation_id="c1")
    assert here.invoke("now me").text == "my turn"


@pytest.mark.timeout(120)
def test_a_killed_owner_is_failed_after_its_lease(tmp_path: Path) -> None:
    import signal

    from agent_sync import Agent
    from agent_sync.messages import validate_history
    from agent_sync.testing import ScriptedModel

    path = str(tmp_path / "s.db")
    SQLiteRunStore(path, lease_s=0.5)
    context = multiprocessing.get_context("spawn")
    ready, out = context.Queue(), context.Queue()
    worker = context.Process(target=_owner_short_lease, args=(path, ready, out))
    worker.start()
    ready.get(timeout=60)
    os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
    worker.join(30)
    store = SQLiteRunStore(path)
    import time

    from agent_sync.testing.run_store_contract import _wait_past

    _wait_past(time.time() + 0.6)
    record = store.load("c1")
    assert record.run is None and validate_history(list(record.messages)) == []
    agent = Agent(ScriptedModel(["usable again"]), store=store, conversation_id="c1")
    assert agent.invoke().text == "usable again"


def _owner_short_lease(path: str, ready: object, out: object) -> None:
    import threading

    from agent_sync import Agent
    from agent_sync.testing import ScriptedModel

    agent = Agent(
        ScriptedModel([{"text": "thinking", "chunk_size": 1, "stall_after": 1}]),
        store=SQLiteRunStore(path, lease_s=0.5),
        conversation_id="c1",
    )

    def report() -> None:
        while agent.active_run is None:
            threading.Event().wait(0.001)
        ready.put(agent.active_run.run_id)  # type: ignore[attr-defined, union-attr]

    threading.Thread(target=report, daemon=True).start()
    agent.invoke("go")
