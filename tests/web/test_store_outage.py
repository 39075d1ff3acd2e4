"""A run stopped by a store outage says so once the store is back, from the worker that
knows: a real ``redis-server`` (durable: what it acknowledged survives) is killed mid-run and
started again on the same port and folder; a client that reconnects reads an ``error``
frame saying the store was unavailable, not the "worker stopped" a follower would guess."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flask
import pytest

from agent_sync import Agent, validate_history
from agent_sync.stores import RedisRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.testing.redis_server import RedisServer
from agent_sync.web.flask import chat_blueprint
from tests.run._gates import Gate, gate_call

from ._client import Frame, SSEConnection, frames_until, serve

redis = pytest.importorskip("redis", reason="pip install -e '.[redis]'")
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402


def _is_outage_record(events: Sequence[dict[str, Any]]) -> bool:
    return any(event.get("error") == "StoreUnavailable" for event in events)


class OutageStore(RedisRunStore):
    """A Redis store whose writer's ``StoreUnavailable`` record, once the server is back
    (:meth:`hold`), waits for ``release``: the writer's next attempt comes after the
    followers have looked, as it does when its back-off is long. ``retrying`` is set when
    the writer tries to append that record while the server is down."""

    def __init__(self, port: int) -> None:
        client = redis.Redis(port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
        super().__init__(client, prefix="outage:")
        self.retrying = threading.Event()
        self.release = threading.Event()
        self._held = False
        self._lock = threading.Lock()

    def hold(self) -> None:
        """From now on (an attempt made while the server was down has failed), the
        writer's ``StoreUnavailable`` record waits for ``release``."""
        with self._lock:
            self._held = True

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        if _is_outage_record(events):
            with self._lock:
                if not self._held:  # the server is down: this attempt fails
                    self.retrying.set()
                    return super().append_events(run_id, events, after=after, keep_s=keep_s)
            assert self.release.wait(30), "the test never released the writer"
        return super().append_events(run_id, events, after=after, keep_s=keep_s)


@contextmanager
def _served(store: OutageStore, gate: Gate) -> Iterator[int]:
    model = ScriptedModel([{"tool_calls": [gate_call()]}, "the next answer"])

    def make_agent(cid: str) -> Agent:
        # A short lease: the store learns soon after it is back that the run is over.
        return Agent(model, tools=[gate.tool], store=store, conversation_id=cid, lease_s=2.0)

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, keepalive=0.1), url_prefix="/api"
    )
    with serve(app) as server:
        try:
            yield server.server_port
        finally:
            gate.opened.set()
            store.release.set()


def _end_after_failed(conn: SSEConnection, store: RedisRunStore, run_id: str) -> Frame | None:
    """Read keep-alives until the store says the run failed (its lease ran out while the
    server was down); the frame that ends the stream first, if one does."""
    for frame in conn.frames():
        if frame.event != "comment":
            return frame
        snapshot = store.get(run_id)
        if snapshot is not None and snapshot.status == "failed":
            return None
    raise AssertionError("the stream ended without a frame")


def test_a_run_stopped_by_a_store_outage_ends_with_store_unavailable_from_its_worker(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    folder = tmp_path / "redis"
    server = RedisServer.start(folder, durable=True)
    port = server.port
    store = OutageStore(port)
    gate = Gate()
    try:
        with _served(store, gate) as http_port:
            body = {"conversation_id": "c1", "message": "go"}
            first = SSEConnection(http_port, "/api/chat", body)
            try:
                seen = frames_until(first, "tool_start")
                server.kill()  # the store goes away mid-run
                gate.opened.set()  # the tool's end cannot be appended: the run is stopped
                assert store.retrying.wait(30)  # its writer tries to tell why
                for frame in first.frames():  # the stream ends: the client will reconnect
                    assert frame.event == "comment", frame
            finally:
                first.drop()
            store.hold()
            server = RedisServer.start(folder, port=port, durable=True)  # the store is back
            run_id, last = seen[0].data["run_id"], seen[-1].id
            resume = {"Last-Event-ID": str(last)}
            path = f"/api/runs/{run_id}/events"
            end: Frame | None = None
            again = SSEConnection(http_port, path, None, method="GET", headers=resume)
            try:
                end = _end_after_failed(again, store, run_id)
            finally:
                again.drop()
            if end is None:  # the run is over in the store: a follower now waits for the
                # writer's own end (here, three check intervals), however long it takes.
                late = SSEConnection(http_port, path, None, method="GET", headers=resume)
                try:
                    keepalives = 0
                    for frame in late.frames():
                        if frame.event != "comment":
                            end = frame
                            break
                        keepalives += 1
                        if keepalives == 3:
                            store.release.set()
                finally:
                    late.drop()
            assert end is not None and end.event == "error", end
            assert (end.data["error"], end.data["retryable"]) == ("StoreUnavailable", True)
            assert "unavailable" in end.data["message"]
            assert "worker" not in end.data["message"]
            # The conversation goes on.
            with_next = SSEConnection(
                http_port, "/api/chat", {"conversation_id": "c1", "message": "again"}
            )
            try:
                assert frames_until(with_next, "done")[-1].data["text"] == "the next answer"
            finally:
                with_next.drop()
            assert validate_history(list(store.load("c1").messages)) == []
    finally:
        server.kill()
