"""``agent.messages = [...]`` on an agent with a store writes a new history for the
conversation (DESIGN section 6): every worker, in this process or another, then reads and
sends that history; refused (``UsageError``) while a run of the conversation is live or
paused, wherever it is. On the three stores (a real redis-server, a real SQLite file, real
processes)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, tool
from agent_sync.errors import ConcurrentInvocationError, PendingApprovalError, UsageError
from agent_sync.messages import Message
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke
from tests.run._gates import Gate, gate_call

NEW: list[Message] = [
    {"role": "user", "content": [{"text": "edited question"}]},
    {"role": "assistant", "content": [{"text": "edited answer"}]},
]


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def texts(message: Message) -> list[str]:
    return [block["text"] for block in message["content"] if "text" in block]


def _agent(store: RunStore, *turns: Any, **kw: Any) -> Agent:
    return Agent(ScriptedModel(list(turns)), store=store, conversation_id="c1", **kw)


def _sent(agent: Agent) -> list[list[str]]:
    """The history the agent's model was sent on its last call, as texts."""
    model = agent.model
    assert isinstance(model, ScriptedModel)
    return [texts(m) for m in model.calls[-1].messages]


def test_a_new_history_is_written_to_the_store_and_sent_next(
    make_store: Callable[[], RunStore],
) -> None:
    store = make_store()
    agent = _agent(store, "first answer", "after the edit")
    agent.invoke("first question")
    agent.messages = NEW
    assert list(store.load("c1").messages) == NEW  # written through, not only in memory
    agent.invoke("go on")
    assert _sent(agent) == [["edited question"], ["edited answer"], ["go on"]]
    other = _agent(make_store())  # another worker reads the new history
    assert [texts(m) for m in other.messages] == [
        ["edited question"],
        ["edited answer"],
        ["go on"],
        ["after the edit"],
    ]


def test_a_worker_holding_the_old_log_reads_the_new_one_whole(
    make_store: Callable[[], RunStore],
) -> None:
    """The old log was longer: a worker that synced it must not keep its prefix."""
    holder = _agent(make_store(), "a1", "a2", "after")
    holder.invoke("q1")
    holder.invoke("q2")  # holds 4 messages, synced
    editor = _agent(make_store())
    same_length: list[Message] = [
        {"role": "user", "content": [{"text": "x1"}]},
        {"role": "assistant", "content": [{"text": "x2"}]},
        {"role": "user", "content": [{"text": "x3"}]},
        {"role": "assistant", "content": [{"text": "x4"}]},
    ]
    editor.messages = same_length  # as long as the old log: only the generation tells
    holder.invoke("q3")
    assert _sent(holder) == [["x1"], ["x2"], ["x3"], ["x4"], ["q3"]]


def test_a_new_history_is_refused_while_the_conversation_runs_elsewhere(
    make_store: Callable[[], RunStore],
) -> None:
    gate = Gate()
    busy = _agent(make_store(), {"tool_calls": [gate_call()]}, "done", tools=[gate.tool])
    call = BackgroundInvoke(busy)
    assert gate.entered.wait(10)
    store = make_store()
    other = _agent(store)
    before = list(store.load("c1").messages)
    with pytest.raises(ConcurrentInvocationError) as caught:
        other.messages = NEW
    assert isinstance(caught.value, UsageError)
    gate.opened.set()
    assert call.result().text == "done"
    after = store.load("c1")
    assert before == [] and after.generation == 0  # never replaced
    assert [texts(m)[0] for m in (after.messages[0], after.messages[-1])] == ["go", "done"]


def test_a_new_history_is_refused_while_a_run_waits_for_approval(
    make_store: Callable[[], RunStore],
) -> None:
    asking = {"tool_calls": [{"name": "delete_file", "input": {"path": "a"}}]}
    paused = _agent(make_store(), asking, tools=[delete_file])
    assert paused.invoke("clean up").stop_reason == "paused"
    store = make_store()
    other = _agent(store, tools=[delete_file])
    with pytest.raises(PendingApprovalError):
        other.messages = NEW
    assert other.is_paused
    record = store.load("c1")
    assert record.run is not None and record.run.state.status == "paused"
    assert list(record.messages) == []  # the log holds nothing but what ran before


def test_an_invalid_history_changes_nothing_in_the_store(
    make_store: Callable[[], RunStore],
) -> None:
    store = make_store()
    agent = _agent(store, "answer")
    agent.invoke("question")
    before = list(store.load("c1").messages)
    with pytest.raises(UsageError, match="invalid history"):
        agent.messages = [{"role": "assistant", "content": [{"text": "no user first"}]}]
    assert list(store.load("c1").messages) == before == agent.messages


_CHILD = """
import sys
from agent_sync import Agent
from agent_sync.stores import SQLiteRunStore
from agent_sync.testing import ScriptedModel
agent = Agent(ScriptedModel([]), store=SQLiteRunStore(sys.argv[1]), conversation_id="c1")
agent.messages = [
    {"role": "user", "content": [{"text": "from the child"}]},
    {"role": "assistant", "content": [{"text": "child answer"}]},
]
"""


def test_a_history_replaced_by_another_process_is_what_this_one_sends(tmp_path: Path) -> None:
    path = str(tmp_path / "agent_sync.db")
    agent = _agent(SQLiteRunStore(path), "a1", "a2", "after")
    agent.invoke("q1")
    agent.invoke("q2")
    subprocess.run([sys.executable, "-c", _CHILD, path], check=True, timeout=50)
    agent.invoke("q3")
    assert _sent(agent) == [["from the child"], ["child answer"], ["q3"]]
