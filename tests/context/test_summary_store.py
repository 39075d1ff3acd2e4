"""Summaries are kept through the store protocol's values only (``get_value``/``set_value``):
any store with values shares them between its objects and processes; a store written
before values existed keeps them in the process (logged, nothing lost); a SQLite file of
the previous version keeps the summaries it had."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, validate_history
from agent_sync.context import SUMMARY_HEADING, Summarizing
from agent_sync.messages import Message
from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore
from agent_sync.stores._value_rules import SUMMARY_KEY
from agent_sync.testing import ScriptedModel
from tests.stores.test_sqlite_values import previous_version_file

pytestmark = pytest.mark.timeout(60)


def _long_history(pairs: int) -> list[Message]:
    history: list[Message] = []
    for i in range(pairs):
        history += [
            {"role": "user", "content": [{"text": f"question {i} " + "q" * 400}]},
            {"role": "assistant", "content": [{"text": f"answer {i} " + "a" * 400}]},
        ]
    return history


def _policy(summarizer: ScriptedModel) -> Summarizing:
    return Summarizing(summarizer, keep_last=4, trigger_tokens=1000)


class _Delegating:
    """Another party's store: every attribute of a shared MemoryRunStore, but ``hidden``
    ones, through an object of its own (so nothing keyed by the store object is shared
    between two of them); records the value calls it forwards."""

    def __init__(self, inner: MemoryRunStore, *, hidden: tuple[str, ...] = ()) -> None:
        self._inner = inner
        self._hidden = hidden
        self.value_calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name in self._hidden:
            raise AttributeError(name)
        if name in ("get_value", "set_value"):
            self.value_calls.append(name)
        return getattr(self._inner, name)


def _two_workers(make_store: Callable[[], Any]) -> tuple[ScriptedModel, ScriptedModel]:
    """Worker A summarizes the conversation; worker B, on ``make_store()`` again, answers
    next. Returns B's summarizer and main model."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    Agent(
        ScriptedModel([]), store=make_store(), conversation_id=conversation
    ).messages = _long_history(20)
    Agent(
        ScriptedModel(["short answer"]),
        store=make_store(),
        conversation_id=conversation,
        context=_policy(ScriptedModel(["SUMMARY-A"], repeat=True)),
    ).invoke("question 20")
    summarizer_b = ScriptedModel(["SUMMARY-B"], repeat=True)
    main_b = ScriptedModel(["another answer"])
    worker_b = Agent(
        main_b, store=make_store(), conversation_id=conversation, context=_policy(summarizer_b)
    )
    worker_b.invoke("question 21")
    assert len(worker_b.messages) == 44 and validate_history(worker_b.messages) == []
    return summarizer_b, main_b


def test_any_store_with_values_shares_summaries_between_its_objects() -> None:
    shared = MemoryRunStore()
    made: list[_Delegating] = []

    def make_store() -> _Delegating:
        made.append(_Delegating(shared))
        return made[-1]

    summarizer_b, main_b = _two_workers(make_store)
    assert summarizer_b.calls == []  # B read A's summary through the protocol
    assert main_b.calls[0].messages[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nSUMMARY-A"
    assert "set_value" in made[1].value_calls and "get_value" in made[2].value_calls


def test_a_store_without_values_keeps_summaries_in_this_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    one = _Delegating(MemoryRunStore(), hidden=("get_value", "set_value"))
    with caplog.at_level(logging.WARNING, logger="agent_sync.context._memo"):
        summarizer_b, main_b = _two_workers(lambda: one)
    assert summarizer_b.calls == []  # kept beside the store object, in this process
    assert main_b.calls[0].messages[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nSUMMARY-A"
    warned = [r.getMessage() for r in caplog.records if "in this process only" in r.getMessage()]
    assert len(warned) <= 1  # once per store type (and per interpreter)


def test_a_summary_of_the_previous_versions_sqlite_file_is_reused(tmp_path: Path) -> None:
    # the summary and the log, as a worker left them
    first = SQLiteRunStore(tmp_path / "first.db")
    first.replace_log("c1", _long_history(20))
    Agent(
        ScriptedModel(["short answer"]),
        store=first,
        conversation_id="c1",
        context=_policy(ScriptedModel(["KEPT SUMMARY"], repeat=True)),
    ).invoke("question 20")
    kept = first.get_value("c1", SUMMARY_KEY)
    assert kept is not None and "KEPT SUMMARY" in kept
    log = list(first.load("c1").messages)

    # the same, in a file of the previous version (its summaries table), opened today
    path = tmp_path / "old.db"
    previous_version_file(path, {"c1": (0, kept)})
    store: RunStore = SQLiteRunStore(path)
    store.replace_log("c1", log)
    unused = ScriptedModel([])
    main = ScriptedModel(["answer 21"])
    Agent(main, store=store, conversation_id="c1", context=_policy(unused)).invoke("question 21")
    assert unused.calls == []
    assert main.calls[0].messages[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nKEPT SUMMARY"
