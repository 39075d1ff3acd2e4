"""Stop reaches the server: every way of cancelling a run ends the MCP call's task, so the
server receives ``notifications/cancelled`` for that request (recorded on its stdin, or by
a proxy in front of its HTTP endpoint); the run returns at once with a valid history; the
connection serves the next call. ``mode="after_turn"`` lets the call finish instead."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agent_sync import Agent, AgentResult, CancelToken, validate_history
from agent_sync._deadlines import schedule
from agent_sync.events import Done, ToolProgress
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores import SQLiteRunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND, cut_short_of
from tests.fixtures.processes import child_context

if TYPE_CHECKING:  # not at run time: the store's child process imports this module
    from agent_sync.mcp import MCPServer

LONG = {
    "tool_calls": [
        {"name": "trigger-long-running-operation", "input": {"duration": 600, "steps": 600}}
    ]
}
ECHO = {"tool_calls": [{"name": "echo", "input": {"message": "still here"}}]}


class Invoke:
    """``agent.invoke`` in a thread, with the moment it returned."""

    def __init__(self, agent: Agent, **kwargs: Any) -> None:
        self.value: AgentResult | None = None
        self.returned_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(agent, kwargs), daemon=True)
        self._thread.start()

    def _run(self, agent: Agent, kwargs: dict[str, Any]) -> None:
        try:
            self.value = agent.invoke("go", **kwargs)
        finally:
            self.returned_at = time.perf_counter()

    def result(self) -> AgentResult:
        self._thread.join(30)
        assert self.value is not None, "invoke() raised or did not return"
        return self.value


def call_of(seen: Any, name: str) -> dict[str, Any]:
    """The ``tools/call`` request for ``name`` the server received (waits for it)."""
    return seen.wait_for(  # type: ignore[no-any-return]
        lambda m: m.get("method") == "tools/call" and m["params"]["name"] == name, 30
    )


def cancelled_notice(seen: Any, request_id: Any) -> dict[str, Any]:
    """The server's ``notifications/cancelled`` for ``request_id`` (waits for it)."""
    return seen.wait_for(  # type: ignore[no-any-return]
        lambda m: (
            m.get("method") == "notifications/cancelled" and m["params"]["requestId"] == request_id
        ),
        30,
    )


@contextmanager
def deadlines_held() -> Iterator[threading.Event]:
    """Hold the process's deadline thread until the event is set (or the block ends).

    Its callbacks run one at a time, so a run's ``timeout=`` that falls due meanwhile fires
    at the release, never before: the deadline a test gives a run can then be short and
    still cannot fire before the call it is about reached the server, however slow the
    machine is."""
    release, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(HANG_BOUND)

    schedule(0, hold)
    assert holding.wait(HANG_BOUND), "the deadline thread did not run the hold"
    try:
        yield release
    finally:
        release.set()


def assert_cancelled_and_usable(agent: Agent, server: MCPServer, result: AgentResult) -> None:
    assert result.stop_reason == "cancelled"
    turn = agent.messages[-2]["content"]
    assert turn[0]["toolResult"]["status"] == "error"
    assert turn[0]["toolResult"]["content"] == [{"text": CANCELLED_TEXT}]
    assert validate_history(agent.messages) == []
    # the same connection serves the next call
    connection = server._connection
    again = Agent(ScriptedModel([ECHO, "ok"]), tools=[server]).invoke("again")
    assert again.text == "ok" and server._connection is connection


@pytest.mark.parametrize("how", ["thread", "timeout", "token"])
def test_a_cancel_reaches_the_server_and_the_run_returns_at_once(
    everything: tuple[MCPServer, Any], how: str
) -> None:
    server, seen = everything
    server.connect()
    agent = Agent(ScriptedModel([LONG, "never"]), tools=[server])
    token = CancelToken()
    # the deadline falls due at once but fires only once the call is at the server
    kwargs: dict[str, Any] = {"timeout": 0.01} if how == "timeout" else {"cancel": token}
    with deadlines_held() as release:
        run = Invoke(agent, **kwargs)
        request = call_of(seen, "trigger-long-running-operation")
        release.set()
    cancelled_at = time.perf_counter()
    if how == "thread":
        assert agent.cancel("stop") is True
    elif how == "token":
        assert token.cancel("client gone") is True
    result = run.result()
    notice = cancelled_notice(seen, request["id"])
    if how != "timeout":  # a deadline's own moment is not ours to measure from here
        assert run.returned_at - cancelled_at < cut_short_of(600)  # the operation's 600 s
    assert (
        result.cancel_reason
        == {"thread": "stop", "timeout": "timeout", "token": "client gone"}[how]
    )
    assert notice["params"]["requestId"] == request["id"]
    assert_cancelled_and_usable(agent, server, result)


def _cancel_from_store(path: str, run_id: str) -> None:
    """Another process: the store's cancel of a run it does not own."""
    store = SQLiteRunStore(path)
    assert store.cancel(run_id, "stop from another process") is True


def test_a_store_cancel_from_another_process_reaches_the_server(
    everything: tuple[MCPServer, Any], tmp_path: Path
) -> None:
    server, seen = everything
    path = str(tmp_path / "runs.db")
    agent = Agent(
        ScriptedModel([LONG, "never"]),
        tools=[server],
        store=SQLiteRunStore(path),
        conversation_id="c1",
    )
    run = Invoke(agent)
    request = call_of(seen, "trigger-long-running-operation")
    assert agent.active_run is not None
    other = child_context().Process(target=_cancel_from_store, args=(path, agent.active_run.run_id))
    other.start()
    other.join(60)
    assert other.exitcode == 0
    result = run.result()
    cancelled_notice(seen, request["id"])
    assert result.cancel_reason == "stop from another process"
    logged = list(SQLiteRunStore(path).load("c1").messages)
    assert validate_history(logged) == []
    assert_cancelled_and_usable(agent, server, result)


def test_after_turn_lets_the_call_finish_and_tells_the_server_nothing(
    everything: tuple[MCPServer, Any],
) -> None:
    server, seen = everything
    # ten steps of 30 ms: asked at the first step's progress, the cancel comes while the
    # server still runs the call, and always before the run has taken its answer in
    short = {
        "tool_calls": [
            {"name": "trigger-long-running-operation", "input": {"duration": 0.3, "steps": 10}}
        ]
    }
    model = ScriptedModel([short, "never"])
    agent = Agent(model, tools=[server])
    result: AgentResult | None = None
    for event in agent.stream("go"):
        if isinstance(event, ToolProgress) and event.progress == 1:
            assert agent.cancel("after this", mode="after_turn") is True
        elif isinstance(event, Done):
            result = event.result
    assert result is not None
    assert result.stop_reason == "cancelled" and result.cancel_reason == "after this"
    (piece,) = agent.messages[2]["content"][0]["toolResult"]["content"]
    assert piece["text"].startswith("Long running operation completed")
    assert len(model.calls) == 1  # stopped before the next model call
    call_of(seen, "trigger-long-running-operation")
    assert "notifications/cancelled" not in seen.methods()
    assert validate_history(agent.messages) == []
