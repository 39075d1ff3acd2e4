"""The run store contract suite: every :class:`~agent_sync.stores.RunStore` passes it.

Subclass :class:`RunStoreContract` in a pytest module and override :meth:`make_store`
(a fresh, empty store per call); a store that works across processes also overrides
:meth:`process_factory`::

    from agent_sync.stores import MemoryRunStore
    from agent_sync.testing.run_store_contract import RunStoreContract

    class TestMemoryStore(RunStoreContract):
        def make_store(self):
            return MemoryRunStore()

Every test builds its states with :func:`make_state`, so the suite needs nothing but the
store. Lease tests wait for a short lease (``LEASE_S``) to pass, and the event-log test of
``keep_s`` for a complete log kept that long: that is the behaviour under test, bounded by
the test's timeout. The ``process_factory`` store is also used in this process, as a second
store object on the same data (a reader must wake for its appends as for another process's).
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import Any

import pytest

from .._run_state import RunState
from ..agent import Agent
from ..errors import ConcurrentInvocationError, PendingApprovalError, RunConflictError, UsageError
from ..messages import ContentBlock, Message
from ..stores._protocol import RunStore
from ..stores._rules import WORKER_STOPPED_TEXT, InputPending
from .scripted import ScriptedModel

__all__ = ["LEASE_S", "TURNS", "RunStoreContract", "make_state", "take_turns"]

LEASE_S = 0.3
"""The short lease (and event log ``keep_s``) the expiry tests use."""

OWNER = "owner-a"
OTHER = "owner-b"


def make_state(
    *,
    run_id: str | None = None,
    status: str = "running",
    history_start: int = 0,
    messages: tuple[Message, ...] | None = None,
    next_step: str | None = "model",
    **fields: Any,
) -> RunState:
    """A run state for the contract tests (a user prompt, by default)."""
    return RunState(
        run_id=run_id or f"run_{uuid.uuid4().hex}",
        status=status,  # type: ignore[arg-type]
        next_step=next_step,  # type: ignore[arg-type]
        cycle=0,
        messages=messages
        if messages is not None
        else ({"role": "user", "content": [{"text": "hi"}]},),
        history_start=history_start,
        **fields,
    )


def _asking(tool_use_id: str = "t1") -> tuple[Message, Message]:
    return (
        {"role": "user", "content": [{"text": "delete it"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": tool_use_id, "name": "rm", "input": {}}}],
        },
    )


def _answered(state: RunState, text: str = "done") -> RunState:
    answer: Message = {"role": "assistant", "content": [{"text": text}]}
    messages = (*state.messages, answer)
    return replace(state, status="done", next_step=None, messages=messages, stop_reason="end_turn")


def _wait_past(deadline: float) -> None:
    """Let wall-clock time pass ``deadline`` (a lease is time; this is what is tested)."""
    pause = threading.Event()
    while time.time() <= deadline:
        pause.wait(max(0.0, deadline - time.time()) + 0.01)


def _begin_in_child(
    factory: Callable[[], RunStore], conversation_id: str, ready: Any, go: Any, out: Any
) -> None:
    store = factory()
    state = make_state()
    ready.put(True)
    go.wait(30)
    try:
        store.begin(
            conversation_id, state, owner=f"pid-{uuid.uuid4().hex}", lease_s=30, expected_length=0
        )
        out.put("won")
    except ConcurrentInvocationError:
        out.put("busy")
    except BaseException as exc:  # reported to the parent
        out.put(f"error: {type(exc).__name__}: {exc}")


def _append_in_child(
    factory: Callable[[], RunStore], run_id: str, ready: Any, go: Any, out: Any
) -> None:
    store = factory()
    ready.put(True)
    go.wait(30)
    try:
        out.put(store.append_events(run_id, [{"from": "child"}], after=1))
    except BaseException as exc:  # reported to the parent
        out.put(f"error: {type(exc).__name__}: {exc}")


TURNS = 10
"""Turns each writer takes in the concurrent-writers tests."""


def take_turns(store: RunStore, conversation_id: str, writer: str, turns: int) -> int:
    """Append ``turns`` turns (a user and an assistant message naming ``writer`` and the
    turn) to a conversation other writers append to, as an agent would: load, begin at the
    loaded length, commit the final state. Refusals are retried; returns how many."""
    retries = 0
    pause = threading.Event()
    for turn in range(turns):
        marker = f"{writer}/{turn}"
        while True:
            length = len(store.load(conversation_id).messages)
            state = make_state(
                history_start=length,
                messages=({"role": "user", "content": [{"text": marker}]},),
            )
            try:
                version = store.begin(
                    conversation_id, state, owner=writer, lease_s=30, expected_length=length
                )
            except (ConcurrentInvocationError, RunConflictError):
                retries += 1
                pause.wait(0.001)  # another writer's turn is in flight
                continue
            store.commit(_answered(state, marker), owner=writer, version=version)
            break
    return retries


def _turns_in_child(factory: Callable[[], RunStore], writer: str, ready: Any, go: Any) -> None:
    store = factory()
    ready.put(True)
    go.wait(30)
    take_turns(store, "shared", writer, TURNS)


class RunStoreContract:
    """Inherit it; override :meth:`make_store` (and :meth:`process_factory`)."""

    def make_store(self) -> RunStore:
        """A fresh, empty store."""
        raise NotImplementedError("override make_store() in your subclass")

    def process_factory(self) -> Callable[[], RunStore] | None:
        """A picklable, top-level callable that builds a store on the same data as the
        last :meth:`make_store`, in another process; ``None`` (the default): the store
        lives in one process and the cross-process tests are skipped."""
        return None

    @pytest.fixture
    def store(self) -> RunStore:
        return self.make_store()

    # -- conversations and runs --

    def test_an_unknown_conversation_is_empty(self, store: RunStore) -> None:
        record = store.load("nobody")
        assert record.messages == () and record.run is None
        assert store.get("run_unknown") is None
        assert store.cancel("run_unknown") is False

    def test_begin_records_a_running_run(self, store: RunStore) -> None:
        state = make_state()
        assert store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0) == 1
        record = store.load("c1")
        assert record.run is not None and record.run.state == state
        assert (record.run.version, record.run.owner) == (1, OWNER)
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "running" and snap.run_id == state.run_id

    def test_a_second_begin_is_refused_and_changes_nothing(self, store: RunStore) -> None:
        first = make_state()
        store.begin("c1", first, owner=OWNER, lease_s=30, expected_length=0)
        with pytest.raises(ConcurrentInvocationError):
            store.begin("c1", make_state(), owner=OTHER, lease_s=30, expected_length=0)
        record = store.load("c1")
        assert record.run is not None and record.run.state.run_id == first.run_id
        assert store.begin("c2", make_state(), owner=OTHER, lease_s=30, expected_length=0) == 1

    def test_begin_on_a_stale_length_is_a_conflict(self, store: RunStore) -> None:
        with pytest.raises(RunConflictError):
            store.begin("c1", make_state(), owner=OWNER, lease_s=30, expected_length=3)
        assert store.load("c1").run is None

    def test_commits_are_compare_and_set(self, store: RunStore) -> None:
        state = make_state()
        version = store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        moved = replace(state, cycle=1)
        version2 = store.commit(moved, owner=OWNER, version=version)
        assert version2 > version
        with pytest.raises(RunConflictError):
            store.commit(replace(state, cycle=2), owner=OWNER, version=version)  # stale
        with pytest.raises(RunConflictError):
            store.commit(replace(state, cycle=2), owner=OTHER, version=version2)  # not its run
        record = store.load("c1")
        assert record.run is not None and record.run.state.cycle == 1

    def test_a_final_commit_writes_the_log_and_frees_the_conversation(
        self, store: RunStore
    ) -> None:
        state = make_state()
        version = store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        done = _answered(state)
        store.commit(done, owner=OWNER, version=version)
        record = store.load("c1")
        assert record.run is None and list(record.messages) == list(done.messages)
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "done"
        with pytest.raises(RunConflictError):
            store.commit(done, owner=OWNER, version=version + 1)  # over
        second = make_state(
            history_start=2,
            messages=({"role": "user", "content": [{"text": "again"}]},),
        )
        version = store.begin("c1", second, owner=OWNER, lease_s=30, expected_length=2)
        store.commit(_answered(second, "again done"), owner=OWNER, version=version)
        texts = [m["content"][0]["text"] for m in store.load("c1").messages]
        assert texts == ["hi", "done", "again", "again done"]

    def test_a_run_may_rewrite_the_last_user_message_of_the_log(self, store: RunStore) -> None:
        failed = make_state()
        version = store.begin("c1", failed, owner=OWNER, lease_s=30, expected_length=0)
        store.commit(replace(failed, status="failed", next_step=None), owner=OWNER, version=version)
        assert len(store.load("c1").messages) == 1  # ends with the user's message
        extended = make_state(
            history_start=0,
            messages=({"role": "user", "content": [{"text": "hi"}, {"text": "and more"}]},),
        )
        version = store.begin("c1", extended, owner=OWNER, lease_s=30, expected_length=1)
        store.commit(_answered(extended), owner=OWNER, version=version)
        messages = store.load("c1").messages
        assert len(messages) == 2 and messages[0]["content"][1] == {"text": "and more"}

    def test_load_since_reads_the_rest_of_the_log(self, store: RunStore) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.commit(_answered(state), owner=OWNER, version=1)
        whole = store.load("c1")
        assert (whole.start, whole.log_length, len(whole.messages)) == (0, 2, 2)
        tail = store.load("c1", since=1)
        assert (tail.start, tail.log_length, tail.messages) == (1, 2, whole.messages[1:])
        beyond = store.load("c1", since=10)
        assert (beyond.start, beyond.log_length, beyond.messages) == (2, 2, ())
        assert store.load("nobody", since=3).log_length == 0

    def test_bytes_survive(self, store: RunStore) -> None:
        image: ContentBlock = {"image": {"format": "png", "source": {"bytes": b"\x89PNG\x00\xff"}}}
        state = make_state(messages=({"role": "user", "content": [{"text": "look"}, image]},))
        version = store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.commit(_answered(state), owner=OWNER, version=version)
        assert store.load("c1").messages[0]["content"][1] == image

    # -- pause, resume, cancel --

    def _paused(self, store: RunStore) -> tuple[RunState, int]:
        state = make_state(messages=_asking())
        version = store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        paused = replace(state, status="paused", next_step="tools", cycle=1)
        return paused, store.commit(paused, owner=OWNER, version=version)

    def test_a_paused_run_blocks_begin_and_has_no_owner(self, store: RunStore) -> None:
        paused, _ = self._paused(store)
        with pytest.raises(PendingApprovalError):
            store.begin("c1", make_state(), owner=OTHER, lease_s=30, expected_length=0)
        record = store.load("c1")
        assert record.run is not None and record.run.owner is None
        assert record.run.state.status == "paused"

    def test_one_claim_wins(self, store: RunStore) -> None:
        paused, version = self._paused(store)
        claimed = store.claim(paused.run_id, owner=OTHER, lease_s=30, version=version)
        assert claimed > version
        with pytest.raises(RunConflictError):
            store.claim(paused.run_id, owner=OWNER, lease_s=30, version=version)
        record = store.load("c1")
        assert record.run is not None and record.run.owner == OTHER
        assert record.run.state.status == "running"

    def test_claims_racing_from_threads_have_one_winner(self, store: RunStore) -> None:
        paused, version = self._paused(store)
        barrier = threading.Barrier(8)
        wins: list[str] = []

        def claim(owner: str) -> None:
            barrier.wait(10)
            try:
                store.claim(paused.run_id, owner=owner, lease_s=30, version=version)
                wins.append(owner)
            except RunConflictError:
                pass

        threads = [threading.Thread(target=claim, args=(f"o{n}",)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(wins) == 1

    def test_cancelling_a_paused_run_closes_it_at_once(self, store: RunStore) -> None:
        paused, _ = self._paused(store)
        assert store.cancel(paused.run_id, "no") is True
        record = store.load("c1")
        assert record.run is None
        roles = [m["role"] for m in record.messages]
        assert roles == ["user", "assistant", "user", "assistant"]
        result = record.messages[2]["content"][0]["toolResult"]
        assert result["status"] == "error" and result["toolUseId"] == "t1"
        snap = store.get(paused.run_id)
        assert snap is not None and snap.status == "cancelled"
        assert store.cancel(paused.run_id) is False

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
        from ..tools.decorator import tool

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

    def test_crafted_ids_name_nothing(self, store: RunStore) -> None:
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

    # -- leases --

    @pytest.mark.timeout(30)
    def test_an_expired_lease_fails_the_run_and_frees_the_conversation(
        self, store: RunStore
    ) -> None:
        state = make_state(messages=_asking(), next_step="tools")
        store.begin("c1", state, owner=OWNER, lease_s=LEASE_S, expected_length=0)
        _wait_past(time.time() + LEASE_S)
        record = store.load("c1")
        assert record.run is None
        answer = record.messages[2]["content"][0]["toolResult"]
        assert answer["status"] == "error"
        text = answer["content"][0]["text"]
        assert text == WORKER_STOPPED_TEXT
        assert "worker stopped" in text and "effect unknown" in text  # the contract's words
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "failed"
        with pytest.raises(RunConflictError):
            store.commit(replace(state, cycle=1), owner=OWNER, version=1)
        assert store.begin(
            "c1", make_state(history_start=3), owner=OTHER, lease_s=30, expected_length=3
        )

    @pytest.mark.timeout(30)
    def test_renew_keeps_a_run_alive(self, store: RunStore) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=LEASE_S, expected_length=0)
        assert store.renew(state.run_id, owner=OWNER, lease_s=30) is True
        assert store.renew(state.run_id, owner=OTHER, lease_s=30) is False
        _wait_past(time.time() + LEASE_S)
        record = store.load("c1")
        assert record.run is not None and record.run.state.status == "running"

    # -- event logs --

    def test_events_are_numbered_from_one_with_no_hole(self, store: RunStore) -> None:
        assert store.append_events("r1", [{"n": 1}, {"n": 2}], after=0) == 2
        assert store.append_events("r1", [{"n": 3}], after=2) == 3
        events = store.read_events("r1")
        assert [(e.seq, e.data) for e in events] == [(1, {"n": 1}), (2, {"n": 2}), (3, {"n": 3})]
        assert store.append_events("r2", [{"n": 1}], after=0) == 1  # one log per run
        assert [e.seq for e in store.read_events("r1")] == [1, 2, 3]

    def test_events_are_read_from_any_number_on(self, store: RunStore) -> None:
        store.append_events("r1", [{"n": n} for n in range(1, 6)], after=0)
        for after in range(6):
            events = store.read_events("r1", after=after)
            assert [(e.seq, e.data["n"]) for e in events] == [(n, n) for n in range(after + 1, 6)]
        assert store.read_events("r1", after=9) == []

    def test_a_long_log_is_read_whole(self, store: RunStore) -> None:
        store.append_events("r1", [{"n": n} for n in range(1, 1001)], after=0)
        store.append_events("r1", [{"n": 1001}], after=1000)
        assert [e.data["n"] for e in store.read_events("r1")] == list(range(1, 1002))

    def test_an_event_reads_back_equal_with_its_keys_in_order(self, store: RunStore) -> None:
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

    def test_an_empty_append_is_checked_and_changes_nothing(self, store: RunStore) -> None:
        assert store.append_events("r1", [], after=0) == 0
        store.append_events("r1", [{"n": 1}], after=0)
        assert store.append_events("r1", [], after=1) == 1
        with pytest.raises(RunConflictError):
            store.append_events("r1", [], after=0)
        assert [e.seq for e in store.read_events("r1")] == [1]

    def test_an_append_after_a_stale_number_is_refused_and_appends_nothing(
        self, store: RunStore
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

    def test_writers_racing_after_the_same_event_have_one_winner(self, store: RunStore) -> None:
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

    def test_a_complete_log_is_kept_and_refuses_appends(self, store: RunStore) -> None:
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
    def test_a_complete_log_is_dropped_after_keep_s(self, store: RunStore) -> None:
        store.append_events("r1", [{"n": 1}], after=0, keep_s=LEASE_S)
        assert [e.seq for e in store.read_events("r1")] == [1]
        _wait_past(time.time() + LEASE_S)
        assert store.read_events("r1") == []
        assert store.append_events("r1", [{"n": "new"}], after=0) == 1  # gone, not hidden

    def test_a_log_kept_for_zero_seconds_is_dropped_at_once(self, store: RunStore) -> None:
        store.append_events("r1", [{"n": 1}], after=0)
        assert store.append_events("r1", [{"n": 2}], after=1, keep_s=0) == 2
        assert store.read_events("r1") == []

    def test_read_events_waits_for_the_first_append_from_another_thread(
        self, store: RunStore
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
        self, store: RunStore
    ) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        other = factory()  # on the same data, as another process would be
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

    def test_read_events_with_nothing_to_read_waits_out_its_timeout(self, store: RunStore) -> None:
        started = time.monotonic()
        assert store.read_events("run_unknown", timeout=0.05) == []
        assert time.monotonic() - started >= 0.05
        store.append_events("r1", [{"n": 1}], after=0)
        assert store.read_events("r1", after=1, timeout=0.05) == []
        assert store.read_events("run_unknown") == []

    def test_bad_events_and_numbers_are_usage_errors_and_append_nothing(
        self, store: RunStore
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

    def test_prune_removes_finished_runs_only(self, store: RunStore) -> None:
        done = make_state()
        version = store.begin("c1", done, owner=OWNER, lease_s=30, expected_length=0)
        store.commit(_answered(done), owner=OWNER, version=version)
        running = make_state(history_start=2)
        store.begin("c1", running, owner=OWNER, lease_s=30, expected_length=2)
        assert store.prune(older_than=0) >= 1
        assert store.get(done.run_id) is None
        assert store.get(running.run_id) is not None
        assert len(store.load("c1").messages) == 2  # the log is kept

    def test_prune_drops_the_event_logs_of_the_runs_it_prunes(self, store: RunStore) -> None:
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

    # -- concurrency --

    def test_begins_racing_from_threads_have_one_winner(self, store: RunStore) -> None:
        barrier = threading.Barrier(8)
        outcomes: list[str] = []

        def begin() -> None:
            barrier.wait(10)
            try:
                store.begin("c1", make_state(), owner=OWNER, lease_s=30, expected_length=0)
                outcomes.append("won")
            except ConcurrentInvocationError:
                outcomes.append("busy")

        threads = [threading.Thread(target=begin) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(outcomes) == ["busy"] * 7 + ["won"]

    def test_writers_from_threads_lose_and_duplicate_nothing(self, store: RunStore) -> None:
        writers = [f"thread-{n}" for n in range(4)]
        threads = [
            threading.Thread(target=take_turns, args=(store, "shared", writer, TURNS))
            for writer in writers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        _assert_every_turn_once(store, writers)

    @pytest.mark.timeout(120)
    def test_writers_from_processes_lose_and_duplicate_nothing(self, store: RunStore) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        context = multiprocessing.get_context("spawn")
        go, ready = context.Event(), context.Queue()
        writers = [f"process-{n}" for n in range(3)]
        children = [
            context.Process(target=_turns_in_child, args=(factory, writer, ready, go))
            for writer in writers
        ]
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=60)
        go.set()
        for child in children:
            child.join(90)
        assert [child.exitcode for child in children] == [0] * len(children)
        _assert_every_turn_once(store, writers)

    @pytest.mark.timeout(120)
    def test_begins_racing_from_processes_have_one_winner(self, store: RunStore) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        context = multiprocessing.get_context("spawn")
        go = context.Event()
        ready, out = context.Queue(), context.Queue()
        children = [
            context.Process(target=_begin_in_child, args=(factory, "race", ready, go, out))
            for _ in range(4)
        ]
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=60)  # every child has its store: the race is real
        go.set()
        outcomes = sorted(out.get(timeout=60) for _ in children)
        for child in children:
            child.join(30)
        assert outcomes == ["busy", "busy", "busy", "won"], outcomes

    @pytest.mark.timeout(120)
    def test_read_events_wakes_for_an_append_from_another_process(self, store: RunStore) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        store.append_events("r1", [{"from": "parent"}], after=0)
        context = multiprocessing.get_context("spawn")
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

    # -- a history replaced by the user (agent.messages = [...]) --

    def test_replace_log_writes_a_new_log_and_bumps_the_generation(self, store: RunStore) -> None:
        assert store.load("c1").generation == 0
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.commit(_answered(state), owner=OWNER, version=1)
        new: list[Message] = [
            {"role": "user", "content": [{"text": "edited"}]},
            {"role": "assistant", "content": [{"text": "answer"}]},
            {"role": "user", "content": [{"text": "next"}]},
        ]
        assert store.replace_log("c1", new) == 1
        record = store.load("c1")
        assert (list(record.messages), record.generation, record.run) == (new, 1, None)
        tail = store.load("c1", since=2)
        assert (tail.start, tail.log_length, tail.generation) == (2, 3, 1)
        assert store.replace_log("c1", new[:1]) == 2  # shorter: the log may shrink here
        assert [m["content"][0]["text"] for m in store.load("c1").messages] == ["edited"]
        assert store.replace_log("fresh", new) == 1  # an unknown conversation starts with it
        again = make_state(history_start=1)
        assert store.begin("c1", again, owner=OWNER, lease_s=30, expected_length=1) == 1
        store.commit(_answered(again, "on the new log"), owner=OWNER, version=1)
        texts = [m["content"][0]["text"] for m in store.load("c1").messages]
        assert texts == ["edited", "hi", "on the new log"]
        assert store.load("c1").generation == 2  # a run's commit is no replacement

    def test_replace_log_is_refused_while_a_run_is_live_or_paused(self, store: RunStore) -> None:
        new: list[Message] = [{"role": "user", "content": [{"text": "edited"}]}]
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        with pytest.raises(ConcurrentInvocationError):
            store.replace_log("c1", new)
        store.commit(_answered(state), owner=OWNER, version=1)
        record = store.load("c1")
        assert (len(record.messages), record.generation) == (2, 0)  # nothing changed
        paused = make_state(history_start=2, messages=_asking())
        version = store.begin("c1", paused, owner=OWNER, lease_s=30, expected_length=2)
        store.commit(
            replace(paused, status="paused", next_step="tools", cycle=1),
            owner=OWNER,
            version=version,
        )
        with pytest.raises(PendingApprovalError):
            store.replace_log("c1", new)
        record = store.load("c1")
        assert (len(record.messages), record.generation) == (2, 0)
        assert record.run is not None and record.run.state.status == "paused"

    @pytest.mark.timeout(30)
    def test_replace_log_fails_a_run_whose_lease_ran_out_first(self, store: RunStore) -> None:
        state = make_state(messages=_asking(), next_step="tools")
        store.begin("c1", state, owner=OWNER, lease_s=LEASE_S, expected_length=0)
        _wait_past(time.time() + LEASE_S)
        new: list[Message] = [{"role": "user", "content": [{"text": "edited"}]}]
        assert store.replace_log("c1", new) == 1
        assert list(store.load("c1").messages) == new
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "failed"


def _assert_every_turn_once(store: RunStore, writers: list[str]) -> None:
    from ..messages import validate_history

    log = list(store.load("shared").messages)
    assert validate_history(log) == []
    markers = [message["content"][0]["text"] for message in log]
    expected = sorted(f"{writer}/{turn}" for writer in writers for turn in range(TURNS))
    assert sorted(markers[0::2]) == expected  # every turn once: none lost, none twice
    assert markers[0::2] == markers[1::2]  # each answer follows its own prompt


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
