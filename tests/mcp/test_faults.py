"""Faults never hang a run: a child that exits or is killed, an HTTP server that goes away,
a call that is never answered, a server that does not start, or starts slowly. Clear errors
(the end of a stdio child's stderr, secrets masked), in-flight calls answered with error
results, a new connection at the next use, and no process left behind by close()."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, validate_history
from agent_sync.errors import MCPError, UsageError
from agent_sync.mcp import MCPServer
from agent_sync.mcp._endpoint import SHUTDOWN_TIMEOUT
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import cut_short_of
from tests.fixtures.garbage import collect_garbage
from tests.mcp._recording import RecordingProxy, TeeRecorder
from tests.mcp.conftest import OWN_SERVER, HttpEverything, own_stdio, stdio_no_grace
from tests.mcp.test_cancel import LONG, Invoke, call_of, cancelled_notice

SECRET = "open-sesame-4711"  # not shaped like any known key: masked because of its name


SILENT_SERVER = str(Path(__file__).with_name("_silent_server.py"))


def own(mode: str) -> list[str]:
    """The command of our own server in ``mode`` (``_own_server.py``, or for ``mute`` and
    ``deaf`` ``_silent_server.py``, which never imports the SDK)."""
    return [sys.executable, SILENT_SERVER if mode in ("mute", "deaf") else OWN_SERVER, mode]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": arguments}]}


def only_result(agent: Agent) -> dict[str, Any]:
    (block,) = agent.messages[2]["content"]
    return block["toolResult"]  # type: ignore[no-any-return]


def gone(pid: int) -> bool:
    """The process no longer exists (exited and reaped: a zombie still answers kill 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_that_exits_mid_call_answers_with_its_stderr_and_is_restarted() -> None:
    server = own_stdio("crash", env={"API_KEY": SECRET}, name="crashy")
    try:
        agent = Agent(
            ScriptedModel([call("crash"), "it died", call("ping"), "back"]), tools=[server]
        )
        assert agent.invoke("go").text == "it died"
        result = only_result(agent)
        text = result["content"][0]["text"]
        assert result["status"] == "error"
        assert "MCP server 'crashy'" in text and "connection was lost" in text
        assert "last words" in text  # the end of its stderr
        assert SECRET not in text and "fatal: bad key ***" in text
        assert validate_history(agent.messages) == []
        assert agent.invoke("again").text == "back"  # a new child at the next use
        assert agent.messages[-2]["content"][0]["toolResult"]["status"] == "success"
    finally:
        server.close()


def test_a_killed_child_fails_the_call_in_flight_and_close_leaves_no_process(
    everything_cmd: list[str], recorder: TeeRecorder
) -> None:
    server = MCPServer.stdio(recorder.wrap(everything_cmd), name="everything")
    agent = Agent(
        ScriptedModel([LONG, "it died", call("echo", message="hi"), "back"]), tools=[server]
    )
    run = Invoke(agent)
    call_of(recorder, "trigger-long-running-operation")
    first = recorder.processes[0]
    os.kill(first["server_pid"], signal.SIGKILL)
    assert run.result().text == "it died"
    result = only_result(agent)
    assert result["status"] == "error" and "connection was lost" in result["content"][0]["text"]
    assert agent.invoke("again").text == "back"
    second = recorder.processes[1]
    assert second["tee_pid"] != first["tee_pid"]
    server.close()
    assert gone(first["tee_pid"]) and gone(second["tee_pid"]) and gone(second["server_pid"])


def test_a_call_never_answered_times_out_and_the_server_is_told(recorder: TeeRecorder) -> None:
    with stdio_no_grace(recorder.wrap(own("hang")), call_timeout=1.0, name="hang") as server:
        agent = Agent(
            ScriptedModel([call("hang"), "gave up", call("ping"), "pong"]), tools=[server]
        )
        assert agent.invoke("go").text == "gave up"
        text = only_result(agent)["content"][0]["text"]
        assert "no answer within 1 s (call_timeout)" in text and "'hang'" in text
        request = call_of(recorder, "hang")
        cancelled_notice(recorder, request["id"])
        assert agent.invoke("again").text == "pong"  # the connection still serves


def test_a_server_that_never_starts_is_an_error_and_leaves_no_process(
    recorder: TeeRecorder,
) -> None:
    # deaf: it does not even see its stdin close, so only the kill ends it
    server = MCPServer.stdio(
        recorder.wrap(own("deaf")), startup_timeout=1.0, shutdown_timeout=0, name="mute"
    )
    agent = Agent(ScriptedModel(["never"]), tools=[server])
    with pytest.raises(MCPError, match=r"'mute' could not be started: .*1 s \(startup_timeout\)"):
        agent.invoke("go")
    # the connect is the run's first act: it failed as a model call does, the prompt kept
    assert not agent.is_running and agent.messages == [
        {"role": "user", "content": [{"text": "go"}]}
    ]
    recorder.wait_for(lambda m: m.get("method") in ("initialize", "server/discover"), 30)
    (processes,) = recorder.processes
    assert gone(processes["tee_pid"]) and gone(processes["server_pid"])


def test_close_gives_a_server_that_does_not_exit_shutdown_timeout_then_terminates_it(
    recorder: TeeRecorder,
) -> None:
    server = MCPServer.stdio(recorder.wrap(own("stubborn")), shutdown_timeout=0)
    with server:
        assert {t.name for t in server.tools()} >= {"ping"}
        started = time.perf_counter()
    # it ignores its stdin's end: the SDK's 2 s grace would be waited in full
    assert time.perf_counter() - started < cut_short_of(SHUTDOWN_TIMEOUT)
    (processes,) = recorder.processes
    assert gone(processes["tee_pid"]) and gone(processes["server_pid"])


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "2"])
def test_shutdown_timeout_must_be_finite_seconds(bad: Any) -> None:
    with pytest.raises(UsageError, match="shutdown_timeout"):
        MCPServer.stdio(["my-server"], shutdown_timeout=bad)


def test_a_slow_start_within_startup_timeout_works() -> None:
    server = own_stdio("slow", env={"SLOW_START": "1.5"}, startup_timeout=30)
    with server:
        assert {t.name for t in server.tools()} >= {"ping"}


def test_a_command_that_cannot_start_is_a_clear_error() -> None:
    server = MCPServer.stdio(["/nonexistent/mcp-server", "--token", SECRET], name="missing")
    with pytest.raises(MCPError, match="'missing' could not be started") as caught:
        server.connect()
    assert "nonexistent" in str(caught.value) or "No such file" in str(caught.value)
    assert not server.connected


def test_an_http_server_that_goes_away_fails_the_call_and_is_reached_again(node: str) -> None:
    first = HttpEverything(node)
    proxy = RecordingProxy(first.port)  # forwards to that port, whoever listens there
    server = MCPServer.http(proxy.url, headers={"Authorization": f"Bearer {SECRET}"}, name="web")
    turns = [LONG, "it went away", call("echo", message="hi"), "still down"]
    agent = Agent(ScriptedModel([*turns, call("echo", message="hi"), "back"]), tools=[server])
    second: HttpEverything | None = None
    try:
        run = Invoke(agent)
        call_of(proxy, "trigger-long-running-operation")  # in flight
        first.kill()
        assert run.result().text == "it went away"
        text = only_result(agent)["content"][0]["text"]
        assert "MCP server 'web'" in text and "connection was lost" in text
        assert SECRET not in text
        # still down: the run goes on with the tools it had, the call says why it failed
        assert agent.invoke("now?").text == "still down"
        down = agent.messages[-2]["content"][0]["toolResult"]
        assert down["status"] == "error" and "could not be started" in down["content"][0]["text"]
        second = HttpEverything(node, port=first.port)  # the server is back
        assert agent.invoke("again").text == "back"
        assert agent.messages[-2]["content"][0]["toolResult"]["content"] == [{"text": "Echo: hi"}]
        assert SECRET not in repr(server)
    finally:
        server.close()
        proxy.close()
        if second is not None:
            second.kill()


def test_a_server_echoing_its_secret_env_gets_it_masked(everything_cmd: list[str]) -> None:
    with stdio_no_grace(everything_cmd, env={"API_KEY": SECRET}) as server:
        agent = Agent(ScriptedModel([call("get-env"), "ok"]), tools=[server])
        agent.invoke("show me your environment")
        shown = str(only_result(agent)["content"])
        assert "API_KEY" in shown and SECRET not in shown and "***" in shown


def test_a_server_dropped_without_close_ends_its_connection_and_child(
    everything_cmd: list[str], recorder: TeeRecorder
) -> None:
    server = stdio_no_grace(recorder.wrap(everything_cmd))
    server.connect()
    assert server._connection is not None
    loop_thread = server._connection._thread  # not a reference to the server
    del server
    collect_garbage()
    loop_thread.join(30)
    assert not loop_thread.is_alive()
    (processes,) = recorder.processes
    assert gone(processes["tee_pid"]) and gone(processes["server_pid"])
