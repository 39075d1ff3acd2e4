"""The whole stack under gunicorn's threaded worker, as deployed.

browser (raw socket) -> gunicorn ``gthread`` -> Flask example -> Agent -> OpenAIModel ->
local OpenAI-compatible fake. Dropping the browser connection while the model is silent must
travel all the way down: gunicorn exposes the client socket, the stream notices the drop,
the agent is cancelled and its provider aborts the upstream request (the fake sees its
connection go), long before any keep-alive (15 s) would have revealed it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_sync.messages import validate_history
from agent_sync.testing.openai_server import OpenAIServer
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.gunicorn import quiet_options, stop_gunicorn

from ._client import SSEConnection, request_json
from .conftest import EXAMPLES

pytest.importorskip("gunicorn", reason="pip install gunicorn")

API_KEY = "sk-test-0123456789-secret"
GUNICORN = Path(sys.executable).with_name("gunicorn")
ROOT = EXAMPLES.parent


@dataclass
class Deployed:
    port: int
    fake: OpenAIServer

    def chat(self, message: str, cid: str = "c1") -> SSEConnection:
        return SSEConnection(self.port, "/chat", {"conversation_id": cid, "message": message})


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # clients queue here until the worker accepts: no readiness race
    env = {
        **os.environ,
        "AGENT_SYNC_PROVIDER": "openai",
        "AGENT_SYNC_MODEL": "gpt-test",
        "OPENAI_API_KEY": API_KEY,
        "CHAT_TIMEOUT": "30",
        # agent_sync from this checkout, whether or not it is installed
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with OpenAIServer() as fake:
        env["OPENAI_BASE_URL"] = fake.url
        proc = subprocess.Popen(
            [
                str(GUNICORN),
                "--worker-class", "gthread", "--workers", "1", "--threads", "8",
                "--bind", f"fd://{listener.fileno()}",
                "--chdir", str(EXAMPLES / "flask_chat"),
                "--log-level", "warning",
                *quiet_options(),
                "chat_app:create_app()",
            ],
            env=env,
            pass_fds=(listener.fileno(),),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: see stop_gunicorn
        )  # fmt: skip
        try:
            yield Deployed(listener.getsockname()[1], fake)
        finally:
            stderr = stop_gunicorn(proc) or b""
            listener.close()
            assert API_KEY.encode() not in stderr, "the API key leaked into the server log"


def read_text(conn: SSEConnection, frames: int) -> str:
    text = ""
    for _ in range(frames):
        frame = conn.next_frame()
        assert frame is not None and frame.event == "text", frame
        text += frame.data["text"]
    return text


def history_when_settled(port: int, cid: str = "c1") -> list[Any]:
    """The history once the run has wound down.

    The upstream connection closes a moment before the run finishes writing the history,
    and this process cannot wait on the other's events: retry over HTTP (bounded). Only
    for runs already ended or cancelled: ``/cancel`` is how it asks "idle?".
    """
    settled = threading.Event()
    deadline = time.monotonic() + HANG_BOUND  # bounded by time: a busy worker is slow
    while time.monotonic() < deadline:
        status, body = request_json(port, "POST", "/cancel", {"conversation_id": cid})
        if status == 200 and body == {"cancelled": False}:  # idle
            status, body = request_json(port, "GET", f"/history?conversation_id={cid}")
            return list(body["messages"])
        settled.wait(0.05)
    raise AssertionError("the conversation never became idle")


def test_silent_disconnect_cancels_through_to_the_provider(deployed: Deployed) -> None:
    deployed.fake.add_turns({"text": "abcdefghij" * 20, "chunk_size": 2, "stall_after": 5})
    conn = deployed.chat("hi")
    assert conn.headers["content-type"].startswith("text/event-stream")
    streamed = read_text(conn, 3)
    assert deployed.fake.wait_for_stall(1)
    conn.drop()

    # The upstream request is aborted: the whole cancel chain ran, without keep-alives.
    assert deployed.fake.wait_for_idle(5), "the provider request was never aborted"
    messages = history_when_settled(deployed.port)
    assert validate_history(messages) == []
    assert messages[-1]["content"][0]["text"].startswith(streamed)
    assert messages[-1]["content"][-1] == {"text": "Cancelled by user"}


def test_stop_button_and_provider_errors_under_gunicorn(deployed: Deployed) -> None:
    deployed.fake.add_turns(
        {"text": "abcdefghij" * 20, "chunk_size": 2, "stall_after": 5},
        {"status": 401, "error_message": "Incorrect API key provided"},
    )
    conn = deployed.chat("hi")
    read_text(conn, 3)
    assert deployed.fake.wait_for_stall(1)
    status, body = request_json(deployed.port, "POST", "/cancel", {"conversation_id": "c1"})
    assert (status, body) == (200, {"cancelled": True})
    done = next(f for f in conn.frames() if f.event not in ("text", "comment"))
    assert done.event == "done"
    assert (done.data["stop_reason"], done.data["cancel_reason"]) == (
        "cancelled",
        "stopped by user",
    )
    conn.close()

    conn = deployed.chat("again")
    frames = list(conn.frames())
    conn.close()
    error = frames[-1]
    assert error.event == "error"
    assert error.data["status"] == 401
    assert "Incorrect API key" in error.data["message"]
    assert API_KEY not in str(frames)
    assert validate_history(history_when_settled(deployed.port)) == []
