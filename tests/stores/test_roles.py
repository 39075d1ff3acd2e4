"""A store has two roles: the run's (:class:`RunStore`, what an agent needs) and the event
log's (:class:`RunEventLog`, what the web layer needs). Every store of the package is both;
the agent takes a store with only the first, the web routes refuse it at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_sync import Agent
from agent_sync.errors import UsageError
from agent_sync.stores import MemoryRunStore, RunEventLog, RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web._routes import ChatRoutes


class _RunsOnly(MemoryRunStore):
    """A store that keeps runs and no event logs (``None`` members: not implemented)."""

    append_events = None  # type: ignore[assignment]
    read_events = None  # type: ignore[assignment]


def test_every_store_of_the_package_has_both_roles(tmp_path: Path) -> None:
    for store in (MemoryRunStore(), SQLiteRunStore(tmp_path / "runs.db")):
        assert isinstance(store, RunStore) and isinstance(store, RunEventLog)


def test_an_agent_needs_only_the_runs_role() -> None:
    store = _RunsOnly()
    assert isinstance(store, RunStore) and not isinstance(store, RunEventLog)
    agent = Agent(ScriptedModel(["stored"]), store=store, conversation_id="c1")
    assert agent.invoke("hi").text == "stored"
    assert [m["role"] for m in store.load("c1").messages] == ["user", "assistant"]


def test_the_web_routes_refuse_a_store_without_an_event_log() -> None:
    store = _RunsOnly()
    built: list[str] = []

    def make_agent(conversation_id: str) -> Agent:
        built.append(conversation_id)
        return Agent(ScriptedModel([]), store=store, conversation_id=conversation_id)

    with pytest.raises(UsageError, match="event logs"):
        ChatRoutes(make_agent, store=store)
    with pytest.raises(UsageError, match="must be a RunStore"):
        ChatRoutes(make_agent, store=object())  # type: ignore[arg-type]
    assert built == []
