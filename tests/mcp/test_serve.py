"""``agent_sync.mcp.serve``: an agent served over MCP, driven by the official SDK's client.

The server is ``_served_agent.py`` in a real subprocess: one over streamable HTTP (a
factory: each call its own agent) shared by this module's HTTP tests, and one over stdio
(one agent) for the stdio test. The server logs the end of each run to its stderr
(``served run ... ended: STOP (REASON)``): a cancel is checked there, by reading lines as
they come (no sleeps).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from agent_sync import Agent
from agent_sync.errors import UsageError
from agent_sync.mcp import serve
from agent_sync.mcp._serve import BUSY, MAX_PROMPT_CHARS
from agent_sync.mcp._serve_approvals import NO_ELICITATION
from agent_sync.mcp._serve_run import CLIENT_CANCELLED
from agent_sync.testing import ScriptedModel
from tests.mcp._served_agent import HELLO

SCRIPT = str(Path(__file__).with_name("_served_agent.py"))
CANCELLED_LINE = f"ended: cancelled ({CLIENT_CANCELLED})"

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


class Lines:
    """A server's stderr, read line by line in a worker thread (the loop stays free)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.seen: list[str] = []

    async def wait_for(self, text: str) -> str:
        """The next line holding ``text`` (pytest-timeout bounds the wait)."""
        while True:
            line = await anyio.to_thread.run_sync(self.stream.readline)
            assert line, f"the server's stderr ended before {text!r}: {self.seen[-20:]}"
            self.seen.append(line)
            if text in line:
                return line


class HttpServed:
    """``_served_agent.py http`` on a free port (it logs its address once bound)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "http", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        self.lines = Lines(self.process.stderr)
        self.url = ""
        while not self.url:
            line = self.process.stderr.readline()
            assert line, "the server exited before serving"
            if " serving the agent helper at " in line:
                self.url = line.split(" at ", 1)[1].strip()


@pytest.fixture(scope="module")
def http_served() -> Iterator[HttpServed]:
    served = HttpServed()
    try:
        yield served
    finally:
        served.process.send_signal(signal.SIGINT)  # serve() returns: the script logs it
        try:
            rest = served.process.communicate(timeout=30)[1]
        finally:
            served.process.kill()
        assert served.process.returncode == 0, rest
        assert "served: stopped" in rest


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def answering(action: str) -> Elicit:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert params.message == 'Allow the tool delete to run with input {"path": "/tmp/x"}?'
        return types.ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]

    return elicit


def test_http_call_answers_with_progress_carrying_the_streamed_text(
    http_served: HttpServed,
) -> None:
    reported: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, message))

    async def main() -> types.CallToolResult:
        async with Client(http_served.url) as client:
            listed = await client.list_tools()
            assert [tool.name for tool in listed.tools] == ["helper"]
            assert listed.tools[0].input_schema["required"] == ["prompt"]
            return await client.call_tool(
                "helper", {"prompt": "hello"}, progress_callback=on_progress
            )

    result = anyio.run(main)
    assert not result.is_error and text_of(result) == HELLO
    assert "".join(message or "" for _, message in reported) == HELLO
    values = [value for value, _ in reported]
    assert values == sorted(set(values)) and values[-1] == len(HELLO)


def test_http_client_cancel_stops_the_run_and_the_server_goes_on(
    http_served: HttpServed,
) -> None:
    async def main() -> types.CallToolResult:
        streaming = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            assert message == "..."
            streaming.set()

        async with Client(http_served.url) as client:
            async with anyio.create_task_group() as group:

                async def stalled() -> None:
                    await client.call_tool(
                        "helper", {"prompt": "stall"}, progress_callback=on_progress
                    )

                group.start_soon(stalled)
                await streaming.wait()  # the run is in its model call, which never ends
                group.cancel_scope.cancel()  # the SDK tells the server: notifications/cancelled
            await http_served.lines.wait_for(CANCELLED_LINE)
            return await client.call_tool("helper", {"prompt": "again"})

    after = anyio.run(main)
    assert not after.is_error and text_of(after) == "echo: again"


def test_http_bad_arguments_are_error_results_and_the_next_call_works(
    http_served: HttpServed,
) -> None:
    async def main() -> list[types.CallToolResult]:
        async with Client(http_served.url) as client:
            return [
                await client.call_tool("helper", arguments)
                for arguments in (
                    {},
                    {"prompt": 3},
                    {"prompt": None},
                    {"prompt": "x" * (MAX_PROMPT_CHARS + 1)},
                    {"prompt": "boom"},
                    {"prompt": "fine"},
                )
            ] + [await client.call_tool("helper", {"prompt": "x"}, request_state="forged")]

    *bad, boom, fine, forged = anyio.run(main)
    assert [text_of(result) for result in bad] == [
        'the argument "prompt" must be a string',
        'the argument "prompt" must be a string',
        'the argument "prompt" must be a string',
        f'the argument "prompt" is longer than {MAX_PROMPT_CHARS} characters',
    ]
    assert all(result.is_error for result in bad)
    assert boom.is_error and text_of(boom) == "ModelError: the model is down"
    assert not fine.is_error and text_of(fine) == "echo: fine"
    assert forged.is_error  # a retry whose request_state names no paused run
    assert text_of(forged) == "unknown or expired request_state: call the tool again"


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28: an input-required round
def test_http_approval_is_asked_of_the_client(http_served: HttpServed, mode: str) -> None:
    async def call(elicit: Elicit | None) -> types.CallToolResult:
        async with Client(http_served.url, mode=mode, elicitation_callback=elicit) as client:  # type: ignore[arg-type]
            return await client.call_tool("helper", {"prompt": "gated"})

    accepted = anyio.run(call, answering("accept"))
    declined = anyio.run(call, answering("decline"))
    cancelled = anyio.run(call, answering("cancel"))
    unasked = anyio.run(call, None)
    assert text_of(accepted) == "the tool said: deleted /tmp/x"
    assert "the MCP client's user chose decline" in text_of(declined)
    assert "the MCP client's user chose cancel" in text_of(cancelled)
    assert NO_ELICITATION in text_of(unasked)
    assert not any(result.is_error for result in (accepted, declined, cancelled, unasked))


def test_stdio_one_agent_serves_calls_one_at_a_time() -> None:
    read_end, write_end = os.pipe()
    errlog = os.fdopen(write_end, "w")
    lines = Lines(os.fdopen(read_end))
    parameters = StdioServerParameters(
        command=sys.executable, args=[SCRIPT, "stdio"], env=dict(os.environ)
    )
    found: dict[str, types.CallToolResult] = {}

    async def main() -> None:
        streaming = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            streaming.set()

        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            # the agent waits for this answer between two rounds: another call is refused
            found["refused"] = await client.call_tool("helper", {"prompt": "hello"})
            return types.ElicitResult(action="accept", content={})

        async with Client(
            stdio_client(parameters, errlog=errlog), elicitation_callback=elicit
        ) as client:
            found["hello"] = await client.call_tool("helper", {"prompt": "hello"})
            async with anyio.create_task_group() as group:
                stall = anyio.CancelScope()

                async def stalled() -> None:
                    with stall:
                        await client.call_tool(
                            "helper", {"prompt": "stall"}, progress_callback=on_progress
                        )

                async def waiting() -> None:
                    found["waited"] = await client.call_tool("helper", {"prompt": "hello"})

                group.start_soon(stalled)
                await streaming.wait()  # the agent runs the stalled call
                group.start_soon(waiting)
                await lines.wait_for("a call waits for the agent")
                stall.cancel()  # the stalled run ends; the waiting call gets the agent
            await lines.wait_for(CANCELLED_LINE)
            found["gated"] = await client.call_tool("helper", {"prompt": "gated"})
            found["after"] = await client.call_tool("helper", {"prompt": "after"})
        await lines.wait_for("served: stopped")  # stdin closed: serve() returned

    try:
        anyio.run(main)
    finally:
        errlog.close()
        lines.stream.close()
    assert text_of(found["hello"]) == HELLO
    assert not found["waited"].is_error and text_of(found["waited"]) == HELLO
    assert found["refused"].is_error and text_of(found["refused"]) == BUSY
    assert text_of(found["gated"]) == "the tool said: deleted /tmp/x"
    # one conversation: the cancelled run left the history valid for the next calls
    assert not found["after"].is_error and text_of(found["after"]) == "echo: after"


def test_serve_rejects_bad_arguments_before_serving() -> None:
    with pytest.raises(UsageError, match="an Agent or a callable"):
        serve(42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="transport"):
        serve(Agent(ScriptedModel(["x"])), transport="ws")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="name"):
        serve(Agent(ScriptedModel(["x"])), name="")
