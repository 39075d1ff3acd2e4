"""The Django example served by a threaded wsgiref server, driven over real sockets.

wsgiref (not werkzeug, as for Flask) so both helpers are checked against two WSGI servers:
this one answers HTTP/1.0 without chunking and closes the body when a write fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND

from ._chat_sites import setup_django
from ._client import Frame, SSEConnection, request_json, serve, serve_wsgiref
from .conftest import CloseRecorder

pytestmark = pytest.mark.usefixtures("no_sse_threads_left")

CANCELLED = {"text": "Cancelled by user"}
STREAMING = {"text": "abcdefghij" * 30, "chunk_size": 2, "chunk_delay": 0.01}
STALLING = {"text": "abcdefghij" * 30, "chunk_size": 2, "stall_after": 3}


@pytest.fixture(scope="module")
def django_views() -> Any:
    setup_django()
    from chat import views

    return views


@dataclass
class Site:
    port: int
    recorder: CloseRecorder
    views: Any
    csrf: dict[str, str]
    base: int = 0

    def wait_for_closes(self, count: int) -> bool:
        """Wait until ``count`` responses after the page load have been closed."""
        return self.recorder.wait_for_closes(self.base + count)

    def chat(self, message: str, cid: str = "c1") -> SSEConnection:
        body = {"conversation_id": cid, "message": message}
        return SSEConnection(self.port, "/chat", body, headers=self.csrf)

    def post(self, path: str, body: dict[str, Any], csrf: bool = True) -> tuple[int, Any]:
        return request_json(self.port, "POST", path, body, headers=self.csrf if csrf else {})

    def agent(self, cid: str = "c1") -> Any:
        agent = self.views.get_registry().peek(cid)
        assert agent is not None
        return agent


@contextmanager
def serve_site(views: Any, *turns: Any, server: str = "wsgiref") -> Iterator[Site]:
    from chat_site.wsgi import application

    views.configure(lambda: ScriptedModel(list(turns)))
    recorder = CloseRecorder(application)
    with _serve(recorder, server) as port:
        csrf = _csrf(port)
        assert recorder.wait_for_closes(1)  # the page itself
        yield Site(port, recorder, views, csrf, base=recorder.count)


@contextmanager
def _serve(app: Any, kind: str) -> Iterator[int]:
    if kind == "werkzeug":
        with serve(app) as werkzeug_server:
            yield werkzeug_server.server_port
        return
    with serve_wsgiref(app) as port:
        yield port


def _csrf(port: int) -> dict[str, str]:
    """GET the page like a browser: its CSRF cookie, echoed back as Django expects."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_BOUND)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        assert response.status == 200
        assert b"Stop" in response.read()
        cookie = response.getheader("Set-Cookie") or ""
    finally:
        conn.close()
    token = cookie.split("csrftoken=", 1)[1].split(";", 1)[0]
    return {"Cookie": f"csrftoken={token}", "X-CSRFToken": token}


def read_text(conn: SSEConnection, frames: int) -> str:
    text = ""
    for _ in range(frames):
        frame = conn.next_frame()
        assert frame is not None and frame.event == "text"
        text += frame.data["text"]
    return text


def test_answer_streams_with_sse_headers(django_views: Any) -> None:
    with serve_site(django_views, {"text": "Hello from Django", "chunk_size": 5}) as site:
        conn = site.chat("hi")
        frames = list(conn.frames())
        conn.close()

        assert conn.status == 200
        assert conn.headers["content-type"].startswith("text/event-stream")
        assert conn.headers["cache-control"] == "no-cache"
        assert conn.headers["x-accel-buffering"] == "no"
        assert "".join(f.data["text"] for f in frames if f.event == "text") == "Hello from Django"
        assert frames[-1].event == "done"
        assert frames[-1].data["stop_reason"] == "end_turn"


def test_disconnect_cancels_and_leaves_history_valid(django_views: Any) -> None:
    with serve_site(django_views, STREAMING, "next answer") as site:
        conn = site.chat("hi")
        streamed = read_text(conn, 3)
        conn.drop()

        assert site.wait_for_closes(1), "the server never closed the response"
        agent = site.agent()
        assert not agent.is_running
        assert validate_history(agent.messages) == []
        assert agent.messages[-1]["content"][-1] == CANCELLED
        assert agent.messages[-1]["content"][0]["text"].startswith(streamed)

        conn = site.chat("again")
        assert list(conn.frames())[-1].data["stop_reason"] == "end_turn"
        conn.close()


def test_cancel_endpoint_and_409_while_busy(django_views: Any) -> None:
    with serve_site(django_views, STALLING) as site:
        conn = site.chat("first")
        read_text(conn, 3)

        status, body = site.post("/chat", {"conversation_id": "c1", "message": "second"})
        assert (status, body["error"]) == (409, "busy")

        status, body = site.post("/cancel", {"conversation_id": "c1"})
        assert (status, body) == (200, {"cancelled": True})
        done = conn.next_frame()
        assert done is not None and done.event == "done"
        assert (done.data["stop_reason"], done.data["cancel_reason"]) == (
            "cancelled",
            "stopped by user",
        )
        conn.close()
        assert site.wait_for_closes(2)
        agent = site.agent()
        assert validate_history(agent.messages) == []
        assert [m["role"] for m in agent.messages] == ["user", "assistant"]


def test_silent_disconnect_is_noticed_through_keepalives(django_views: Any) -> None:
    # wsgiref does not expose the client socket: keep-alive writes reveal the drop.
    from django.test import override_settings

    with serve_site(django_views, STALLING) as site, override_settings(CHAT_KEEPALIVE=0.05):
        conn = site.chat("hi")
        read_text(conn, 3)
        assert conn.next_frame(skip_comments=False) == Frame("comment", "keep-alive")
        conn.drop()
        assert site.wait_for_closes(1), "the server never noticed the drop"
        agent = site.agent()
        assert not agent.is_running
        assert validate_history(agent.messages) == []


def test_silent_disconnect_is_noticed_at_once_under_werkzeug(django_views: Any) -> None:
    # werkzeug exposes the client socket in request.META: no keep-alive needed.
    from django.test import override_settings

    with (
        serve_site(django_views, STALLING, server="werkzeug") as site,
        override_settings(CHAT_KEEPALIVE=60),
    ):
        conn = site.chat("hi")
        read_text(conn, 3)
        conn.drop()
        assert site.wait_for_closes(1), "the server never noticed the drop"
        assert not site.agent().is_running
        assert validate_history(site.agent().messages) == []


def test_timeout_setting_cancels_with_reason_timeout(django_views: Any) -> None:
    with serve_site(django_views, STALLING) as site:
        from django.test import override_settings

        with override_settings(CHAT_TIMEOUT=0.2):
            conn = site.chat("hi")
            frames = list(conn.frames())
            conn.close()
        assert frames[-1].event == "done"
        assert frames[-1].data["cancel_reason"] == "timeout"
        assert validate_history(site.agent().messages) == []


def test_post_without_csrf_token_is_refused_before_the_agent_starts(django_views: Any) -> None:
    with serve_site(django_views, "never sent") as site:
        status, _ = site.post("/chat", {"conversation_id": "c1", "message": "hi"}, csrf=False)
        assert status == 403
        assert site.views.get_registry().peek("c1") is None
