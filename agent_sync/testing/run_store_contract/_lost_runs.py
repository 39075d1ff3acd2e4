"""The contract of lost runs: a running run whose owner died (its lease expired) is failed
on the next read unless its state says ``on_owner_lost="resume"``; then it is *lost*, left
running for a recoverer: ``lost_runs`` lists it, ``claim`` at its version takes it (one
winner), ``cancel`` closes it at once.

A lease that ran out is made without waiting: a run begun with ``lease_s=0`` is past its
lease at the store's next look, and one begun with a negative lease ran out that long ago
(the order of ``lost_runs``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ..._run_state import RunState
from ...errors import ConcurrentInvocationError, RunConflictError, UsageError
from ...messages import CANCELLED_TEXT, Message, ToolResult, validate_history
from ...stores._protocol import RunStore
from ...stores._rules import WORKER_STOPPED_TEXT
from ._base import OTHER, OWNER, ContractBase, _answered, _asking, make_state, racing_claims

__all__ = ["LostRunsContract"]


def _lost(
    store: RunStore, conversation_id: str = "c1", *, lease_s: float = 0, **fields: Any
) -> RunState:
    """Begin a resumable run whose owner's lease has run out (``lease_s`` <= 0)."""
    state = make_state(on_owner_lost="resume", **fields)
    store.begin(conversation_id, state, owner=OWNER, lease_s=lease_s, expected_length=0)
    return state


def _two_calls() -> tuple[Message, Message]:
    return (
        {"role": "user", "content": [{"text": "clean up"}]},
        {
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": "t1", "name": "ls", "input": {}}},
                {"toolUse": {"toolUseId": "t2", "name": "rm", "input": {}}},
            ],
        },
    )


class LostRunsContract(ContractBase):
    """Lost runs: the lost rule beside the fail rule, ``lost_runs``, claim and cancel."""

    # -- the rule --

    def test_a_lost_run_is_left_running_for_a_recoverer(self, store: RunStore) -> None:
        state = _lost(store, messages=_asking(), next_step="tools")
        record = store.load("c1")
        assert record.run is not None and record.run.state == state
        assert (record.run.owner, record.run.version) == (OWNER, 1)
        assert record.messages == ()  # nothing written to the log: the run goes on
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "running"
        with pytest.raises(ConcurrentInvocationError, match="lost its worker"):
            store.begin("c1", make_state(), owner=OTHER, lease_s=30, expected_length=0)
        with pytest.raises(ConcurrentInvocationError, match="waits for recovery"):
            store.replace_log("c1", [])
        assert [run.state.run_id for run in store.lost_runs()] == [state.run_id]

    def test_a_run_that_fails_when_lost_is_failed_on_read(self, store: RunStore) -> None:
        state = make_state(messages=_asking(), next_step="tools")  # on_owner_lost="fail"
        store.begin("c1", state, owner=OWNER, lease_s=0, expected_length=0)
        assert store.lost_runs() == []
        record = store.load("c1")
        assert record.run is None
        assert record.messages[2]["content"][0]["toolResult"]["status"] == "error"
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "failed"

    # -- lost_runs --

    def test_lost_runs_lists_the_longest_expired_first(self, store: RunStore) -> None:
        newest = _lost(store, "c1", lease_s=-10)
        oldest = _lost(store, "c2", lease_s=-300)
        middle = _lost(store, "c3", lease_s=-60)
        _lost(store, "c4", lease_s=30)  # live
        failing = make_state()  # on_owner_lost="fail": failed, never lost
        store.begin("c5", failing, owner=OWNER, lease_s=-500, expected_length=0)
        _paused, _ = self._paused_resumable(store, "c6")
        ended = _lost(store, "c7", lease_s=30)
        store.commit(_answered(ended), owner=OWNER, version=1)
        lost = store.lost_runs()
        assert [run.state.run_id for run in lost] == [oldest.run_id, middle.run_id, newest.run_id]
        first = lost[0]
        assert (first.owner, first.version, first.conversation_id) == (OWNER, 1, "c2")
        assert first.state == oldest and first.lease_expires_at is not None
        assert first.lease_expires_at < lost[1].lease_expires_at  # type: ignore[operator]
        ids = [run.state.run_id for run in store.lost_runs(limit=2)]
        assert ids == [oldest.run_id, middle.run_id]
        assert len(store.lost_runs(limit=1)) == 1

    def test_lost_runs_is_empty_while_leases_are_live(self, store: RunStore) -> None:
        assert store.lost_runs() == []
        state = _lost(store, lease_s=30)
        assert store.renew(state.run_id, owner=OWNER, lease_s=30) is True
        assert store.lost_runs() == []

    def test_a_renewed_lease_is_not_lost_any_more(self, store: RunStore) -> None:
        state = _lost(store)
        assert store.renew(state.run_id, owner=OWNER, lease_s=30) is True  # it was alive
        assert store.lost_runs() == []
        with pytest.raises(RunConflictError, match="lease is live"):
            store.claim(state.run_id, owner=OTHER, lease_s=30, version=1)

    @pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
    def test_a_bad_limit_is_refused(self, store: RunStore, limit: object) -> None:
        with pytest.raises(UsageError, match="limit"):
            store.lost_runs(limit=limit)  # type: ignore[arg-type]

    # -- claim --

    def test_claim_takes_a_lost_run_over(self, store: RunStore) -> None:
        state = _lost(store)
        committed = replace(state, cycle=1)
        store.commit(committed, owner=OWNER, version=1)  # its lease still ran out (0 s)
        (lost,) = store.lost_runs()
        assert lost.version == 2
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=2)
        assert version == 3
        record = store.load("c1")
        assert record.run is not None and record.run.state == committed  # as committed
        assert (record.run.owner, record.run.version) == (OTHER, 3)
        assert store.lost_runs() == []
        with pytest.raises(RunConflictError):
            store.claim(state.run_id, owner=OWNER, lease_s=30, version=2)  # taken
        assert store.renew(state.run_id, owner=OWNER, lease_s=30) is False  # the dead owner
        with pytest.raises(RunConflictError):
            store.commit(replace(committed, cycle=2), owner=OWNER, version=2)
        assert store.renew(state.run_id, owner=OTHER, lease_s=30) is True
        store.commit(_answered(committed), owner=OTHER, version=version)
        assert [m["role"] for m in store.load("c1").messages] == ["user", "assistant"]

    def test_claims_of_a_lost_run_racing_from_threads_have_one_winner(
        self, store: RunStore
    ) -> None:
        state = _lost(store)
        wins = racing_claims(store, state.run_id, 1)
        assert len(wins) == 1
        record = store.load("c1")
        assert record.run is not None and record.run.owner == wins[0]

    def test_claim_is_refused_at_a_stale_version(self, store: RunStore) -> None:
        state = _lost(store)
        for version in (0, 2):
            with pytest.raises(RunConflictError):
                store.claim(state.run_id, owner=OTHER, lease_s=30, version=version)
        record = store.load("c1")
        assert record.run is not None and (record.run.owner, record.run.version) == (OWNER, 1)

    def test_claim_is_refused_while_the_lease_is_live(self, store: RunStore) -> None:
        state = _lost(store, lease_s=30)
        with pytest.raises(RunConflictError, match="lease is live"):
            store.claim(state.run_id, owner=OTHER, lease_s=30, version=1)
        record = store.load("c1")
        assert record.run is not None and record.run.owner == OWNER

    def test_claim_is_refused_when_the_run_fails_when_lost(self, store: RunStore) -> None:
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=0, expected_length=0)
        with pytest.raises(RunConflictError):
            store.claim(state.run_id, owner=OTHER, lease_s=30, version=1)
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "failed"

    def test_claim_is_refused_when_the_run_is_over(self, store: RunStore) -> None:
        state = _lost(store)
        store.commit(_answered(state), owner=OWNER, version=1)  # its owner was alive
        with pytest.raises(RunConflictError, match="done"):
            store.claim(state.run_id, owner=OTHER, lease_s=30, version=2)

    def test_the_new_owner_takes_the_injects_queued_for_a_lost_run(self, store: RunStore) -> None:
        state = _lost(store)
        store.inject(state.run_id, "first")
        taken = store.wait_signals([state.run_id], 0)  # the old owner took it, then died
        assert [signal.kind for signal in taken] == ["inject"]
        store.inject(state.run_id, "second")  # queued while the run is lost
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=1)
        # never committed by the old owner: both go to the new one (see _signal_acks)
        signals = store.wait_signals([state.run_id], 0)
        assert [s.content for s in signals] == [({"text": "first"},), ({"text": "second"},)]
        done = _answered(state)
        with pytest.raises(RunConflictError):
            store.commit(done, owner=OTHER, version=version, injects_received=1)
        store.commit(done, owner=OTHER, version=version, injects_received=2)
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "done"

    # -- cancel --

    @pytest.mark.parametrize("mode", ["now", "after_turn"])
    def test_cancelling_a_lost_run_closes_it_at_once(self, store: RunStore, mode: str) -> None:
        ran: ToolResult = {"toolUseId": "t1", "status": "success", "content": [{"text": "ls"}]}
        state = _lost(
            store,
            messages=_two_calls(),
            next_step="tools",
            round_results=(ran,),
            queued_inputs=(({"text": "and then?"},),),
        )
        assert store.cancel(state.run_id, "stop", mode=mode) is True  # type: ignore[arg-type]
        record = store.load("c1")
        assert record.run is None
        messages = list(record.messages)
        assert validate_history(messages) == []
        answers = {
            block["toolResult"]["toolUseId"]: block["toolResult"]
            for block in messages[2]["content"]
            if "toolResult" in block
        }
        assert answers["t1"] == ran  # it ran: its result is kept
        assert answers["t2"]["status"] == "error"
        assert answers["t2"]["content"][0]["text"] == WORKER_STOPPED_TEXT
        assert {"text": "and then?"} in messages[2]["content"]
        assert messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "cancelled" and snap.cancel_reason == "stop"
        assert store.cancel(state.run_id) is False
        assert store.lost_runs() == []
        with pytest.raises(RunConflictError):
            store.claim(state.run_id, owner=OTHER, lease_s=30, version=1)
        length = len(messages)
        assert store.begin(
            "c1",
            make_state(history_start=length),
            owner=OTHER,
            lease_s=30,
            expected_length=length,
        )

    # -- helpers --

    def _paused_resumable(self, store: RunStore, conversation_id: str) -> tuple[RunState, int]:
        """A resumable run its owner paused (for approval) before its lease ran out."""
        state = _lost(store, conversation_id, lease_s=-1000, messages=_asking())
        paused = replace(state, status="paused", next_step="tools", cycle=1)
        return paused, store.commit(paused, owner=OWNER, version=1)
