"""The contract of runs: begin, compare-and-set commits, the final commit's log, pause,
claim and cancel of a paused run, leases, and pruning finished runs."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ...errors import ConcurrentInvocationError, PendingApprovalError, RunConflictError
from ...messages import ContentBlock
from ...stores._protocol import RunStore
from ...stores._rules import WORKER_STOPPED_TEXT
from ._base import (
    LEASE_S,
    OTHER,
    OWNER,
    ContractBase,
    _answered,
    _asking,
    _wait_past,
    _within,
    make_state,
    racing_claims,
)

__all__ = ["RunsContract"]


class RunsContract(ContractBase):
    """Runs: begin, commits, pause and claim, leases, prune."""

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
        wins = racing_claims(store, paused.run_id, version)
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

    # -- leases --

    def test_an_expired_lease_fails_the_run_and_frees_the_conversation(
        self, store: RunStore
    ) -> None:
        state = make_state(messages=_asking(), next_step="tools")
        store.begin("c1", state, owner=OWNER, lease_s=0, expected_length=0)  # ran out
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
        """The one lease test that lets a lease pass as time (``LEASE_S``): the run renewed
        within it is alive after it, the run beside it that was not renewed has run out."""
        state = make_state()
        started = time.monotonic()
        store.begin("c1", state, owner=OWNER, lease_s=LEASE_S, expected_length=0)
        renewed = store.renew(state.run_id, owner=OWNER, lease_s=30)
        within = _within(started, LEASE_S)
        left = make_state(messages=_asking(), next_step="tools")
        store.begin("c2", left, owner=OWNER, lease_s=LEASE_S, expected_length=0)
        _wait_past(time.time() + LEASE_S)
        assert store.load("c2").run is None  # a lease of LEASE_S ran out in LEASE_S
        snap = store.get(left.run_id)
        assert snap is not None and snap.status == "failed"
        if not within:  # the first lease ran out before the renew came
            pytest.skip("the machine took longer than LEASE_S between two calls")
        assert renewed is True
        assert store.renew(state.run_id, owner=OTHER, lease_s=30) is False
        record = store.load("c1")
        assert record.run is not None and record.run.state.status == "running"

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
