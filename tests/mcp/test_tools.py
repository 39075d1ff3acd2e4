"""An MCP server's tools in an agent, on both transports, against real servers: listing,
each kind of result, direct calls, lazy connect, ``include``/``prefix``, close."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from agent_sync import Agent, validate_history
from agent_sync.errors import UsageError
from agent_sync.mcp import MCPServer, MCPTool
from agent_sync.testing import ScriptedModel
from tests.mcp.conftest import EVERYTHING_JS, stdio_no_grace

EVERYTHING_TOOLS = {
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "trigger-long-running-operation",
}


def results(agent: Agent) -> list[dict[str, Any]]:
    """The toolResult bodies of the agent's last tool turn."""
    turn = agent.messages[-2]
    return [block["toolResult"] for block in turn["content"] if "toolResult" in block]


def calls(*uses: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": args} for name, args in uses]}


def test_lazy_connect_then_every_tool_with_its_schema(
    everything: tuple[MCPServer, Any],
) -> None:
    server, seen = everything
    assert not server.connected and seen.messages == []  # nothing started yet
    tools = server.tools()
    assert server.connected
    by_name = {t.name: t for t in tools}
    assert EVERYTHING_TOOLS <= set(by_name)
    echo = by_name["echo"]
    assert isinstance(echo, MCPTool) and echo.mcp_name == "echo"
    assert echo.spec["inputSchema"]["json"]["properties"]["message"]["type"] == "string"
    assert echo.spec["description"] == "Echoes back the input string"
    assert seen.methods()[0] == "initialize" or "server/discover" in seen.methods()[0]
    # the server's idempotentHint: what a run resumed after its worker died may call again
    assert echo.idempotent is True and by_name["get-tiny-image"].idempotent is True
    assert by_name["toggle-subscriber-updates"].idempotent is False


def test_an_agent_with_the_server_gets_each_kind_of_result(
    everything: tuple[MCPServer, Any],
) -> None:
    server, _ = everything
    model = ScriptedModel(
        [
            calls(
                ("echo", {"message": "hi"}),
                ("get-tiny-image", {}),
                ("get-structured-content", {"location": "Chicago"}),
                ("get-resource-links", {"count": 2}),
                ("get-sum", {"a": 1, "b": "two"}),  # invalid: checked before the call
            ),
            "done",
        ]
    )
    agent = Agent(model, tools=[server])
    assert not server.connected  # the agent connects at its first run, not when built
    result = agent.invoke("go")
    assert result.text == "done" and validate_history(agent.messages) == []
    echo, image, structured, links, bad = results(agent)
    assert echo == {"toolUseId": echo["toolUseId"], "status": "success",
                    "content": [{"text": "Echo: hi"}]}  # fmt: skip
    pieces = image["content"]
    assert pieces[0] == {"text": "Here's the image you requested:"}
    assert pieces[1]["image"]["format"] == "png"
    assert pieces[1]["image"]["source"]["bytes"].startswith(b"\x89PNG")
    assert structured["content"] == [
        {"json": {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}}
    ]  # the text copy of the structured content is not sent twice
    link_texts = [piece["text"] for piece in links["content"]]
    assert sum(t.startswith("Resource link: ") for t in link_texts) == 2
    assert any("<demo://resource/" in t for t in link_texts)
    assert bad["status"] == "error" and "input.b" in bad["content"][0]["text"]
    # the model's next request carried the tools and the results
    request = model.calls[1]
    assert {spec["name"] for spec in request.tool_specs} >= EVERYTHING_TOOLS


def test_a_tool_error_is_an_error_result(everything: tuple[MCPServer, Any]) -> None:
    server, _ = everything
    agent = Agent(ScriptedModel([calls(("no-such-tool", {})), "ok"]), tools=[server])
    agent.invoke("go")
    (result,) = results(agent)
    assert result["status"] == "error" and "no-such-tool" in result["content"][0]["text"]


def test_include_prefix_and_direct_calls(everything: tuple[MCPServer, Any]) -> None:
    server, _ = everything
    with server:
        echo, add = server.tools(include=["echo", "get-sum"], prefix="ev_")
        assert (echo.name, add.name) == ("ev_echo", "ev_get-sum")
        assert echo(message="direct") == {
            "status": "success",
            "content": [{"text": "Echo: direct"}],
        }
        agent = Agent(ScriptedModel([calls(("ev_get-sum", {"a": 2, "b": 3})), "5"]), tools=[add])
        agent.invoke("add")
        assert results(agent)[0]["content"] == [{"text": "The sum of 2 and 3 is 5."}]
        with pytest.raises(UsageError, match="has no tool 'nope'"):
            server.tools(include=["nope"])


def test_close_then_use_again_reconnects(everything: tuple[MCPServer, Any]) -> None:
    server, _ = everything
    echo = server.tools(include=["echo"])[0]
    server.close()
    assert not server.connected
    assert echo(message="again")["content"] == [{"text": "Echo: again"}]
    assert server.connected


def test_a_python_server_from_pypi(time_cmd: list[str]) -> None:
    """mcp-server-time: another real server, another SDK (the Python one) behind it."""
    with stdio_no_grace(time_cmd) as server:
        names = {t.name for t in server.tools()}
        assert names == {"get_current_time", "convert_time"}
        agent = Agent(
            ScriptedModel(
                [
                    calls(
                        (
                            "convert_time",
                            {
                                "source_timezone": "UTC",
                                "time": "12:00",
                                "target_timezone": "Asia/Tokyo",
                            },  # fmt: skip
                        )
                    ),
                    "done",
                ]
            ),
            tools=[server],
        )
        agent.invoke("what time is it in Tokyo at noon UTC?")
        (result,) = results(agent)
        assert result["status"] == "success"
        (piece,) = result["content"]  # its structured content, once (not also as text)
        converted = piece["json"] if "json" in piece else json.loads(piece["text"])
        assert converted["target"]["datetime"].endswith("21:00:00+09:00")


def test_images_reach_anthropic_and_bedrock_and_a_placeholder_reaches_openai() -> None:
    """What the providers' formats do with an image piece of a tool result."""
    from agent_sync.models._anthropic_format import _tool_result as anthropic
    from agent_sync.models._bedrock_format import _clean_tool_result as bedrock
    from agent_sync.models._openai_format import _tool_result_text as openai

    png = base64.b64decode(_TINY_PNG)
    result = {
        "toolUseId": "t1",
        "status": "success",
        "content": [{"text": "see"}, {"image": {"format": "png", "source": {"bytes": png}}}],
    }
    assert anthropic(result)["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": _TINY_PNG},
    }
    assert bedrock(result, True)["toolResult"]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": png}}
    }
    assert openai(result) == "see\n[png image not shown: this API takes no images in tool results]"


def test_bad_arguments_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="command must be a list"):
        MCPServer.stdio("node server.js")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="http:// or https://"):
        MCPServer.http("tools.example.com/mcp")
    with pytest.raises(UsageError, match="requires_approval"):
        MCPServer.stdio(["x"], requires_approval="echo")  # type: ignore[arg-type]
    assert EVERYTHING_JS.name == "index.js"


_TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="  # noqa: E501
