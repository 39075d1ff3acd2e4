"""``agent_sync.celery`` and the routes' ``start=`` without a worker: what is refused, and
what a task run in this process (``run_task.apply``, as Celery's eager mode runs it) writes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent
from agent_sync.errors import PendingApprovalError, UsageError
from agent_sync.messages import validate_history
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from tests.celery import agents

celery_module = pytest.importorskip("agent_sync.celery", reason="pip install -e '.[celery]'")
celery_config = pytest.importorskip("agent_sync.celery._config")
flask = pytest.importorskip("flask", reason="pip install -e '.[flask]'")


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryRunStore]:
    """A store ``run_task`` is configured with, in this process (undone after the test)."""
    monkeypatch.setattr(celery_config, "_config", None)
    store = MemoryRunStore()
    celery_module.configure(functools.partial(agents.make_agent, store))
    yield store


def _log(store: MemoryRunStore, run_id: str) -> list[dict[str, Any]]:
    return [event.data for event in store.read_events(run_id)]


def test_configure_refuses_what_cannot_run_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(celery_config, "_config", None)
    with pytest.raises(UsageError, match="callable"):
        celery_module.configure("make_agent")
    with pytest.raises(UsageError, match="event logs"):
        celery_module.configure(lambda cid: Agent(ScriptedModel([])), store=object())
    assert celery_config._config is None
    with pytest.raises(UsageError, match="configure"):
        celery_module.run_task.apply(args=("c1", "hello")).get()
    # make_agent is not called at configure: its agents are checked at each task
    celery_module.configure(lambda cid: Agent(ScriptedModel([])))
    with pytest.raises(UsageError, match="on the configured store"):
        celery_module.run_task.apply(args=("c1", "hello")).get()
    elsewhere = functools.partial(agents.make_agent, MemoryRunStore())
    celery_module.configure(elsewhere, store=MemoryRunStore())
    with pytest.raises(UsageError, match="on the configured store"):
        celery_module.run_task.apply(args=("c1", "hello")).get()


def test_configure_never_builds_an_agent_the_first_task_tells_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(celery_config, "_config", None)
    store = MemoryRunStore()
    built: list[str] = []

    def make_agent(conversation_id: str) -> Agent:  # an app looks its conversation up
        built.append(conversation_id)
        if conversation_id != "c1":
            raise LookupError(f"no such conversation: {conversation_id}")
        return agents.make_agent(store, conversation_id)

    celery_module.configure(make_agent)
    assert built == []
    summary = celery_module.run_task.apply(args=("c1", "hello"), task_id="run-1").get()
    assert summary == {"run_id": "run-1", "status": "done", "stop_reason": "end_turn"}
    assert built == ["c1"] and celery_config.configured().store is store


def test_a_task_run_here_publishes_the_run_like_the_routes(store: MemoryRunStore) -> None:
    summary = celery_module.run_task.apply(args=("c1", "hello"), task_id="run-1").get()
    assert summary == {"run_id": "run-1", "status": "done", "stop_reason": "end_turn"}
    log = _log(store, "run-1")
    assert log[0] == {"type": "run", "run_id": "run-1", "conversation_id": "c1"}
    assert log[-1]["type"] == "done" and log[-1]["text"].startswith("finished in ")
    assert validate_history(list(store.load("c1").messages)) == []


def test_a_task_delivered_twice_runs_once(store: MemoryRunStore) -> None:
    first = celery_module.run_task.apply(args=("c1", "hello"), task_id="run-1").get()
    again = celery_module.run_task.apply(args=("c1", "hello"), task_id="run-1").get()
    assert again == first and len(store.load("c1").messages) == 2


def test_a_refused_run_ends_the_log_the_web_opened(store: MemoryRunStore) -> None:
    paused = celery_module.run_task.apply(args=("c1", "ask")).get()
    assert paused["status"] == "paused"
    store.append_events(
        "run-2", [{"type": "run", "run_id": "run-2", "conversation_id": "c1"}], after=0
    )
    refused = celery_module.run_task.apply(args=("c1", "hello"), task_id="run-2")
    assert isinstance(refused.result, PendingApprovalError)
    assert _log(store, "run-2")[-1] == {
        "type": "error",
        "error": "Paused",
        "message": "this conversation waits for a decision",
        "retryable": False,
    }
    bad = celery_module.run_task.apply(args=("c2", "  "), task_id="run-3")
    assert isinstance(bad.result, UsageError) and _log(store, "run-3")[-1]["error"] == "BadRequest"
    assert store.get("run-3") is None and not store.load("c2").messages
    with pytest.raises(UsageError, match="task id"):
        celery_module.run_task.apply(args=("c2", "hello"), task_id="run:4").get()


def _client(store: MemoryRunStore, start: Any) -> Any:
    from agent_sync.web.flask import chat_blueprint

    app = flask.Flask(__name__)
    make_agent = functools.partial(agents.make_agent, store)
    app.register_blueprint(chat_blueprint(make_agent, store=store, start=start), url_prefix="/api")
    return app.test_client()


def test_start_refusals_answer_before_anything_is_sent() -> None:
    store = MemoryRunStore()
    started: list[tuple[str, Any, str]] = []
    client = _client(store, lambda *args: started.append(args))
    bad = client.post("/api/chat", json={"conversation_id": "c1", "message": [{"text": " "}]})
    assert bad.status_code == 400
    agents.make_agent(store, "c1").invoke("ask")  # paused for approval
    paused = client.post("/api/chat", json={"conversation_id": "c1", "message": "hi"})
    assert (paused.status_code, paused.json["error"]) == (409, "paused")
    assert paused.json["run_id"] == store.load("c1").run.state.run_id
    assert started == []


def test_a_start_that_fails_answers_503_and_closes_the_log() -> None:
    store = MemoryRunStore()
    run_ids: list[str] = []

    def broker_down(conversation_id: str, message: Any, run_id: str) -> None:
        run_ids.append(run_id)
        raise ConnectionError("the broker is down")

    client = _client(store, broker_down)
    answer = client.post("/api/chat", json={"conversation_id": "c1", "message": "hello"})
    assert (answer.status_code, answer.json["error"]) == (503, "not_started")
    assert [record["type"] for record in _log(store, run_ids[0])] == ["run", "error"]
    assert not store.load("c1").messages
    with pytest.raises(UsageError, match="start"):
        _client(store, "celery")


def test_a_make_agent_that_fails_ends_the_log_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(celery_config, "_config", None)
    store = MemoryRunStore()

    def make_agent(conversation_id: str) -> Agent:
        if conversation_id == "c1":
            raise LookupError("no such tenant: secret-tenant-name")
        return agents.make_agent(store, conversation_id)

    celery_module.configure(make_agent, store=store)
    store.append_events(
        "run-1", [{"type": "run", "run_id": "run-1", "conversation_id": "c1"}], after=0
    )
    failed = celery_module.run_task.apply(args=("c1", "hello"), task_id="run-1")
    assert isinstance(failed.result, LookupError)
    end = _log(store, "run-1")[-1]
    assert (end["type"], end["error"]) == ("error", "InternalError")
    assert "secret" not in str(end)  # the exception's text goes to the worker's log only
