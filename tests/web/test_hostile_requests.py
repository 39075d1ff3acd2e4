"""Hostile requests against the chat routes, under Flask and Django (real werkzeug servers):
each rule of the edge (DESIGN.md section 7) over every route it covers.

- Every ``POST`` must be declared ``application/json``, else 415 and nothing changes: a
  cross-site form (no fields, any of the three types a form can send) cannot stop, answer,
  inject into or start a run. An empty Stop body sent as JSON is fine.
- A non-finite number (``NaN``, ``Infinity``, ``1e400``) anywhere in a body: 400.
- A body nested deeper than the limit (or deeper than the parser's recursion): 400.
- An id that could name another store key (``:``, whitespace, globs): 404 for a run, 400
  for a conversation, before the store is asked.
- A ``Last-Event-ID`` ending in a non-ASCII digit: 400.
- A decision's 422 lists every problem, the unknown approval id first.

Each test starts a run blocked in a tool (``hold``) and one paused for a decision
(``ask``), sends the hostile request, and checks nothing moved: the blocked run then ends
normally (not cancelled, nothing injected) and the paused one is still paused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_sync import Agent, tool
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing import ScriptedModel
from tests.run._gates import Gate, gate_call

from ._chat_sites import FRAMEWORKS, raw_request, serve_routes
from ._client import SSEConnection, frames_until

DELETED: list[str] = []
WAIT_S = 10.0
_SINCE_THE_END = 1 << 62


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    DELETED.append(path)
    return f"deleted {path}"


@dataclass
class Site:
    """The routes on a real server, with a run blocked in a tool and one paused."""

    framework: str
    port: int
    store: RunStore
    gate: Gate
    running: str = ""
    paused: str = ""
    approval: str = ""
    streams: list[SSEConnection] = field(default_factory=list)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | None = None,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """``path`` under ``/api``, ``RUN``/``PAUSED``/``APR`` replaced by the ids."""
        path = self.fill(path)
        if isinstance(body, dict):
            body = self.fill(json.dumps(body)).encode()
        all_headers = dict(headers or {})
        if content_type is not None:
            all_headers["Content-Type"] = content_type
        return raw_request(self.port, method, "/api" + path, body, all_headers)

    def fill(self, text: str) -> str:
        return (
            text.replace("PAUSED", self.paused)
            .replace("RUN", self.running)
            .replace("APR", self.approval)
        )

    def moved(self) -> dict[str, Any]:
        """What a request that changed something would change (compare before/after)."""
        snapshots = {run_id: self.store.get(run_id) for run_id in (self.running, self.paused)}
        return {
            "runs": {
                run_id: (s.status, s.queued_inputs, s.cancel_reason) if s else None
                for run_id, s in snapshots.items()
            },
            "logs": {run_id: len(self.store.read_events(run_id)) for run_id in snapshots},
            "histories": {
                cid: self.store.load(cid).messages for cid in ("hold", "ask", "fresh", "c1")
            },
            "deleted": list(DELETED),
        }

    def finish(self) -> None:
        """Let the blocked run end; it must end as if nothing had been sent."""
        self.gate.opened.set()
        frames = frames_until(self.streams[0], "done")
        assert frames[-1].data["stop_reason"] == "end_turn", frames[-1].data
        assert "input_injected" not in [f.event for f in frames]
        snapshot = self.store.get(self.paused)
        assert snapshot is not None and snapshot.status == "paused"
        assert DELETED == []


def _make_agent(store: RunStore, gate: Gate) -> Any:
    def make_agent(cid: str) -> Agent:
        if cid == "hold":
            turns: list[Any] = [{"tool_calls": [gate_call()]}, "held"]
        elif cid == "ask":
            current = store.load(cid, since=_SINCE_THE_END).run
            asked = {"tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
            turns = ["deleted"] if current is not None else [asked, "deleted"]
        else:
            turns = ["hello"]
        return Agent(
            ScriptedModel(turns), tools=[gate.tool, delete_file], store=store, conversation_id=cid
        )

    return make_agent


@contextmanager
def site_on(framework: str, store: RunStore | None = None) -> Iterator[Site]:
    """Serve the routes on ``store``; start the blocked and the paused run."""
    store = store if store is not None else MemoryRunStore()
    gate = Gate()
    DELETED.clear()
    with serve_routes(framework, _make_agent(store, gate), store=store, keepalive=0.5) as port:
        site = Site(framework, port, store, gate)
        try:
            hold = SSEConnection(port, "/api/chat", {"conversation_id": "hold", "message": "go"})
            site.streams.append(hold)
            site.running = frames_until(hold, "tool_start")[0].data["run_id"]
            assert gate.entered.wait(WAIT_S)
            ask = SSEConnection(port, "/api/chat", {"conversation_id": "ask", "message": "rm"})
            site.streams.append(ask)
            asked = frames_until(ask, "approval_required")[-1].data
            site.paused, site.approval = asked["run_id"], asked["approval_id"]
            yield site
        finally:
            gate.opened.set()
            for stream in site.streams:
                stream.drop()
            for thread in threading.enumerate():
                if thread.name.startswith("agent-sync-run"):
                    thread.join(WAIT_S)


@pytest.fixture(params=FRAMEWORKS)
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    with site_on(request.param) as served:
        yield served


# Every POST route, with a body it would act on if it were accepted.
POSTS = {
    "chat": ("/chat", {"conversation_id": "fresh", "message": "hi"}),
    "ai-sdk chat": (
        "/chat",
        {"id": "fresh", "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]},
    ),
    "run stop": ("/runs/RUN/stop", {}),
    "run decisions": ("/runs/PAUSED/decisions", {"decisions": {"APR": True}}),
    "run inject": ("/runs/RUN/inject", {"content": "psst"}),
    "cancel": ("/cancel", {"conversation_id": "hold"}),
    "ai-sdk stop": ("/chat/hold/stop", {}),
}

# What a cross-site <form> can send (no preflight), and no type at all.
FORM_TYPES = [
    None,
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
]


@pytest.mark.parametrize("route", list(POSTS))
def test_a_post_not_declared_json_gets_415_and_changes_nothing(site: Site, route: str) -> None:
    path, body = POSTS[route]
    before = site.moved()
    for content_type in FORM_TYPES:
        for sent in (b"", site.fill(json.dumps(body)).encode()):
            status, answer = site.request("POST", path, sent, content_type)
            assert status == 415, (content_type, sent, answer)
            assert answer["error"] == "unsupported_media_type"
            assert "application/json" in answer["message"]
    assert site.moved() == before
    site.finish()


@pytest.mark.parametrize("path", ["/runs/RUN/stop", "/chat/hold/stop"])
@pytest.mark.parametrize("body", [b"", b"{}"], ids=["empty", "{}"])
def test_an_empty_stop_sent_as_json_stops(site: Site, path: str, body: bytes) -> None:
    status, answer = site.request("POST", path, body, "application/json; charset=utf-8")
    assert status == 200 and answer["cancelled"] is True, answer
    site.gate.opened.set()
    assert frames_until(site.streams[0], "done")[-1].data["stop_reason"] == "cancelled"


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]


@pytest.mark.parametrize("route", list(POSTS))
def test_a_non_finite_number_in_any_body_gets_400(site: Site, route: str) -> None:
    path, body = POSTS[route]
    before = site.moved()
    for literal in NON_FINITE:
        sent = site.fill(json.dumps({**body, "n": 0})).replace('"n": 0', f'"n": {literal}')
        status, answer = site.request("POST", path, sent.encode())
        assert status == 400 and answer["error"] == "bad_request", (literal, answer)
        assert "not finite" in answer["message"]
    assert site.moved() == before
    site.finish()


@pytest.mark.parametrize("literal", NON_FINITE)
def test_a_decision_with_a_non_finite_input_runs_nothing(site: Site, literal: str) -> None:
    for decision in (
        '{"approved": true, "input": {"path": %s}}',
        '{"approved": true, "data": {"score": %s}}',
        '{"approved": false, "data": {"score": [1, %s]}}',
    ):
        sent = '{"decisions": {"APR": %s}}' % (decision % literal)  # noqa: UP031
        status, answer = site.request("POST", "/runs/PAUSED/decisions", sent.encode())
        assert status == 400, answer
    site.finish()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("route", list(POSTS))
def test_a_deeply_nested_body_gets_400(site: Site, route: str) -> None:
    path, body = POSTS[route]
    before = site.moved()
    for depth in (101, 5_000, 400_000):  # over the limit; past the parser's recursion
        sent = site.fill(json.dumps({**body, "n": 0})).replace('"n": 0', f'"n": {_nested(depth)}')
        status, answer = site.request("POST", path, sent.encode())
        assert status == 400 and "nested deeper" in answer["message"], (depth, answer)
    assert site.moved() == before
    site.finish()


def test_nesting_up_to_the_limit_is_fine(site: Site) -> None:
    status, answer = site.request("POST", "/runs/RUN/inject", {"content": "x", "n": [[[]]]})
    assert status == 202, answer
    site.gate.opened.set()
    frames_until(site.streams[0], "done")


def test_a_last_event_id_ending_in_a_superscript_digit_gets_400(site: Site) -> None:
    # "²".isdigit() is true and int("²") fails: the header (latin-1) and the query
    status, answer = site.request(
        "GET", "/runs/RUN/events", content_type=None, headers={"Last-Event-ID": "RUN:1\u00b2"}
    )
    assert status == 400 and "Last-Event-ID" in answer["message"], answer
    for digit in ("%C2%B2", "%D9%A3", "%EF%BC%91"):  # superscript 2, Arabic-Indic 3, fullwidth 1
        path = f"/runs/RUN/events?last_event_id=RUN%3A1{digit}"
        status, answer = site.request("GET", path, content_type=None)
        assert status == 400 and "Last-Event-ID" in answer["message"], (digit, answer)
    site.finish()


# Conversation ids that must not reach make_agent or the store: whitespace (Agent refuses
# it: that UsageError was a 500), key separators and patterns of the stores.
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


def test_a_bad_content_length_is_not_a_500(site: Site) -> None:
    status, answer = site.request(
        "POST", "/runs/RUN/stop", None, headers={"Content-Length": "\u00b2"}
    )
    assert status in (200, 400), answer


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
    messages = (
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
    with serve_routes(framework, _make_agent(store, gate), store=store) as port:
        status, answer = raw_request(port, "GET", "/api/history?conversation_id=c1")
    assert status == 200, answer
    texts = [m["content"][0]["text"] for m in answer["messages"]]
    assert texts == ["read report-\ufffd.txt", "ok \ufffd"]
