"""An agent built per request (what the web routes do) reads only the tail of a long
conversation: a new agent starts from the log this process last synced for the same store
and conversation. What it starts from is never stale: changes made by other workers (new
turns, a replaced history) and a run's own in-place edit of its last message are seen. On
the three stores (a real redis-server, a real SQLite file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent_sync import Agent
from agent_sync.errors import ModelThrottledError
from agent_sync.messages import Message
from agent_sync.run import _log_cache
from agent_sync.stores import RunStore
from agent_sync.testing import ScriptedModel


class CountingStore:
    """Forwards to a store and records how many messages each ``load`` returned."""

    def __init__(self, inner: RunStore) -> None:
        self._inner = inner
        self.read: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load(self, conversation_id: str, *, since: int = 0) -> Any:
        record = self._inner.load(conversation_id, since=since)
        self.read.append(len(record.messages))
        return record


def _history(store: RunStore, conversation_id: str) -> list[Message]:
    record = store.load(conversation_id)
    return list(record.messages)


def test_a_new_agent_per_request_reads_only_the_tail(
    make_store: Callable[[], RunStore],
) -> None:
    store = CountingStore(make_store())
    first = Agent(ScriptedModel(["a"] * 30), store=store, conversation_id="long")  # type: ignore[arg-type]
    for n in range(30):
        first.invoke(f"question {n}")
    assert len(first.messages) == 60
    store.read.clear()
    agent = Agent(ScriptedModel(["last"]), store=store, conversation_id="long")  # type: ignore[arg-type]
    assert agent.messages == _history(store._inner, "long")
    agent.invoke("one more")
    assert max(store.read) <= 3, store.read  # the last synced message and what followed
    assert agent.messages == _history(store._inner, "long")
    assert len(agent.messages) == 62


def test_turns_another_worker_added_are_seen(make_store: Callable[[], RunStore]) -> None:
    here = make_store()
    Agent(ScriptedModel(["a", "b"]), store=here, conversation_id="c").invoke("1")
    elsewhere = make_store()  # another worker's store object on the same data
    other = Agent(ScriptedModel(["from elsewhere"]), store=elsewhere, conversation_id="c")
    other.invoke("2")
    agent = Agent(ScriptedModel([]), store=here, conversation_id="c")
    assert agent.messages == _history(here, "c")
    assert agent.messages[-1]["content"] == [{"text": "from elsewhere"}]


def test_a_history_replaced_by_another_worker_is_read_again(
    make_store: Callable[[], RunStore],
) -> None:
    here = make_store()
    kept = Agent(ScriptedModel(["a"] * 5), store=here, conversation_id="c")
    for n in range(5):
        kept.invoke(f"q{n}")
    replaced: list[Message] = [
        {"role": "user", "content": [{"text": "edited"}]},
        {"role": "assistant", "content": [{"text": "edited answer"}]},
        {"role": "user", "content": [{"text": "and more"}]},
        {"role": "assistant", "content": [{"text": "more"}]},
        {"role": "user", "content": [{"text": "last"}]},
        {"role": "assistant", "content": [{"text": "done"}]},
    ]
    Agent(ScriptedModel([]), store=make_store(), conversation_id="c").messages = replaced
    agent = Agent(ScriptedModel([]), store=here, conversation_id="c")
    assert agent.messages == replaced


def test_a_runs_edit_of_its_last_message_never_reaches_another_agent(
    make_store: Callable[[], RunStore],
) -> None:
    store = make_store()
    failing = ScriptedModel([{"error": ModelThrottledError("busy", retryable=False)}, "answer"])
    agent = Agent(failing, store=store, conversation_id="c")
    Agent(ScriptedModel(["a"]), store=store, conversation_id="c").invoke("first")
    with pytest.raises(ModelThrottledError):
        agent.invoke("second")  # the history ends with the prompt (stored)
    agent.invoke("third")  # extends that user message in place, then answers
    fresh = Agent(ScriptedModel([]), store=store, conversation_id="c")
    assert fresh.messages == _history(store, "c") == agent.messages
    assert fresh.messages[-2]["content"] == [{"text": "second"}, {"text": "third"}]


def test_the_cache_is_bounded() -> None:
    store = object.__new__(CountingStore)
    messages: list[Message] = [{"role": "user", "content": [{"text": "x"}]}] * 10
    for n in range(_log_cache.MAX_MESSAGES // 10 + 5):
        _log_cache.remember(store, f"c{n}", messages, 10, 0)
    assert _log_cache.recall(store, "c0") == ([], 0, 0)  # the least recently used went
    assert _log_cache.recall(store, f"c{_log_cache.MAX_MESSAGES // 10 + 4}")[1] == 10
    _log_cache.forget_all()


def test_a_log_wiped_behind_the_stores_back_is_read_again(redis_server: Any) -> None:
    import redis

    from agent_sync.stores import RedisRunStore

    client = redis.Redis(port=redis_server.port)
    store = RedisRunStore(client, prefix="wiped:")
    kept = Agent(ScriptedModel(["a"] * 3), store=store, conversation_id="c")
    for n in range(3):
        kept.invoke(f"q{n}")
    for key in client.scan_iter("wiped:*"):  # an operator flushed the data
        client.delete(key)
    Agent(
        ScriptedModel(["new"]), store=RedisRunStore(client, prefix="wiped:"), conversation_id="c"
    ).invoke("fresh")
    agent = Agent(ScriptedModel([]), store=store, conversation_id="c")
    assert agent.messages == _history(store, "c")
    assert [m["content"] for m in agent.messages] == [[{"text": "fresh"}], [{"text": "new"}]]
