"""The contract of a run's event log (:class:`~agent_sync.stores.RunEventLog`): numbered
from 1 with no hole, appended with a compare-and-set, read from any number on, waiting for
an append from any thread, store object or process, complete and dropped after ``keep_s``,
dropped with its run by ``prune``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ...errors import RunConflictError, UsageError
from ...stores._event_log import EventLogStore
from ...stores._protocol import RunStore
from ._base import (
    LEASE_S,
    OWNER,
    ContractBase,
    _answered,
    _wait_past,
    _within,
    events_of,
    make_state,
)

__all__ = ["EventLogContract"]


def _append_in_child(
    factory: Callable[[], RunStore], run_id: str, ready: Any, go: Any, out: Any
) -> None:
    store = events_of(factory())
    ready.put(True)
    go.wait(30)
    try:
        out.put(store.append_events(run_id, [{"from": "child"}], after=1))
    except BaseException as exc:  # reported to the parent
        out.put(f"error: {type(exc).__name__}: {exc}")


class EventLogContract(ContractBase):
    """Event logs: what the web layer replays and follows a run's stream from."""

    # -- event logs --

    def test_events_are_numbered_from_one_with_no_hole(self, store: EventLogStore) -> None:
        assert store.append_events("r1", [{"n": 1}, {"n": 2}], after=0) == 2
        assert store.append_events("r1", [{"n": 3}], after=2) == 3
        events = store.read_events("r1")
        assert [(e.seq, e.data) for e in events] == [(1, {"n": 1}), (2, {"n": 2}), (3, {"n": 3})]
        assert store.append_events("r2", [{"n": 1}], after=0) == 1  # one log per run
        assert [e.seq for e in store.read_events("r1")] == [1, 2, 3]

    def test_events_are_read_from_any_number_on(self, store: EventLogStore) -> None:
        store.append_events("r1", [{"n": n} for n in range(1, 6)], after=0)
        for after in range(6):
            events = store.read_events("r1", after=after)
            assert [(e.seq, e.data["n"]) for e in events] == [(n, n) for n in range(after + 1, 6)]
        assert store.read_events("r1", after=9) == []

    def test_a_long_log_is_read_whole(self, store: EventLogStore) -> None:
        store.append_events("r1", [{"n": n} for n in range(1, 1001)], after=0)
        store.append_events("r1", [{"n": 1001}], after=1000)
        assert [e.data["n"] for e in store.read_events("r1")] == list(range(1, 1002))

    def test_an_event_reads_back_equal_with_its_keys_in_order(self, store: EventLogStore) -> None:
        event = {
            "z": 1,
            "a": {"y": [1, 2.5, None, True, {"b": 0, "a": -1}], "x": "é 😀   中"},
            "": "",
            "big": 2**70,
            "nested": [[{"k": "v"}], []],
        }
        store.append_events("r1", [event, {}], after=0)
        first, second = store.read_events("r1")
        assert first.data == event and second.data == {}
        assert json.dumps(first.data) == json.dumps(event)  # every key in order, nested too

    def test_an_empty_append_is_checked_and_changes_nothing(self, store: EventLogStore) -> None:
        assert store.append_events("r1", [], after=0) == 0
        store.append_events("r1", [{"n": 1}], after=0)
        assert store.append_events("r1", [], after=1) == 1
        with pytest.raises(RunConflictError):
            store.append_events("r1", [], after=0)
        assert [e.seq for e in store.read_events("r1")] == [1]

    def test_an_append_after_a_stale_number_is_refused_and_appends_nothing(
        self, store: EventLogStore
    ) -> None:
        store.append_events("r1", [{"n": 1}, {"n": 2}], after=0)
        for after in (0, 1, 3):  # behind the log, or ahead of it
            with pytest.raises(RunConflictError):
                store.append_events("r1", [{"n": "late"}], after=after)
        with pytest.raises(RunConflictError):
            store.append_events("r_new", [{"n": 1}], after=1)  # an empty log ends at 0
        assert [e.data for e in store.read_events("r1")] == [{"n": 1}, {"n": 2}]
        assert store.read_events("r_new") == []
        assert store.append_events("r1", [{"n": 3}], after=2) == 3

    def test_writers_racing_after_the_same_event_have_one_winner(
        self, store: EventLogStore
    ) -> None:
        store.append_events("r1", [{"writer": "first"}], after=0)
        barrier = threading.Barrier(8)
        outcomes: list[tuple[str, object]] = []

        def append(writer: str) -> None:
            barrier.wait(10)
            try:
                last = store.append_events("r1", [{"writer": writer}] * 2, after=1)
                outcomes.append((writer, last))
            except RunConflictError:
                outcomes.append((writer, "refused"))
            except BaseException as exc:  # the test reports it
                outcomes.append((writer, exc))

        threads = [threading.Thread(target=append, args=(f"w{n}",)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        won = [(writer, last) for writer, last in outcomes if last != "refused"]
        assert len(outcomes) == 8 and len(won) == 1, outcomes
        winner, last = won[0]
        assert last == 3
        assert [e.data["writer"] for e in store.read_events("r1")] == ["first", winner, winner]

    def test_a_complete_log_is_kept_and_refuses_appends(self, store: EventLogStore) -> None:
        assert store.append_events("r1", [{"n": 1}], after=0, keep_s=60) == 1
        with pytest.raises(RunConflictError):
            store.append_events("r1", [{"n": 2}], after=1)
        with pytest.raises(RunConflictError):
            store.append_events("r1", [], after=1, keep_s=60)
        store.append_events("r2", [{"n": 1}], after=0)
        assert store.append_events("r2", [], after=1, keep_s=60) == 1  # completes it
        with pytest.raises(RunConflictError):
            store.append_events("r2", [{"n": 2}], after=1)
        assert [e.seq for e in store.read_events("r1")] == [1]
        assert [e.seq for e in store.read_events("r2")] == [1]

    @pytest.mark.timeout(30)
    def test_a_complete_log_is_dropped_after_keep_s(self, store: EventLogStore) -> None:
        started = time.monotonic()
        store.append_events("r1", [{"n": 1}], after=0, keep_s=LEASE_S)
        kept = [e.seq for e in store.read_events("r1")]
        if _within(started, LEASE_S):
            assert kept == [1]
        _wait_past(time.time() + LEASE_S)
        assert store.read_events("r1") == []
        assert store.append_events("r1", [{"n": "new"}], after=0) == 1  # gone, not hidden

    def test_a_log_kept_for_zero_seconds_is_dropped_at_once(self, store: EventLogStore) -> None:
        store.append_events("r1", [{"n": 1}], after=0)
        assert store.append_events("r1", [{"n": 2}], after=1, keep_s=0) == 2
        assert store.read_events("r1") == []

    def test_read_events_waits_for_the_first_append_from_another_thread(
        self, store: EventLogStore
    ) -> None:
        barrier = threading.Barrier(2)

        def append() -> None:
            barrier.wait(10)
            store.append_events("r1", [{"n": 1}, {"n": 2}], after=0)

        appender = threading.Thread(target=append)
        appender.start()
        barrier.wait(10)
        started = time.monotonic()
        events = store.read_events("r1", timeout=20)
        assert time.monotonic() - started < 10  # woken by the append, not by the timeout
        appender.join(25)
        assert not appender.is_alive()
        assert [(e.seq, e.data) for e in events] == [(1, {"n": 1}), (2, {"n": 2})]

    def test_read_events_wakes_for_an_append_through_another_store_object(
        self, store: EventLogStore
    ) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        other = events_of(factory())  # on the same data, as another process would be
        store.append_events("r1", [{"n": 1}], after=0)
        barrier = threading.Barrier(2)

        def append() -> None:
            barrier.wait(10)
            other.append_events("r1", [{"n": 2}], after=1)

        appender = threading.Thread(target=append)
        appender.start()
        barrier.wait(10)
        started = time.monotonic()
        events = store.read_events("r1", after=1, timeout=20)
        assert time.monotonic() - started < 10  # woken by the append, not by the timeout
        appender.join(25)
        assert not appender.is_alive()
        assert [(e.seq, e.data) for e in events] == [(2, {"n": 2})]

    def test_read_events_with_nothing_to_read_waits_out_its_timeout(
        self, store: EventLogStore
    ) -> None:
        started = time.monotonic()
        assert store.read_events("run_unknown", timeout=0.05) == []
        assert time.monotonic() - started >= 0.05
        store.append_events("r1", [{"n": 1}], after=0)
        assert store.read_events("r1", after=1, timeout=0.05) == []
        assert store.read_events("run_unknown") == []

    def test_bad_events_and_numbers_are_usage_errors_and_append_nothing(
        self, store: EventLogStore
    ) -> None:
        bad: list[tuple[Any, Any, Any]] = [  # (events, after, keep_s)
            (["text"], 0, None),
            ([{1: "a key that is not a str"}], 0, None),
            ([{"x": float("nan")}], 0, None),
            ([{"x": float("inf")}], 0, None),
            ([{"x": object()}], 0, None),
            ([{"ok": 1}, ["not", "an", "object"]], 0, None),
            ([{"ok": 1}], -1, None),
            ([{"ok": 1}], 0, -1),
            ([{"ok": 1}], 0, float("nan")),
        ]
        for events, after, keep_s in bad:
            with pytest.raises(UsageError):
                store.append_events("r1", events, after=after, keep_s=keep_s)
        assert store.read_events("r1") == []
        assert store.append_events("r1", [{"ok": 1}], after=0) == 1  # not complete either

    # -- housekeeping --

    def test_prune_drops_the_event_logs_of_the_runs_it_prunes(self, store: EventLogStore) -> None:
        done = make_state()
        version = store.begin("c1", done, owner=OWNER, lease_s=30, expected_length=0)
        store.append_events(done.run_id, [{"n": 1}], after=0)
        store.commit(_answered(done), owner=OWNER, version=version)
        running = make_state(history_start=2)
        store.begin("c1", running, owner=OWNER, lease_s=30, expected_length=2)
        store.append_events(running.run_id, [{"n": 1}], after=0)
        store.append_events("r_kept", [{"n": 1}], after=0, keep_s=60)
        store.append_events("r_over", [{"n": 1}], after=0, keep_s=0)
        assert store.prune(older_than=0) == 1  # runs, not logs
        assert store.read_events(done.run_id) == []
        assert [e.seq for e in store.read_events(running.run_id)] == [1]
        assert [e.seq for e in store.read_events("r_kept")] == [1]
        assert store.read_events("r_over") == []

    # -- across processes --

    @pytest.mark.timeout(120)
    def test_read_events_wakes_for_an_append_from_another_process(
        self, store: EventLogStore
    ) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        store.append_events("r1", [{"from": "parent"}], after=0)
        context = self.process_context()
        go = context.Event()
        ready, out = context.Queue(), context.Queue()
        child = context.Process(target=_append_in_child, args=(factory, "r1", ready, go, out))
        child.start()
        ready.get(timeout=60)  # the child has its store: it appends as soon as it is told
        go.set()
        started = time.monotonic()
        events = store.read_events("r1", after=1, timeout=60)
        assert time.monotonic() - started < 30  # woken by the append, not by the timeout
        assert out.get(timeout=60) == 2
        child.join(30)
        assert [(e.seq, e.data) for e in events] == [(2, {"from": "child"})]
