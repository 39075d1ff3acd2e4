"""Waiting readers of a SQLite store's event logs share one read per look at the file, per
store object and process (``stores._sqlite_waits``): woken readers are handed the events
they lack instead of each reading the log, readers at different numbers each get exactly
what they lack, a failure ends every wait with the error, a forked child waits with a
thread of its own, and a follower whose client leaves is cut short. The appends come
through another store object on the same file, as from another process."""

from __future__ import annotations

import multiprocessing
import queue
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_sync._signal_safe import Event
from agent_sync.errors import StoreUnavailableError
from agent_sync.stores import RunEvent, SQLiteRunStore

pytestmark = pytest.mark.timeout(120)

HOUR = 3600.0
WAIT = 30.0  # the longest a test waits for what must happen (a hang fails, not a slow box)


class _Counting(SQLiteRunStore):
    """A store that counts the reads of a log its readers make themselves."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.own_reads = 0

    def _events_after(self, run_id: str, after: int) -> list[RunEvent]:
        self.own_reads += 1
        return super()._events_after(run_id, after)


def _read_in_thread(
    read: Any, run_id: str, *, after: int, timeout: float = WAIT, **options: Any
) -> queue.SimpleQueue[list[RunEvent] | BaseException]:
    got: queue.SimpleQueue[list[RunEvent] | BaseException] = queue.SimpleQueue()

    def reader() -> None:
        try:
            got.put(read(run_id, after=after, timeout=timeout, **options))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got.put(exc)

    threading.Thread(target=reader, daemon=True).start()
    return got


def _seqs(got: queue.SimpleQueue[list[RunEvent] | BaseException]) -> list[int]:
    events = got.get(timeout=WAIT)
    assert isinstance(events, list), events
    return [event.seq for event in events]


def test_woken_followers_are_handed_their_events_not_each_reading_the_log(
    tmp_path: Path,
) -> None:
    """20 followers of 20 streaming logs, 10 records each, each record read before the
    next is appended: before, every woken follower read its log itself, and again when it
    came back (400 reads); now a follower reads only when it registers uncovered."""
    path = str(tmp_path / "busy.db")
    store, other = _Counting(path), SQLiteRunStore(path)
    runs = [f"r{n}" for n in range(20)]
    records = 10
    seen: queue.SimpleQueue[tuple[str, list[int]]] = queue.SimpleQueue()

    def follow(run_id: str) -> None:
        after = 0
        while after < records:
            events = store.read_events(run_id, after=after, timeout=WAIT)
            seen.put((run_id, [event.seq for event in events]))
            after = events[-1].seq if events else after

    for run_id in runs:
        threading.Thread(target=follow, args=(run_id,), daemon=True).start()
    for n in range(records):
        for run_id in runs:
            other.append_events(run_id, [{"n": n + 1}], after=n)
        for _ in runs:  # each follower has this record (and nothing twice)
            run_id, seqs = seen.get(timeout=WAIT)
            assert seqs == [n + 1], (run_id, seqs)
    assert store.own_reads < len(runs) * records // 2, store.own_reads


def test_readers_at_different_numbers_each_get_what_they_lack(tmp_path: Path) -> None:
    path = str(tmp_path / "numbers.db")
    store, other = SQLiteRunStore(path), SQLiteRunStore(path)
    other.append_events("r", [{"n": 1}], after=0)
    behind = _read_in_thread(store.read_events, "r", after=1)
    ahead = _read_in_thread(store.read_events, "r", after=2)  # (claims more than there is)
    other.append_events("r", [{"n": 2}], after=1)
    assert _seqs(behind) == [2]
    other.append_events("r", [{"n": 3}, {"n": 4}], after=2)
    assert _seqs(ahead) == [3, 4]
    again = _read_in_thread(store.read_events, "r", after=2)
    assert _seqs(again) == [3, 4]
    for after in range(4):  # readers coming back at every number, while the thread reads
        events = store.read_events("r", after=after, timeout=WAIT)
        assert [event.seq for event in events] == list(range(after + 1, 5))
    same = _read_in_thread(store.read_events, "r", after=4)
    store.append_events("r", [{"n": 5}], after=4)  # this object's append: handed at once
    assert _seqs(same) == [5]


def test_a_failure_ends_every_wait_with_the_error(tmp_path: Path) -> None:
    """The file is replaced under the store: a waiting reader's own read on its open
    connection still sees the old file (nothing new: before, it went back to waiting for
    an hour); the thread's look fails, and every wait ends with the error."""
    path = tmp_path / "s.db"
    store = SQLiteRunStore(path)
    for n in range(5):
        store.append_events(f"r{n}", [{"n": 1}], after=0)
    readers = [_read_in_thread(store.read_events, f"r{n}", after=1, timeout=HOUR) for n in range(5)]
    SQLiteRunStore(tmp_path / "other.db").close()
    (tmp_path / "other.db").replace(path)
    for reader in readers:
        assert isinstance(reader.get(timeout=WAIT), StoreUnavailableError)


def _wait_in_forked_child(store: SQLiteRunStore, out: Any) -> None:
    try:
        events = store.read_events("child-run", after=0, timeout=WAIT)
        out.put([event.seq for event in events])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(repr(exc))


def test_a_forked_child_waits_with_a_thread_of_its_own(tmp_path: Path) -> None:
    """As under gunicorn --preload: the child inherits a store whose reader thread runs in
    the parent (and readers registered there). Both processes' waits are answered."""
    path = str(tmp_path / "fork.db")
    store, other = SQLiteRunStore(path), SQLiteRunStore(path)
    other.append_events("parent-run", [{"n": 1}], after=0)
    parent = _read_in_thread(store.read_events, "parent-run", after=1)
    assert _until_thread("agent_sync-sqlite-events")
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_wait_in_forked_child, args=(store, out))
    child.start()
    other.append_events("child-run", [{"n": 1}], after=0)
    assert out.get(timeout=WAIT) == [1]
    child.join(WAIT)
    assert child.exitcode == 0
    other.append_events("parent-run", [{"n": 2}], after=1)
    assert _seqs(parent) == [2]


def test_a_follower_whose_client_leaves_is_cut_short(tmp_path: Path) -> None:
    path = str(tmp_path / "woken.db")
    store = SQLiteRunStore(path)
    store.append_events("r", [{"n": 1}], after=0)
    wake = Event()
    got = _read_in_thread(store._read_events_woken, "r", after=1, timeout=HOUR, wake=wake)
    assert _until_thread("agent_sync-sqlite-events")
    wake.set()  # the client left
    assert _seqs(got) == []
    woken = Event()  # an append still ends such a wait, with its events
    got = _read_in_thread(store._read_events_woken, "r", after=1, timeout=HOUR, wake=woken)
    SQLiteRunStore(path).append_events("r", [{"n": 2}], after=1)
    assert _seqs(got) == [2]


def _until_thread(name: str) -> bool:
    pause = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if any(thread.name == name for thread in threading.enumerate()):
            return True
        pause.wait(0.01)
    return False
