"""The contract of signals: ``cancel`` and ``inject`` reach a running run's owner once, in
order (``wait_signals``), an accepted inject is never dropped by the run's end or pause,
and a crafted id names nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import Any

import pytest

from ..._run_state import RunState
from ...agent import Agent
from ...errors import UsageError
from ...stores._event_log import EventLogStore
from ...stores._protocol import RunStore
from ...stores._rules import InputPending
from ..scripted import ScriptedModel
from ._base import OTHER, OWNER, ContractBase, _answered, make_state

__all__ = ["SignalsContract"]


class SignalsContract(ContractBase):
    """Signals: cancel and inject, delivered once and in order, never dropped."""

    # -- signals --

    def test_cancel_and_inject_reach_the_owner_once_in_order(self, store: RunStore) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.inject(state.run_id, [{"text": "one"}])
        assert store.cancel(state.run_id, "stop") is True
        store.inject(state.run_id, [{"text": "two"}])
        signals = store.wait_signals([state.run_id], timeout=5)
        while len(signals) < 3:
            more = store.wait_signals([state.run_id], timeout=5)
            assert more, signals
            signals += more
        assert [s.kind for s in signals] == ["inject", "cancel", "inject"]
        assert signals[0].content == ({"text": "one"},) and signals[1].reason == "stop"
        assert store.wait_signals([state.run_id], timeout=0) == []

    def test_a_cancel_carries_its_mode_and_a_bad_one_is_refused(self, store: RunStore) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        assert store.cancel(state.run_id, "later", mode="after_turn") is True
        assert store.cancel(state.run_id, "now") is True
        taken = store.wait_signals([state.run_id], 1.0)
        assert [(s.kind, s.reason, s.mode) for s in taken] == [
            ("cancel", "later", "after_turn"),
            ("cancel", "now", "now"),
        ]
        with pytest.raises(UsageError):
            store.cancel(state.run_id, mode="soon")  # type: ignore[arg-type]

    def test_wait_signals_wakes_when_a_signal_arrives(self, store: RunStore) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        got: list[Any] = []
        waiting = threading.Thread(
            target=lambda: got.extend(store.wait_signals([state.run_id], timeout=20))
        )
        waiting.start()
        store.cancel(state.run_id, "now")
        waiting.join(25)
        assert not waiting.is_alive() and [s.kind for s in got] == ["cancel"]

    def test_wait_signals_hears_a_run_added_to_its_ids_while_it_waits(
        self, store: RunStore
    ) -> None:
        first, second = make_state(), make_state()
        store.begin("c1", first, owner=OWNER, lease_s=30, expected_length=0)
        store.begin("c2", second, owner=OWNER, lease_s=30, expected_length=0)
        owned = _GrowingIds([first.run_id])
        got: list[Any] = []
        started = time.monotonic()
        waiting = threading.Thread(target=lambda: got.extend(store.wait_signals(owned, 20)))
        waiting.start()
        assert owned.read.wait(10)  # the store is waiting on the ids it read
        owned.add(second.run_id)  # a run this process starts meanwhile
        store.cancel(second.run_id, "stop the new one")
        waiting.join(25)
        assert [(s.run_id, s.reason) for s in got] == [(second.run_id, "stop the new one")]
        assert time.monotonic() - started < 10  # heard when sent, not at the timeout

    def test_inject_needs_a_running_run(self, store: RunStore) -> None:
        paused, _ = self._paused(store)
        with pytest.raises(UsageError):
            store.inject(paused.run_id, [{"text": "x"}])
        with pytest.raises(UsageError):
            store.inject("run_unknown", [{"text": "x"}])

    def test_a_final_commit_waits_for_every_inject_the_store_accepted(
        self, store: RunStore
    ) -> None:
        """An inject accepted (``store.inject`` returned) is answered by the run or written to
        its history, never deleted with the run's queue by its final commit (issue 22/3)."""
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.inject(state.run_id, "one more thing")  # accepted: the caller was told "queued"
        done = _answered(state)
        with pytest.raises(InputPending):  # the owner has not received it: no end yet
            store.commit(done, owner=OWNER, version=1, injects_received=0)
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "running"  # nothing changed
        taken = store.wait_signals([state.run_id], timeout=5)  # still queued for the owner
        assert [(s.kind, s.content) for s in taken] == [("inject", ({"text": "one more thing"},))]
        assert store.commit(done, owner=OWNER, version=1, injects_received=1) == 2
        with pytest.raises(UsageError):  # over: an inject now is refused, not queued
            store.inject(state.run_id, "too late")
        # a running commit is never refused for it (the owner answers at its next step)
        other = make_state()
        store.begin("c2", other, owner=OWNER, lease_s=30, expected_length=0)
        store.inject(other.run_id, "x")
        assert store.commit(replace(other, cycle=1), owner=OWNER, version=1, injects_received=0)

    @pytest.mark.parametrize("where", ["delivered", "queued"])
    def test_an_inject_accepted_as_the_run_ends_is_answered(
        self, store: RunStore, where: str
    ) -> None:
        """``store.inject`` answered (the route's 202 "queued") while the run is about to
        store its end: the run answers it with one more model call, whether the owner's
        watcher already handed it to the ending run (``delivered``) or it is still queued
        in the store when the final commit comes (``queued``); never dropped (issue 22/3)."""
        held = _EndHeld(store, hold_signals=where == "queued")
        model = ScriptedModel(["first answer", "the late question, answered"])
        agent = Agent(model, store=held, conversation_id="c1")
        (result,) = held.inject_at_the_held_commit(
            lambda: agent.invoke("hello"), "one more thing", where
        )
        assert result.text == "the late question, answered"
        asked = model.calls[1].messages[-1]
        assert asked["role"] == "user" and {"text": "one more thing"} in asked["content"]
        logged = list(store.load("c1").messages)
        assert [m["role"] for m in logged] == ["user", "assistant", "user", "assistant"]
        assert {"text": "one more thing"} in logged[2]["content"]
        with pytest.raises(UsageError):  # over now: refused, never queued and lost
            store.inject(result.run_id, "after the end")

    @pytest.mark.parametrize("where", ["delivered", "queued"])
    def test_an_inject_accepted_as_the_run_pauses_is_answered_after_the_resume(
        self, store: RunStore, where: str
    ) -> None:
        """``store.inject`` answered while the run is about to store its pause for
        approval: the paused state carries the input (the watcher handed it over after the
        run sealed its inbox, or it is still queued in the store at the pause commit) and
        the first model call after the resume answers it; never dropped (issue 22/3)."""
        from ...tools.decorator import tool

        ran: list[str] = []

        @tool(requires_approval=True)
        def delete_file(path: str) -> str:
            """Delete a file."""
            ran.append(path)
            return f"deleted {path}"

        held = _EndHeld(store, hold_signals=where == "queued", hold_status="paused")
        model = ScriptedModel(
            [{"tool_calls": [{"name": "delete_file", "input": {"path": "a.txt"}}]}, "all done"]
        )
        agent = Agent(model, tools=[delete_file], store=held, conversation_id="c1")
        (paused,) = held.inject_at_the_held_commit(
            lambda: agent.invoke("clean up"), "and tidy the logs", where
        )
        assert paused.stop_reason == "paused"
        snapshot = store.get(paused.run_id)
        assert snapshot is not None and snapshot.status == "paused"
        assert snapshot.queued_inputs == (({"text": "and tidy the logs"},),)
        result = agent.resume({paused.approvals[0].id: True})
        assert result.text == "all done" and ran == ["a.txt"]
        asked = model.calls[1].messages[-1]
        assert asked["role"] == "user" and {"text": "and tidy the logs"} in asked["content"]

    def test_a_claimed_run_counts_only_the_injects_its_new_owner_can_receive(
        self, store: RunStore
    ) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.inject(state.run_id, "answered by the first owner")
        assert len(store.wait_signals([state.run_id], timeout=5)) == 1
        store.commit(replace(state, status="paused", next_step="tools"), owner=OWNER, version=1)
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=2)
        done = _answered(state)
        assert store.commit(done, owner=OTHER, version=version, injects_received=0)

    def test_crafted_ids_name_nothing(self, store: EventLogStore) -> None:
        """No id reaches another key or row: ``<run id>:signals`` (a Redis list while a signal
        is queued), an empty id, or one UTF-8 cannot encode, is an unknown run, never an
        error of the storage (issue 22/8)."""
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.inject(state.run_id, "queued")  # the run's signal queue exists now
        assert store.cancel(state.run_id, "queued too") is True
        store.append_events(state.run_id, [{"n": 1}], after=0)
        for crafted in (
            f"{state.run_id}:signals",
            f"{state.run_id}:",
            f"signals:{state.run_id}",
            "",
            "run_\udcff",
            "c1:log",
            "c1:current",
        ):
            assert store.get(crafted) is None, crafted
            assert store.cancel(crafted) is False, crafted
            with pytest.raises(UsageError):
                store.inject(crafted, "x")
            assert store.read_events(crafted) == [], crafted
            record = store.load(crafted)
            assert (record.messages, record.run) == ((), None), crafted
        assert len(store.wait_signals([state.run_id], timeout=5)) >= 1  # untouched


class _GrowingIds(Collection[str]):
    """Run ids that grow while a store waits on them (as a watcher's do); ``read`` is set
    once the store has read them."""

    def __init__(self, ids: list[str]) -> None:
        self._ids = list(ids)
        self._lock = threading.Lock()
        self.read = threading.Event()

    def add(self, run_id: str) -> None:
        with self._lock:
            self._ids.append(run_id)

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._ids

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            ids = list(self._ids)
        self.read.set()
        return iter(ids)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)


class _EndHeld:
    """A store that holds a run's ``hold_status`` (``done``) commit until ``go`` is set
    (``ending`` says it is there), and says when the watcher takes an inject (``taken``) or
    such a commit is refused for one (``refused``). With ``hold_signals``, ``wait_signals``
    takes nothing until :meth:`release_signals`: the inject stays queued at the commit."""

    def __init__(self, store: RunStore, *, hold_signals: bool, hold_status: str = "done") -> None:
        self._store = store
        self._hold_status = hold_status
        self.lease_s = getattr(store, "lease_s", 30.0)
        self.run_id: str | None = None
        self.ending, self.go = threading.Event(), threading.Event()
        self.taken, self.refused = threading.Event(), threading.Event()
        self._signals_free = threading.Event()
        if not hold_signals:
            self._signals_free.set()

    def release_signals(self) -> None:
        self._signals_free.set()

    def inject_at_the_held_commit(
        self, call: Callable[[], Any], text: str, where: str
    ) -> list[Any]:
        """Run ``call`` in a thread; once its run reaches the held commit, inject ``text``
        (accepted: the caller heard "queued"), ``delivered`` to the owner or still
        ``queued`` in the store when the commit goes on. Returns what ``call`` returned."""
        results: list[Any] = []
        runner = threading.Thread(target=lambda: results.append(call()))
        runner.start()
        try:
            assert self.ending.wait(30), f"the run never reached its {self._hold_status} commit"
            assert self.run_id is not None
            self.inject(self.run_id, text)
            if where == "delivered":
                assert self.taken.wait(30), "the watcher never took the inject"
            self.go.set()  # the commit goes on
            if where == "queued":
                assert self.refused.wait(30), "the commit did not see the inject"
                self.release_signals()  # now the watcher may take it
        finally:
            self.go.set()
            self.release_signals()
            runner.join(30)
        return results

    def commit(self, state: RunState, **options: Any) -> int:
        if state.status == self._hold_status and not self.go.is_set():
            self.run_id = state.run_id
            self.ending.set()
            self.go.wait(30)
        try:
            return self._store.commit(state, **options)
        except InputPending:
            self.refused.set()
            raise

    def wait_signals(self, run_ids: Collection[str], timeout: float) -> list[Any]:
        if not self._signals_free.wait(timeout):
            return []
        taken = self._store.wait_signals(run_ids, timeout)
        if any(signal.kind == "inject" for signal in taken):
            self.taken.set()
        return taken

    def __getattr__(self, name: str) -> Any:  # every other method: the store's own
        return getattr(self._store, name)
