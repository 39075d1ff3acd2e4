"""The contract of conversations: one run at a time per conversation (begins racing from
threads and processes have one winner), a log that racing writers extend without losing
or duplicating a turn, and a log replaced by the user (``agent.messages = [...]``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from ...errors import ConcurrentInvocationError, PendingApprovalError, RunConflictError
from ...messages import Message, validate_history
from ...stores._protocol import RunStore
from ._base import OWNER, ContractBase, _answered, _asking, make_state

__all__ = ["TURNS", "ConversationsContract", "take_turns"]


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


class ConversationsContract(ContractBase):
    """Conversations: one live run each, racing writers, a log replaced by the user."""

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
        context = self.process_context()
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
        context = self.process_context()
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

    def test_replace_log_fails_a_run_whose_lease_ran_out_first(self, store: RunStore) -> None:
        state = make_state(messages=_asking(), next_step="tools")
        store.begin("c1", state, owner=OWNER, lease_s=0, expected_length=0)  # ran out
        new: list[Message] = [{"role": "user", "content": [{"text": "edited"}]}]
        assert store.replace_log("c1", new) == 1
        assert list(store.load("c1").messages) == new
        snap = store.get(state.run_id)
        assert snap is not None and snap.status == "failed"


def _assert_every_turn_once(store: RunStore, writers: list[str]) -> None:
    log = list(store.load("shared").messages)
    assert validate_history(log) == []
    markers = [message["content"][0]["text"] for message in log]
    expected = sorted(f"{writer}/{turn}" for writer in writers for turn in range(TURNS))
    assert sorted(markers[0::2]) == expected  # every turn once: none lost, none twice
    assert markers[0::2] == markers[1::2]  # each answer follows its own prompt
