"""What every part of the contract suite shares: the base class (the store fixture and
what a subclass overrides), :func:`make_state` and the small helpers of the tests."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any

import pytest

from ..._run_state import RunState
from ...errors import RunConflictError
from ...messages import Message
from ...stores import RunEventLog
from ...stores._event_log import EventLogStore
from ...stores._protocol import RunStore

__all__ = [
    "LEASE_S",
    "OTHER",
    "OWNER",
    "ContractBase",
    "_answered",
    "_asking",
    "_wait_past",
    "events_of",
    "make_state",
]

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


def _within(started: float, seconds: float) -> bool:
    """Whether under ``seconds`` have passed since ``started`` (``time.monotonic()``): what
    holds only *during* a short lease or keep time is asserted when the check came inside
    it (a busy machine can take longer than ``LEASE_S`` between two calls)."""
    return time.monotonic() - started < seconds


def _wait_past(deadline: float) -> None:
    """Let wall-clock time pass ``deadline`` (a lease is time; this is what is tested)."""
    pause = threading.Event()
    while time.time() <= deadline:
        pause.wait(max(0.0, deadline - time.time()) + 0.01)


def events_of(store: RunStore) -> EventLogStore:
    """``store``, checked to keep event logs too (every store of the package does)."""
    assert isinstance(store, RunEventLog), f"{type(store).__name__} keeps no event logs"
    return store


class ContractBase:
    """What a subclass overrides (:meth:`make_store`, :meth:`process_factory`) and the
    ``store`` fixture, shared by every part of the suite."""

    def make_store(self) -> RunStore:
        """A fresh, empty store."""
        raise NotImplementedError("override make_store() in your subclass")

    def process_factory(self) -> Callable[[], RunStore] | None:
        """A picklable, top-level callable that builds a store on the same data as the
        last :meth:`make_store`, in another process; ``None`` (the default): the store
        lives in one process and the cross-process tests are skipped."""
        return None

    def process_context(self) -> SpawnContext | ForkServerContext:
        """The ``multiprocessing`` context the cross-process tests start their children
        with: ``spawn`` by default (a fresh interpreter, right for any store). A suite may
        return a ``forkserver`` context that preloads its imports, so that each child
        starts without importing them again."""
        return multiprocessing.get_context("spawn")

    @pytest.fixture
    def store(self) -> RunStore:
        return self.make_store()

    def _paused(self, store: RunStore) -> tuple[RunState, int]:
        state = make_state(messages=_asking())
        version = store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        paused = replace(state, status="paused", next_step="tools", cycle=1)
        return paused, store.commit(paused, owner=OWNER, version=version)


def racing_claims(store: RunStore, run_id: str, version: int, racers: int = 8) -> list[str]:
    """``racers`` threads claim ``run_id`` at ``version`` at once (behind a barrier); the
    owners whose claim won (one, by the rules)."""
    barrier = threading.Barrier(racers)
    wins: list[str] = []

    def claim(owner: str) -> None:
        barrier.wait(10)
        try:
            store.claim(run_id, owner=owner, lease_s=30, version=version)
            wins.append(owner)
        except RunConflictError:
            pass

    threads = [threading.Thread(target=claim, args=(f"o{n}",)) for n in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return wins
