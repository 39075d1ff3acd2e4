"""``ConversationRegistry``: one agent per conversation, thread-safe, bounded."""

from __future__ import annotations

import threading

import pytest

from agent_sync import Agent
from agent_sync.errors import UsageError
from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from agent_sync.web import ConversationRegistry, RegistryFullError, sse_events
from tests.fixtures.bounds import HANG_BOUND

STALL = {"text": "abc", "chunk_size": 1, "stall_after": 1}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_agent(conversation_id: str) -> Agent:
    return Agent(ScriptedModel([STALL, "second answer"]))


def test_get_creates_once_per_conversation() -> None:
    registry = ConversationRegistry(make_agent)
    a = registry.get("a")
    assert registry.get("a") is a
    assert registry.get("b") is not a
    assert len(registry) == 2 and "a" in registry and "zzz" not in registry
    assert registry.peek("zzz") is None


def test_concurrent_first_requests_share_one_agent() -> None:
    registry = ConversationRegistry(make_agent)
    barrier = threading.Barrier(8)
    got: list[Agent] = []
    lock = threading.Lock()

    def request() -> None:
        barrier.wait(HANG_BOUND)
        agent = registry.get("same")
        with lock:
            got.append(agent)

    threads = [threading.Thread(target=request, name=f"test-req-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_BOUND)
    assert len(got) == 8
    assert all(agent is got[0] for agent in got)
    assert len(registry) == 1


def test_cancel_from_another_request_stops_the_running_conversation() -> None:
    registry = ConversationRegistry(make_agent)
    agent = registry.get("a")
    stream = sse_events(agent, "hi")
    # the scripted turn is taken once the first text arrives: a cancel before that would
    # leave it for the next call, which would then stall
    assert any(chunk.startswith(b"event: text") for chunk in stream)
    assert registry.cancel("a", "stopped by user") is True
    done = [chunk for chunk in stream if chunk.startswith(b"event: done")]
    stream.close()
    assert b'"cancel_reason":"stopped by user"' in done[0]
    assert validate_history(agent.messages) == []
    # Idle or unknown: a no-op that does not leak into the next run.
    assert registry.cancel("a") is False
    assert registry.cancel("unknown") is False
    assert agent.invoke("again").text == "second answer"


def test_lru_idle_conversation_is_evicted_and_reported() -> None:
    evicted: list[tuple[str, Agent]] = []
    registry = ConversationRegistry(
        make_agent, max_conversations=2, on_evict=lambda cid, a: evicted.append((cid, a))
    )
    a = registry.get("a")
    b = registry.get("b")
    registry.get("a")  # a is now the most recently used
    registry.get("c")
    assert evicted == [("b", b)]
    assert "a" in registry and "c" in registry and len(registry) == 2
    assert registry.get("a") is a


def test_running_conversations_are_never_evicted() -> None:
    registry = ConversationRegistry(make_agent, max_conversations=1)
    running = registry.get("a")
    stream = sse_events(running, "hi")
    try:
        with pytest.raises(RegistryFullError):
            registry.get("b")
        assert registry.peek("a") is running and running.is_running
    finally:
        stream.close()
    assert registry.get("b") is not running
    assert "a" not in registry


def test_idle_conversations_expire_after_ttl() -> None:
    clock = FakeClock()
    registry = ConversationRegistry(make_agent, idle_ttl=60, clock=clock)
    registry.get("old")
    clock.now += 30
    registry.get("recent")
    clock.now += 40  # old: idle 70 s, recent: 40 s
    registry.get("new")
    assert "old" not in registry
    assert "recent" in registry and "new" in registry


def test_discard_cancels_a_running_conversation() -> None:
    evicted: list[str] = []
    registry = ConversationRegistry(make_agent, on_evict=lambda cid, a: evicted.append(cid))
    agent = registry.get("a")
    stream = sse_events(agent, "hi")
    assert registry.discard("a") is True
    assert b"conversation discarded" in b"".join(stream)
    stream.close()
    assert evicted == ["a"] and "a" not in registry
    assert registry.discard("a") is False


def test_cancel_all_signals_every_running_conversation() -> None:
    registry = ConversationRegistry(make_agent)
    streams = [sse_events(registry.get(cid), "hi") for cid in ("a", "b")]
    registry.get("idle")
    assert registry.cancel_all() == 2
    for stream in streams:
        assert b'"stop_reason":"cancelled"' in b"".join(stream)
        stream.close()


@pytest.mark.parametrize("bad", ["", None, 42])
def test_conversation_id_must_be_a_non_empty_string(bad: object) -> None:
    registry = ConversationRegistry(make_agent)
    with pytest.raises(UsageError):
        registry.get(bad)  # type: ignore[arg-type]


def test_limits_are_validated() -> None:
    with pytest.raises(UsageError):
        ConversationRegistry(make_agent, max_conversations=0)
    with pytest.raises(UsageError):
        ConversationRegistry(make_agent, idle_ttl=0)
