"""One large answer cannot stall a connection: the stdio reader is linear in a message and
bounds it (``max_result_bytes``): past the bound the answer is dropped as it arrives and its
call ends with an error result naming the size, while the connection and the calls after
it go on."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from agent_sync import Agent, validate_history
from agent_sync.errors import MCPError, UsageError
from agent_sync.mcp import MCPServer
from agent_sync.mcp._stdio import TOO_LARGE, Lines
from agent_sync.testing import ScriptedModel
from tests.mcp.conftest import own_stdio

MB = 1024 * 1024


def big_server(**options: Any) -> MCPServer:
    return own_stdio("big", name="big", startup_timeout=120, **options)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": arguments}]}


def test_an_answer_past_the_bound_is_an_error_result_and_the_connection_goes_on() -> None:
    with big_server(max_result_bytes=MB) as server:
        connection = server._connection
        turns = [call("big", size=3 * MB), "too big", call("big", size=MB // 2), "fine"]
        agent = Agent(ScriptedModel(turns), tools=[server])
        assert agent.invoke("big").text == "too big"
        result = agent.messages[2]["content"][0]["toolResult"]
        text = result["content"][0]["text"]
        assert result["status"] == "error" and "'big'" in text
        assert "more than max_result_bytes=1048576" in text and "dropped" in text
        assert agent.invoke("smaller").text == "fine"  # the same connection, the next call
        answer = agent.messages[-2]["content"][0]["toolResult"]
        assert answer["status"] == "success" and answer["content"] == [{"text": "x" * (MB // 2)}]
        assert server._connection is connection and validate_history(agent.messages) == []


def test_a_huge_answer_under_the_default_bound_does_not_time_out_the_calls_after_it() -> None:
    # Before: the SDK's reader was quadratic in the line: 50 MB timed out every later call.
    with big_server(call_timeout=None) as server:  # a wait past 30 s would be a stall
        tools = {tool.name: tool for tool in server.tools(include=["big", "ping"])}
        big, ping = tools["big"], tools["ping"]
        with pytest.raises(
            MCPError, match="20971[0-9]* bytes, more than max_result_bytes=16777216"
        ):
            big(size=20 * MB)  # a direct call raises what a run answers as an error result
        assert ping()["content"] == [{"json": {"result": "pong"}}]
        fits = big(size=4 * MB)
        assert fits["status"] == "success" and len(fits["content"][0]["text"]) == 4 * MB


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "16MB"])
def test_max_result_bytes_is_checked(bad: Any) -> None:
    with pytest.raises(UsageError, match="max_result_bytes must be a positive int"):
        MCPServer.stdio(["server"], max_result_bytes=bad)


def feed(lines: Lines, data: bytes, size: int) -> list[Any]:
    """``data`` fed in chunks of ``size`` bytes (newlines fall anywhere in them)."""
    found: list[Any] = []
    for start in range(0, len(data), size):
        found.extend(lines.feed(data[start : start + size]))
    return found


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_lines_split_anywhere_give_the_same_messages(chunk: int) -> None:
    data = (
        b'{"jsonrpc":"2.0","id":1,"result":{"a":"x\\ny"}}\n\n'
        b'{"jsonrpc":"2.0","method":"notifications/progress","params":'
        b'{"progressToken":1,"progress":1}}\r\n'
    )
    found = feed(Lines(1000), data, chunk)
    assert [type(m.message) for m in found] == [types.JSONRPCResponse, types.JSONRPCNotification]
    assert found[0].message.result == {"a": "x\ny"}


@pytest.mark.parametrize(
    ("line", "request_id"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"text":"' + b"x" * 5000 + b'"}}', 7),
        (b'{"result":{"text":"' + b"x" * 5000 + b'"},"jsonrpc":"2.0","id":"r-8"}', "r-8"),
        (b'{"result":{"id":3,"text":"' + b"x" * 5000 + b'"},"id":9,"jsonrpc":"2.0"}', 9),
    ],
)
def test_a_dropped_answer_is_an_error_for_its_own_request(line: bytes, request_id: Any) -> None:
    lines = Lines(1000)
    (dropped, after) = feed(lines, line + b'\n{"jsonrpc":"2.0","id":10,"result":{}}\n', 333)
    assert isinstance(dropped.message, types.JSONRPCError)
    assert dropped.message.id == request_id and dropped.message.error.code == TOO_LARGE
    assert f"was {len(line)} bytes" in dropped.message.error.message
    assert after.message.id == 10  # the stream goes on after it


def test_a_dropped_message_without_a_findable_id_is_a_transport_error() -> None:
    line = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"' + b"x" * 5000
    (error,) = feed(Lines(1000), line + b'"}}\n', 4096)
    assert isinstance(error, ValueError) and "dropped" in str(error)
