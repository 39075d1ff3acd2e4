"""A run's log writer that fails tells every stream once, with an ``error`` frame, and the
run's end is still stored (the conversation takes the next message). Real SQLite and
memory stores, werkzeug servers and sockets; the failures come from store subclasses that
refuse an append (as a store that cannot encode a record, or is down, does)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flask
import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.errors import StoreUnavailableError
from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import chat_blueprint
from tests.run._gates import Gate, gate_call

from ._client import SSEConnection, frames_until, serve


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    return f"deleted {path}"


def _refuses_poison(events: Sequence[dict[str, Any]]) -> None:
    """Refuse, as a store that cannot encode it would, any append holding ``POISON``."""
    if "POISON" in json.dumps(list(events)):
        raise TypeError("this store cannot encode that record")


class RefusingSQLite(SQLiteRunStore):
    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        _refuses_poison(events)
        return super().append_events(run_id, events, after=after, keep_s=keep_s)


class RefusingMemory(MemoryRunStore):
    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        _refuses_poison(events)
        return super().append_events(run_id, events, after=after, keep_s=keep_s)


class FlakyStore(SQLiteRunStore):
    """Its event log is unavailable while ``down`` is set (``refused``: it said so)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.down = threading.Event()
        self.refused = threading.Event()

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        if self.down.is_set():
            self.refused.set()
            raise StoreUnavailableError("the disk is full")
        return super().append_events(run_id, events, after=after, keep_s=keep_s)


pytestmark = pytest.mark.usefixtures("no_runs_left")


@contextmanager
def served(store: RunStore, *turns: Any) -> Iterator[tuple[int, Gate]]:
    model = ScriptedModel(list(turns))
    gate = Gate()

    def make_agent(cid: str) -> Agent:
        return Agent(model, tools=[gate.tool, delete_file], store=store, conversation_id=cid)

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, keepalive=0.5), url_prefix="/api"
    )
    with serve(app) as server:
        try:
            yield server.server_port, gate
        finally:
            gate.opened.set()


@contextmanager
def stream(
    port: int, path: str, body: dict[str, Any] | None, **options: Any
) -> Iterator[SSEConnection]:
    conn = SSEConnection(port, path, body, **options)
    try:
        yield conn
    finally:
        conn.drop()


def _chat(port: int, cid: str = "c1") -> Any:
    return stream(port, "/api/chat", {"conversation_id": cid, "message": "go"})


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_a_record_the_store_refuses_ends_every_stream_with_one_error(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = RefusingSQLite(tmp_path / "runs.db") if kind == "sqlite" else RefusingMemory()
    turns = ({"text": "POISON", "chunk_size": 64}, "the next answer")
    with served(store, *turns) as (port, _), caplog.at_level(logging.WARNING):
        with _chat(port) as conn:
            frames = frames_until(conn, "error")
            assert [f.event for f in frames] == ["run", "error"]
            assert frames[-1].data["error"] == "StoreError"
            assert conn.next_frame() is None  # the error is last
        run_id = frames[0].data["run_id"]
        replay = f"/api/runs/{run_id}/events"
        with stream(port, replay, None, method="GET") as again:  # a reconnect: the same
            assert [f.raw for f in frames_until(again, "error")] == [f.raw for f in frames]
        # The run's end was stored: the conversation takes the next message at once.
        with _chat(port) as conn:
            assert conn.status == 200
            assert frames_until(conn, "done")[-1].data["text"] == "the next answer"
        assert validate_history(list(store.load("c1").messages)) == []
    told = [r for r in caplog.records if r.name == "agent_sync._run_log._publish"]
    assert len(told) == 1 and "event log" in told[0].getMessage()  # reported once
    if isinstance(store, SQLiteRunStore):
        store.close()


def test_a_store_outage_is_reported_as_such_once_the_store_is_back(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "runs.db")
    turns = ({"tool_calls": [gate_call()]}, "an answer", "an answer")  # cancelled when?
    with served(store, *turns) as (port, gate):
        with _chat(port) as conn:
            frames_until(conn, "tool_start")
            store.down.set()
            gate.opened.set()  # the tool's end cannot be appended
            assert store.refused.wait(10)
            store.down.clear()
            error = frames_until(conn, "error")[-1].data
            assert (error["error"], error["retryable"]) == ("StoreUnavailable", True)
            assert "unavailable" in error["message"] and "worker" not in error["message"]
        with _chat(port) as conn:
            assert frames_until(conn, "done")[-1].data["text"] == "an answer"
    store.close()
