"""``agui_urls``: the AG-UI routes under Django (its example's settings, CSRF middleware
on), once through a real threaded server: a run, a resume, and the checks at the edge."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ag_ui.core import EventType

from agent_sync import Agent, tool
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel

from ._agui import check_order, events_until_end, run_input
from ._chat_sites import raw_request, setup_django
from ._client import SSEConnection, serve


@tool(requires_approval=True)
def send_mail(to: str) -> str:
    """Send a mail.

    Args:
        to: The address.
    """
    return f"sent to {to}"


@contextmanager
def django_agui(*turns: Any) -> Iterator[int]:
    setup_django()
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import include, path

    from agent_sync.web.django import agui_urls

    store = MemoryRunStore()
    model = ScriptedModel(list(turns))

    def make_agent(cid: str) -> Agent:
        return Agent(model, tools=[send_mail], store=store, conversation_id=cid)

    urlconf = types.ModuleType("agent_sync_test_agui_routes")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path(
            "agui/",
            include(agui_urls(make_agent, store=store, authorize=lambda r, cid: cid != "c9")),
        )
    ]

    class Handler(WSGIHandler):  # type: ignore[misc]
        def get_response(self, request: Any) -> Any:
            request.urlconf = urlconf
            return super().get_response(request)

    with serve(Handler()) as server:
        yield server.server_port


@contextmanager
def _connections(port: int) -> Iterator[Callable[[dict[str, Any]], SSEConnection]]:
    """``POST /agui/`` with a body; every connection closed at the end."""
    opened: list[SSEConnection] = []

    def post(body: dict[str, Any]) -> SSEConnection:
        opened.append(SSEConnection(port, "/agui/", body))
        return opened[-1]

    try:
        yield post
    finally:
        for conn in opened:
            conn.drop()


def test_django_serves_a_run_an_interrupt_and_its_resume() -> None:
    asks = {"tool_calls": [{"name": "send_mail", "input": {"to": "a@b.c"}}]}
    with django_agui(asks, "mailed") as port, _connections(port) as post:
        first = events_until_end(post(run_input("c1")))
        interrupt = first[-1].event.outcome.interrupts[0]
        entry = {"interruptId": interrupt.id, "status": "resolved", "payload": True}
        rest = events_until_end(post(run_input("c1", None, resume=[entry])))
        check_order(first + rest)
        assert rest[0].event.run_id == first[0].event.run_id
        results = [f.event.content for f in rest if f.type == EventType.TOOL_CALL_RESULT]
        assert results == ["sent to a@b.c"] and rest[-1].event.outcome.type == "success"
        status, answer = raw_request(
            port, "POST", "/agui/", b"{}", {"Content-Type": "application/json"}
        )
        assert status == 400 and "threadId" in answer["message"]
        refused = post(run_input("c9"))
        assert refused.status == 403 and refused.json()["error"] == "forbidden"
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert raw_request(port, "POST", "/agui/", b"threadId=c1", form)[0] == 415
