"""The contract of acknowledging signals: a signal is taken once by the run's owner but
stays queued until the commit that consumes it (an inject: the commit whose state holds
it; a cancel: the run's end; a pause: everything its owner took), so a worker that dies
between taking a signal and committing leaves it for the recoverer, and nothing a commit
holds is ever delivered again (issue 29).

A lost run is made without waiting: the owner renews its lease with ``lease_s=0``, so it is
past its lease at the store's next look (a run begun live, so a cancel is queued, not
applied at once as for a run already lost)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ..._run_state import RunState
from ...stores._protocol import RunSignal, RunStore
from ...stores._rules import InputPending
from ._base import OTHER, OWNER, ContractBase, _answered, make_state

__all__ = ["SignalAcksContract"]

THIRD = "owner-c"


def _live(store: RunStore) -> RunState:
    """Begin a resumable run with a live lease (signals are queued for its owner)."""
    state = make_state(on_owner_lost="resume")
    store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
    return state


def _dies(store: RunStore, state: RunState, owner: str = OWNER) -> None:
    """The owner's lease runs out now (as if it died): the run is lost."""
    assert store.renew(state.run_id, owner=owner, lease_s=0)


def _texts(signals: list[RunSignal]) -> list[str]:
    return [block["text"] for signal in signals for block in signal.content if "text" in block]


def _holding(state: RunState, *texts: str) -> RunState:
    """A running state that holds ``texts`` as input not yet sent."""
    return replace(state, cycle=1, queued_inputs=tuple(({"text": t},) for t in texts))


class SignalAcksContract(ContractBase):
    """Signals are acknowledged at the commit that consumes them, not when taken."""

    def test_an_inject_the_dead_owner_took_reaches_the_new_owner(self, store: RunStore) -> None:
        state = _live(store)
        store.inject(state.run_id, "taken, never committed")
        assert _texts(store.wait_signals([state.run_id], 5)) == ["taken, never committed"]
        assert store.wait_signals([state.run_id], 0) == []  # taken once by its owner
        version = store.commit(replace(state, cycle=1), owner=OWNER, version=1, injects_received=0)
        _dies(store, state)
        store.inject(state.run_id, "queued while lost")
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=version)
        taken = store.wait_signals([state.run_id], 5)
        assert _texts(taken) == ["taken, never committed", "queued while lost"]
        done = _answered(state)
        with pytest.raises(InputPending):  # the new owner counts both
            store.commit(done, owner=OTHER, version=version, injects_received=1)
        store.commit(done, owner=OTHER, version=version, injects_received=2)

    def test_an_inject_a_commit_holds_is_never_delivered_again(self, store: RunStore) -> None:
        state = _live(store)
        store.inject(state.run_id, "held")
        assert _texts(store.wait_signals([state.run_id], 5)) == ["held"]
        held = _holding(state, "held")
        version = store.commit(held, owner=OWNER, version=1, injects_received=1)
        _dies(store, state)
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=version)
        assert store.wait_signals([state.run_id], 0) == []  # the state carries it
        store.commit(_answered(held), owner=OTHER, version=version, injects_received=0)
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "done"

    def test_a_commit_acknowledges_the_oldest_injects_each_owner_received(
        self, store: RunStore
    ) -> None:
        """Counts are per owner (since it began or claimed the run); across two claims,
        each commit drops exactly the injects its state holds, oldest first."""
        state = _live(store)
        for text in ("a", "b", "c"):
            store.inject(state.run_id, text)
        assert _texts(store.wait_signals([state.run_id], 5)) == ["a", "b", "c"]
        version = store.commit(
            _holding(state, "a", "b"), owner=OWNER, version=1, injects_received=2
        )
        _dies(store, state)
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=version)
        assert _texts(store.wait_signals([state.run_id], 5)) == ["c"]
        store.inject(state.run_id, "d")
        assert _texts(store.wait_signals([state.run_id], 5)) == ["d"]
        version = store.commit(
            _holding(state, "a", "b", "c"), owner=OTHER, version=version, injects_received=1
        )
        _dies(store, state, OTHER)
        version = store.claim(state.run_id, owner=THIRD, lease_s=30, version=version)
        assert _texts(store.wait_signals([state.run_id], 5)) == ["d"]
        store.commit(_answered(state), owner=THIRD, version=version, injects_received=1)

    def test_a_cancel_the_dead_owner_took_reaches_the_new_owner(self, store: RunStore) -> None:
        """A cancel is consumed by the run's end: taken by an owner that died first, it
        stops the recovered run too (the user's Stop is not lost with the worker)."""
        state = _live(store)
        assert store.cancel(state.run_id, "stop", mode="after_turn") is True
        (taken,) = store.wait_signals([state.run_id], 5)
        assert (taken.kind, taken.reason) == ("cancel", "stop")
        _dies(store, state)
        store.claim(state.run_id, owner=OTHER, lease_s=30, version=1)
        (again,) = store.wait_signals([state.run_id], 5)
        assert (again.kind, again.reason, again.mode) == ("cancel", "stop", "after_turn")

    def test_a_pause_consumes_every_signal_its_owner_took(self, store: RunStore) -> None:
        state = _live(store)
        store.inject(state.run_id, "carried by the pause")
        assert store.cancel(state.run_id, "answered by the pause") is True
        assert len(store.wait_signals([state.run_id], 5)) == 2
        paused = replace(
            _holding(state, "carried by the pause"), status="paused", next_step="tools"
        )
        version = store.commit(paused, owner=OWNER, version=1, injects_received=1)
        version = store.claim(state.run_id, owner=OTHER, lease_s=30, version=version)
        assert store.wait_signals([state.run_id], 0) == []
        store.commit(_answered(state), owner=OTHER, version=version, injects_received=0)
