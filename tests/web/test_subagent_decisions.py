"""A sub-agent's run through the chat routes, in Flask and in Django: its run id reaches
the browser (``subagent`` frames, approval requests), but its tree belongs to the run
that started it. A decision posted to a child's id is refused (409, naming the run that
takes it) and changes nothing; the top-level run's decision goes on once, a second one
for the same pause is 409; and ``authorize`` is asked about the top-level run's
conversation for a child's id (events, stop, decisions, inject), never about the child's
own conversation, which the application does not know."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.messages import StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel

from ._chat_sites import FRAMEWORKS, serve_routes
from ._client import SSEConnection, frames_until, request_json

pytestmark = pytest.mark.timeout(60)

WIPED: list[str] = []
_lock = threading.Lock()


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    with _lock:
        WIPED.append(path)
    return f"wiped {path}"


class Answers:
    """A model whose turn depends only on the last block: a prompt asks for ``call``, a
    tool result is answered ``text`` (each request's agent is a new one)."""

    def __init__(self, call: dict[str, Any], text: str) -> None:
        self.call, self.text = call, text

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        last = request.messages[-1]["content"][-1]
        turn: Any = self.text if "toolResult" in last else {"tool_calls": [self.call]}
        return ScriptedModel([turn]).stream(request, cancel=cancel)


def _lead(store: MemoryRunStore, cid: str) -> Agent:
    janitor = Agent(Answers({"name": "wipe", "input": {"path": "/data"}}, "wiped it"), tools=[wipe])
    return Agent(
        Answers({"name": "clean", "input": {"prompt": "tidy"}}, "all clean"),
        tools=[janitor.as_tool(name="clean", description="Clean up")],
        store=store,
        conversation_id=cid,
    )


def _first_user(owners: dict[str, str]) -> Any:
    """An app's ``authorize``: a conversation belongs to the first user who asks for it
    (a new conversation may be started by anyone)."""

    def authorize(request: Any, conversation_id: str) -> bool:
        user = str(request.headers.get("X-User"))
        with _lock:
            return owners.setdefault(conversation_id, user) == user

    return authorize


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_child_run_is_answered_and_authorized_through_its_lead(framework: str) -> None:
    WIPED.clear()
    store = MemoryRunStore()
    owners: dict[str, str] = {}
    alice, bob = {"X-User": "alice"}, {"X-User": "bob"}
    make_agent = lambda cid: _lead(store, cid)  # noqa: E731
    with serve_routes(framework, make_agent, store=store, authorize=_first_user(owners)) as port:

        def post(path: str, body: dict[str, Any], user: dict[str, str]) -> tuple[int, Any]:
            return request_json(port, "POST", f"/api{path}", body, headers=user)

        conn = SSEConnection(
            port, "/api/chat", {"conversation_id": "c1", "message": "go"}, headers=alice
        )
        try:
            frames = frames_until(conn, "approval_required")
            lead = frames[0].data["run_id"]
            (child,) = {f.data["run_id"] for f in frames if f.event == "subagent"}
            approval = frames[-1].data["approval_id"]
            decision = {"decisions": {approval: True}}
            # another user reaches nothing of alice's tree through the child's id
            assert post(f"/runs/{child}/decisions", decision, bob)[0] == 403
            assert post(f"/runs/{child}/stop", {}, bob)[0] == 403
            assert post(f"/runs/{child}/inject", {"content": "hi"}, bob)[0] == 403
            events = f"/api/runs/{child}/events"
            assert request_json(port, "GET", events, headers=bob)[0] == 403
            # the owner's decision for the child's id is refused: the lead takes it
            status, body = post(f"/runs/{child}/decisions", decision, alice)
            assert status == 409 and body["error"] == "sub_agent_run"
            assert body["run_id"] == lead
            # so is stopping the paused child alone (its lead would wait on it forever)
            status, body = post(f"/runs/{child}/stop", {}, alice)
            assert (status, body["error"], body["run_id"]) == (409, "sub_agent_run", lead)
            for run_id in (lead, child):
                snapshot = store.get(run_id)
                assert snapshot is not None and snapshot.status == "paused"
            assert WIPED == []
            # the lead's decision goes on, once
            assert post(f"/runs/{lead}/decisions", decision, alice) == (
                202,
                {"run_id": lead, "status": "running"},
            )
            status, body = post(f"/runs/{lead}/decisions", decision, alice)
            assert status == 409 and body["error"] in ("not_paused", "conflict")
            rest = frames_until(conn, "done")
        finally:
            conn.drop()
        assert rest[-1].data["text"] == "all clean" and WIPED == ["/data"]
        snapshot = store.get(child)
        assert snapshot is not None and snapshot.status == "done"
        assert validate_history(list(store.load("c1").messages)) == []
        # the owner may follow the child's id (its tree is hers): no 403
        assert request_json(port, "GET", events, headers=alice)[0] in (200, 204)
        assert owners == {"c1": "alice"}  # asked about the lead's conversation only
