"""A dropped :class:`SQLiteRunStore` frees its file descriptors and threads: nothing
process-wide (the watchers' registry, the event logs' shared readers) holds a store strongly.

Each test opens 25 stores on files of their own, uses them (a write and a read; a lease
renewed by the store's watcher; a reader that waited), drops them without ``close()`` and
counts ``/proc/self/fd`` before and after. Before the watcher held its store weakly, 100
stores whose watcher had run kept 300 descriptors open.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_sync.cancel import CancelMode
from agent_sync.stores import SQLiteRunStore, _watcher
from agent_sync.testing.run_store_contract import make_state
from tests.fixtures.garbage import collect_garbage

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd"),
    pytest.mark.timeout(120),
]

STORES = 25  # a leak of one descriptor a store is past SLACK
WAIT = 30.0  # the longest a test waits for what must happen
SLACK = 10  # descriptors another part of the process may open meanwhile (each store: 3)
THREADS = ("agent_sync-store-watcher", "agent_sync-sqlite-events")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def _earlier_threads(path: str) -> Iterator[None]:
    """The threads alive before the test: other tests' stores (a chat app an earlier test
    built, not yet collected) may still have theirs; only the test's own must end. After
    ``path`` (its first store dropped): one collection for both (each walks the heap the
    suite made so far, 0.3 s late in a serial run)."""
    collect_garbage()
    _EARLIER.clear()
    _EARLIER.update(threading.enumerate())
    yield
    _EARLIER.clear()


_EARLIER: set[threading.Thread] = set()


def _join_store_threads() -> None:
    """The stores' threads end once nothing is left for them (each joined with a bound)."""
    for thread in threading.enumerate():
        if thread.name in THREADS and thread not in _EARLIER:
            thread.join(WAIT)
            assert not thread.is_alive(), f"{thread.name} outlived its dropped store"


class _Renewing(SQLiteRunStore):
    """A store whose ``renewed`` event is set when its watcher renews a lease."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.renewed = threading.Event()

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        renewed = super().renew(run_id, owner=owner, lease_s=lease_s)
        self.renewed.set()
        return renewed


class _Run:
    """What the watcher needs of a run (it is handed no signal here)."""

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        return True

    def inject(self, content: object) -> None:
        pass


def _assert_freed(before: int) -> None:
    collect_garbage()
    _join_store_threads()
    collect_garbage()
    assert _open_fds() - before < SLACK


@pytest.fixture
def path(tmp_path: Path) -> str:
    """One file for every store (as an app's stores built per request are): created here,
    so the count starts after its first opening (that store is collected by
    ``_earlier_threads``, which comes next)."""
    path = str(tmp_path / "stores.db")
    SQLiteRunStore(path).append_events("r", [{"n": 1}], after=0)
    return path


def test_dropped_stores_free_their_descriptors(path: str) -> None:
    before = _open_fds()
    stores = [SQLiteRunStore(path) for n in range(STORES)]
    for n, store in enumerate(stores, start=1):
        store.append_events("r", [{"n": n + 1}], after=n)
        assert store.read_events("r", after=n)[0].seq == n + 1
    assert _open_fds() - before >= 2 * STORES  # (the count sees what the stores opened)
    del stores, store
    _assert_freed(before)


def test_dropped_stores_whose_watcher_renewed_a_lease_free_their_descriptors(path: str) -> None:
    before = _open_fds()
    stores = [_Renewing(path) for n in range(STORES)]
    run_ids = []
    for store in stores:
        state = make_state()
        store.begin(f"c-{state.run_id}", state, owner="me", lease_s=0.03, expected_length=0)
        _watcher.watch(store).add(state.run_id, _Run(), owner="me", lease_s=0.03)
        run_ids.append(state.run_id)
    for store, run_id in zip(stores, run_ids, strict=True):
        assert store.renewed.wait(WAIT)  # its watcher thread ran and renewed the lease
        _watcher.watch(store).remove(run_id)  # the run is over: nothing is watched
    del stores, store
    _assert_freed(before)


def test_dropped_stores_whose_readers_waited_free_their_descriptors(path: str) -> None:
    before = _open_fds()
    stores = [SQLiteRunStore(path) for n in range(STORES)]
    for store in stores:
        assert store.read_events("r", after=1, timeout=0.01) == []  # waited: a shared read
    del stores, store
    _assert_freed(before)
