"""Ids and answers under hostile requests, under Flask and Django (real werkzeug servers).

- An id that could name another store key (``:``, whitespace, globs): 400 for a
  conversation id, 404 for a run id, before the store (or ``make_agent``) is asked; on
  Redis ``<run_id>:signals`` named a list (503 WRONGTYPE).
- A decision's 422 lists every problem, the unknown approval id first.
- A history stored with a lone surrogate is answered (U+FFFD), on every store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync.messages import Message
from agent_sync.stores import MemoryRunStore, RunStore
from tests.run._gates import Gate

from ._chat_sites import FRAMEWORKS, raw_request, serve_routes
from ._client import frames_until
from ._hostile_site import Site, make_agent_for, site_on


@pytest.fixture(params=FRAMEWORKS)
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    with site_on(request.param) as served:
        yield served


# Every POST route, with a body it would act on if it were accepted.


BAD_CONVERSATION_IDS = ["   ", " c1", "c1\t", "c1:log", "c1:current", "*", "c[1]", "{c1}", "a/b"]


def _conversation_requests(cid: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    from urllib.parse import quote

    quoted = quote(cid, safe="")
    user = [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]
    return [
        ("POST", "/chat", {"conversation_id": cid, "message": "hi"}),
        ("POST", "/chat", {"id": cid, "messages": user}),
        ("POST", "/cancel", {"conversation_id": cid}),
        ("GET", f"/history?conversation_id={quoted}", None),
        ("GET", f"/chat/{quoted}/stream", None),
        ("POST", f"/chat/{quoted}/stop", {}),
    ]


@pytest.mark.parametrize("cid", BAD_CONVERSATION_IDS)
def test_a_conversation_id_that_could_name_another_key_gets_400(site: Site, cid: str) -> None:
    before = site.moved()
    for method, path, body in _conversation_requests(cid):
        status, answer = site.request(
            method, path, body, None if body is None else "application/json"
        )
        if "/" in cid and path.startswith("/chat/"):
            assert status == 404, (path, answer)  # no route has a slash in its id
            continue
        assert status == 400 and answer["error"] == "bad_request", (method, path, answer)
    assert site.moved() == before
    site.finish()


def _run_requests() -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("GET", "/runs/ID/events", None),
        ("POST", "/runs/ID/stop", {}),
        ("POST", "/runs/ID/decisions", {"decisions": {"APR": True}}),
        ("POST", "/runs/ID/inject", {"content": "x"}),
    ]


class _RecordingStore(MemoryRunStore):
    """A real memory store that remembers every run id it was asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def get(self, run_id: str) -> Any:
        self.asked.append(run_id)
        return super().get(run_id)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> Any:
        self.asked.append(run_id)
        return super().read_events(run_id, after=after, timeout=timeout)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_crafted_run_id_gets_404_without_asking_the_store(framework: str) -> None:
    store = _RecordingStore()
    with site_on(framework, store) as site:
        before = site.moved()
        crafted = [f"{site.running}:signals", f"{site.paused}:signals", "RUN*", "RUN x", "%2A"]
        for run_id in crafted:
            store.asked.clear()
            for method, path, body in _run_requests():
                quoted = path.replace(
                    "ID", site.fill(run_id).replace(" ", "%20").replace(":", "%3A")
                )
                status, answer = site.request(
                    method, quoted, body, None if body is None else "application/json"
                )
                assert status == 404 and answer["error"] == "not_found", (run_id, path, answer)
            assert [asked for asked in store.asked if not asked.startswith("run_")] == []
            assert [a for a in store.asked if a not in (site.running, site.paused)] == []
        assert site.moved() == before
        site.finish()


def test_a_signals_key_is_not_a_run_on_redis(redis_server: Any) -> None:
    """``<run_id>:signals`` named a Redis list: a queued inject made it a 503 (WRONGTYPE)."""
    import uuid

    import redis

    from agent_sync.stores import RedisRunStore

    client = redis.Redis(port=redis_server.port)
    store = RedisRunStore(client, prefix=f"w1{uuid.uuid4().hex[:8]}:")
    with site_on("flask", store) as site:
        queued = site.request("POST", "/runs/RUN/inject", {"content": "later"})
        assert queued[0] == 202
        crafted = f"{site.running}%3Asignals"
        for method, path, body in _run_requests():
            status, answer = site.request(
                method,
                path.replace("ID", crafted),
                body,
                None if body is None else "application/json",
            )
            assert status == 404, (path, answer)
        site.gate.opened.set()
        frames_until(site.streams[0], "done")


def test_a_decisions_422_lists_every_problem_the_unknown_id_first(site: Site) -> None:
    before = site.moved()
    status, answer = site.request(
        "POST", "/runs/PAUSED/decisions", {"decisions": {"apr_unknown": True}}
    )
    assert status == 422 and answer["error"] == "invalid_decision", answer
    assert answer["problems"] == [
        "unknown request id 'apr_unknown'",
        f"request {site.approval} (delete_file) has no decision",
    ]
    assert "unknown request id 'apr_unknown'" in answer["message"]
    assert site.moved() == before
    site.finish()


def _store_of(kind: str, tmp_path: Any, redis_server: Any) -> RunStore:
    import uuid

    from agent_sync.stores import SQLiteRunStore

    if kind == "memory":
        return MemoryRunStore()
    if kind == "sqlite":
        return SQLiteRunStore(str(tmp_path / "runs.db"))
    import redis

    from agent_sync.stores import RedisRunStore

    return RedisRunStore(redis.Redis(port=redis_server.port), prefix=f"w1{uuid.uuid4().hex[:8]}:")


@pytest.fixture
def any_redis(request: pytest.FixtureRequest) -> Any:
    """The session's redis-server, only for the Redis cases (the others run without it)."""
    if "redis" not in request.node.name:
        return None
    return request.getfixturevalue("redis_server")


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_history_with_a_stored_lone_surrogate_is_answered(
    framework: str, kind: str, tmp_path: Any, any_redis: Any
) -> None:
    """A history stored before its input was made encodable (a lone surrogate from
    ``os.fsdecode(b"\\xff")``) is answered with U+FFFD, not a 500 forever."""
    from agent_sync.testing.run_store_contract import make_state

    store = _store_of(kind, tmp_path, any_redis)
    messages: tuple[Message, ...] = (
        {"role": "user", "content": [{"text": "read report-\udcff.txt"}]},
        {"role": "assistant", "content": [{"text": "ok \ud800"}]},
    )
    state = make_state(messages=messages)
    version = store.begin("c1", state, owner="w1", lease_s=30, expected_length=0)
    done = make_state(
        run_id=state.run_id,
        status="done",
        next_step=None,
        messages=messages,
        stop_reason="end_turn",
    )
    store.commit(done, owner="w1", version=version)

    gate = Gate()
    with serve_routes(framework, make_agent_for(store, gate), store=store) as port:
        status, answer = raw_request(port, "GET", "/api/history?conversation_id=c1")
    assert status == 200, answer
    texts = [m["content"][0]["text"] for m in answer["messages"]]
    assert texts == ["read report-\ufffd.txt", "ok \ufffd"]
