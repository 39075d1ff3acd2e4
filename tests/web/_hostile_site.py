"""The scenario of the hostile-request tests: the chat routes on a real server (Flask or
Django) with one run blocked in a tool (``hold``) and one paused for a decision (``ask``),
and what a request that changed something would have changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agent_sync import Agent, tool
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND
from tests.run._gates import Gate, gate_call

from ._chat_sites import raw_request, serve_routes
from ._client import SSEConnection, frames_until
from ._run_threads import run_threads

__all__ = ["DELETED", "Site", "make_agent_for", "site_on"]

DELETED: list[str] = []
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


def make_agent_for(store: RunStore, gate: Gate) -> Any:
    def make_agent(cid: str) -> Agent:
        if cid == "hold":
            # an accepted inject reaches the run through the store: before the model's answer
            # (one more turn) or after it (then one more model call answers it)
            turns: list[Any] = [{"tool_calls": [gate_call()]}, "held", "held, and noted"]
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
    with serve_routes(framework, make_agent_for(store, gate), store=store, keepalive=0.5) as port:
        site = Site(framework, port, store, gate)
        try:
            hold = SSEConnection(port, "/api/chat", {"conversation_id": "hold", "message": "go"})
            site.streams.append(hold)
            site.running = frames_until(hold, "tool_start")[0].data["run_id"]
            assert gate.entered.wait(HANG_BOUND)
            ask = SSEConnection(port, "/api/chat", {"conversation_id": "ask", "message": "rm"})
            site.streams.append(ask)
            asked = frames_until(ask, "approval_required")[-1].data
            site.paused, site.approval = asked["run_id"], asked["approval_id"]
            yield site
        finally:
            gate.opened.set()
            for stream in site.streams:
                stream.drop()
            for thread in run_threads():
                thread.join(HANG_BOUND)
