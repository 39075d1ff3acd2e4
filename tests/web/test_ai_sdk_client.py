"""``useChat`` unmodified: the AI SDK's real chat engine (``ai`` 6.0, under node) against
``chat_blueprint`` on a real threaded server.

``tests/aisdk/chat_client.mjs`` drives ``AbstractChat`` with ``DefaultChatTransport`` and
``sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses``, as a React
app's ``useChat`` would. What the client cannot see (a tool run once, a run cancelled, a
decision refused) is checked in the store.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flask
import pytest

from agent_sync import Agent, tool, validate_history
from agent_sync._run_log._records import is_terminal
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.web.flask import chat_blueprint
from tests.aisdk._node import ChatClient, aisdk_client
from tests.fixtures.bounds import HANG_BOUND

from ._client import request_json, serve
from ._run_threads import assert_no_runs_left

__all__ = ["aisdk_client"]  # the fixture

DELETED: list[str] = []
RESUMED = threading.Event()  # set when the client asks GET /api/chat/<id>/stream


@tool
def read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    DELETED.append(path)
    return f"deleted {path}"


@tool
def wait_for_resume() -> str:
    """Returns once a client has asked to resume the stream (or after HANG_BOUND)."""
    return "resumed" if RESUMED.wait(HANG_BOUND) else "nobody came back"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    DELETED.clear()
    RESUMED.clear()
    yield
    RESUMED.set()
    assert_no_runs_left()


@dataclass
class Served:
    """A chat app on a real server, and the AI SDK client pointed at it."""

    port: int
    store: MemoryRunStore
    model: ScriptedModel
    client: ChatClient

    def run(
        self, *actions: dict[str, Any], check: bool = True, **options: Any
    ) -> list[dict[str, Any]]:
        """Run the client's script on conversation ``c1`` (``options``: more script
        fields, e.g. ``prepare_send``); its checkpoint lines."""
        script = {
            "api": f"http://127.0.0.1:{self.port}/api/chat",
            "chat_id": "c1",
            "timeout_ms": HANG_BOUND * 1000,
            "actions": list(actions),
            **options,
        }
        return self.client.run(script, check=check)

    def history(self) -> list[Any]:
        return list(self.store.load("c1").messages)

    def wait_for_end(self, run_id: str) -> dict[str, Any]:
        """The run's terminal record, waiting for it on the log (no sleep)."""
        after = 0
        while True:
            events = self.store.read_events(run_id, after=after, timeout=HANG_BOUND)
            assert events, f"run {run_id} did not end within {HANG_BOUND} s"
            after = events[-1].seq
            if is_terminal(events[-1].data):
                return dict(events[-1].data)


def _on_resume(app: Callable[..., Any]) -> Callable[..., Any]:
    """WSGI middleware: sets RESUMED when a resume request arrives."""

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ["REQUEST_METHOD"] == "GET" and environ["PATH_INFO"].endswith("/stream"):
            RESUMED.set()
        return app(environ, start_response)

    return middleware


@contextmanager
def served(client: ChatClient, *turns: Any, **options: Any) -> Iterator[Served]:
    store = MemoryRunStore()
    model = ScriptedModel(list(turns))  # one script for every request's agent

    def make_agent(cid: str) -> Agent:
        return Agent(model, tools=[read, delete, wait_for_resume], store=store, conversation_id=cid)

    app = flask.Flask(__name__)
    app.register_blueprint(
        chat_blueprint(make_agent, store=store, keepalive=0.5, **options), url_prefix="/api"
    )
    app.wsgi_app = _on_resume(app.wsgi_app)  # type: ignore[method-assign]
    with serve(app) as server:
        yield Served(server.server_port, store, model, client)


def assistant(line: dict[str, Any]) -> dict[str, Any]:
    """The last message of a checkpoint: the run's assistant message."""
    message: dict[str, Any] = line["messages"][-1]
    assert message["role"] == "assistant" and message["id"].startswith("run_")
    return message


def tool_parts(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["toolCallId"]: p for p in message["parts"] if "toolCallId" in p}


def test_a_message_gets_its_answer(aisdk_client: ChatClient) -> None:
    with served(aisdk_client, "Hello from the server.") as app:
        (end,) = app.run({"do": "send", "text": "hi"})

    assert end["status"] == "ready" and end["errors"] == []
    assert [m["role"] for m in end["messages"]] == ["user", "assistant"]
    assert assistant(end)["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Hello from the server.", "state": "done"},
    ]
    assert end["requests"][0]["body"]["id"] == "c1"


def test_a_tool_call_and_its_output(aisdk_client: ChatClient) -> None:
    turns = [{"tool_calls": [{"id": "t1", "name": "read", "input": {"path": "a"}}]}, "It says a."]
    with served(aisdk_client, *turns) as app:
        (end,) = app.run({"do": "send", "text": "read a"})

    parts = assistant(end)["parts"]
    assert tool_parts(assistant(end))["t1"] == {
        "type": "tool-read",
        "toolCallId": "t1",
        "state": "output-available",
        "input": {"path": "a"},
        "output": "contents of a",
    }
    assert [p["type"] for p in parts] == ["step-start", "tool-read", "step-start", "text"]
    assert parts[-1]["text"] == "It says a."


def test_an_approval_runs_the_tool_exactly_once(aisdk_client: ChatClient) -> None:
    turns = [
        {
            "text": "Let me tidy up.",
            "tool_calls": [
                {"id": "t_read", "name": "read", "input": {"path": "a"}},
                {"id": "t_delete", "name": "delete", "input": {"path": "b"}},
            ],
        },
        "Deleted b.",
    ]
    with served(aisdk_client, *turns) as app:
        paused, end = app.run(
            {"do": "send", "text": "tidy up"},
            {"do": "wait"},
            {"do": "print", "label": "paused"},
            {"do": "approve", "approved": True},
        )
        history = app.history()

    asked = tool_parts(assistant(paused))
    assert list(asked) == ["t_delete"]  # the other call waits for the decision too
    assert asked["t_delete"]["state"] == "approval-requested"
    run_id = assistant(paused)["id"]

    # the decision went out by itself, on the same assistant message
    decision = end["requests"][-1]
    assert decision["method"] == "POST" and decision["body"]["messageId"] == run_id
    assert len(end["requests"]) == 2
    final = assistant(end)
    assert final["id"] == run_id and len(end["messages"]) == 2
    states = {k: (p["state"], p.get("output")) for k, p in tool_parts(final).items()}
    assert states == {
        "t_delete": ("output-available", "deleted b"),
        "t_read": ("output-available", "contents of a"),
    }
    assert final["parts"][-1] == {"type": "text", "text": "Deleted b.", "state": "done"}
    # each call announced once: the continuation does not announce the approved call again
    # (the client would reset its state and call onToolCall for it a second time)
    assert sorted(end["tool_calls"]) == ["t_delete", "t_read"]
    assert DELETED == ["b"]
    assert validate_history(history) == []


def test_a_forged_approval_id_is_refused(aisdk_client: ChatClient) -> None:
    turns = [{"tool_calls": [{"id": "t_delete", "name": "delete", "input": {"path": "b"}}]}, "no"]
    with served(aisdk_client, *turns) as app:
        (line,) = app.run(
            {"do": "send", "text": "delete b"},
            {"do": "wait"},
            {"do": "approve", "id": "apr_forged", "approved": True, "forge": True},
            {"do": "wait", "expect": "error"},
        )
        run_id = assistant(line)["id"]
        snapshot = app.store.get(run_id)

    assert line["status"] == "error" and "invalid_decision" in line["error"]  # the 422
    assert line["requests"][-1]["body"]["messages"][-1]["parts"][-1]["approval"]["id"] == (
        "apr_forged"
    )
    assert DELETED == []
    assert snapshot is not None and snapshot.status == "paused"  # still waiting


def test_stop_aborts_and_the_run_is_cancelled(aisdk_client: ChatClient) -> None:
    stalls = {"text": "Hello, this answer never ends", "chunk_size": 6, "stall_after": 1}
    with served(aisdk_client, stalls, on_disconnect="cancel") as app:
        (end,) = app.run(
            {"do": "send", "text": "hi"},
            {"do": "wait", "until": "text", "contains": "Hello"},
            {"do": "stop"},
        )
        run_id = assistant(end)["id"]
        last = app.wait_for_end(run_id)
        history = app.history()

    assert end["status"] == "ready" and end["error"] is None
    assert assistant(end)["parts"][-1]["text"] == "Hello,"
    assert (last["stop_reason"], last["cancel_reason"]) == ("cancelled", "client disconnected")
    assert history[-1]["content"] == [{"text": "Hello,"}, {"text": CANCELLED_TEXT}]
    assert validate_history(history) == []


def test_stop_with_continue_pairs_with_the_stop_route(aisdk_client: ChatClient) -> None:
    stalls = {"text": "Hello, this answer never ends", "chunk_size": 6, "stall_after": 1}
    with served(aisdk_client, stalls) as app:
        (end,) = app.run(
            {"do": "send", "text": "hi"},
            {"do": "wait", "until": "text", "contains": "Hello"},
            {"do": "stop"},
        )
        run_id = assistant(end)["id"]
        running = app.store.get(run_id)
        answer = request_json(app.port, "POST", "/api/chat/c1/stop", {})
        last = app.wait_for_end(run_id)

    assert running is not None and running.status == "running"  # the fetch alone: it goes on
    assert answer == (200, {"success": True, "cancelled": True})
    assert last["stop_reason"] == "cancelled"


def test_resume_after_a_reload_replays_the_run(aisdk_client: ChatClient) -> None:
    turns = [
        {"text": "Working on it.", "tool_calls": [{"id": "t1", "name": "wait_for_resume"}]},
        "All done.",
    ]
    with served(aisdk_client, *turns) as app:
        before, end = app.run(
            {"do": "send", "text": "go"},
            {"do": "wait", "until": "text", "contains": "Working"},
            {"do": "reload", "keep": "user"},  # the page reloads with the saved messages
            {"do": "print", "label": "reloaded"},
            {"do": "resume"},
        )

    assert [m["role"] for m in before["messages"]] == ["user"]
    resume = end["requests"][-1]
    assert resume["method"] == "GET" and resume["url"].endswith("/api/chat/c1/stream")
    assert [m["role"] for m in end["messages"]] == ["user", "assistant"]
    final = assistant(end)
    assert [p["type"] for p in final["parts"]] == [
        "step-start",
        "text",
        "tool-wait_for_resume",
        "step-start",
        "text",
    ]
    assert final["parts"][1]["text"] == "Working on it."
    assert tool_parts(final)["t1"]["output"] == "resumed"
    assert final["parts"][-1]["text"] == "All done."
    assert len(app.model.calls) == 2  # one run, replayed: not a second one


def docs_prepare_send() -> str:
    """The ``prepareSendMessagesRequest`` function of docs/web.md's useChat example."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "web.md").read_text()
    found = re.search(r"prepareSendMessagesRequest: (\(.*?\n  \}\)),\n", docs, re.DOTALL)
    assert found is not None, "docs/web.md has no prepareSendMessagesRequest example"
    return found.group(1)


LONG = "many words " * 30_000  # 330 kB: four answers make a UI history over the 1 MiB cap


@pytest.mark.parametrize("last_only", [True, False], ids=["docs-transport", "default"])
def test_a_long_conversation_goes_on_when_only_the_last_message_is_sent(
    aisdk_client: ChatClient, last_only: bool
) -> None:
    turns = [{"text": LONG, "chunk_size": 110_000}] * 4 + ["Still here."]
    sends: list[dict[str, Any]] = []
    for number in range(5):
        sends += [{"do": "send", "text": f"message {number}"}, {"do": "wait", "expect": "any"}]
    options: dict[str, Any] = {"prepare_send": docs_prepare_send()} if last_only else {}
    with served(aisdk_client, *turns) as app:
        (end,) = app.run(*sends, **options)
        history = app.history()

    bodies = [json.dumps(r["body"]) for r in end["requests"]]
    assert len(bodies) == 5
    if last_only:
        assert end["status"] == "ready" and end["errors"] == []
        assert assistant(end)["parts"][-1]["text"] == "Still here."
        assert [len(r["body"]["messages"]) for r in end["requests"]] == [1] * 5
        assert max(len(body) for body in bodies) < 1_000
        assert len(history) == 10  # the store holds the whole conversation
    else:  # the whole UI history in every body: past 1 MiB the cap refuses the send
        assert len(bodies[-1]) > 1024 * 1024
        assert end["status"] == "error" and "larger than 1048576 bytes" in end["error"]
        assert len(history) == 8
    assert len(json.dumps(end["messages"])) > 1024 * 1024
