"""The encoder's streams read by the real AI SDK chat engine (``ai`` 6.0 under node).

No server: ``chat_client.mjs`` answers each request with canned bodies, the encoder's bytes
for real runs, so these check the protocol itself: the message the client builds, the
request ``addToolApprovalResponse`` sends (read back with ``parse_ui_chat``), and replays.
"""

from __future__ import annotations

from typing import Any

from agent_sync import Agent
from agent_sync.testing import ScriptedModel
from agent_sync.web._ui_request import ApprovalResponse, parse_ui_chat
from tests.aisdk._node import ChatClient, aisdk_client

from .test_ui_stream import MIXED_CALL, RUN, approval_id, encode, paused_run, read, record

__all__ = ["aisdk_client"]  # the fixture


def assistant(line: dict[str, Any]) -> dict[str, Any]:
    """The last message of a checkpoint, which must be the run's assistant message."""
    message: dict[str, Any] = line["messages"][-1]
    assert message["role"] == "assistant" and message["id"] == RUN
    return message


def test_a_tool_run(aisdk_client: ChatClient) -> None:
    agent = Agent(
        ScriptedModel(
            [{"tool_calls": [{"id": "t1", "name": "read", "input": {"path": "a"}}]}, "It says a."]
        ),
        tools=[read],
    )
    canned = [encode(record(agent.stream("read a"))).decode()]
    (end,) = aisdk_client.run(
        {"chat_id": "c1", "canned": canned, "actions": [{"do": "send", "text": "read a"}]}
    )

    assert end["status"] == "ready" and end["errors"] == []
    assert assistant(end)["parts"] == [
        {"type": "step-start"},
        {
            "type": "tool-read",
            "toolCallId": "t1",
            "state": "output-available",
            "input": {"path": "a"},
            "output": "contents of a",
        },
        {"type": "step-start"},
        {"type": "text", "text": "It says a.", "state": "done"},
    ]


def test_approval_round_trip(aisdk_client: ChatClient) -> None:
    agent, records = paused_run([MIXED_CALL, "Done."])
    first = encode(records, end="paused").decode()
    decided = approval_id(records)
    more = record(agent.resume_stream({decided: True}))
    second = encode(records + more, start=len(records)).decode()

    paused, end = aisdk_client.run(
        {
            "chat_id": "c1",
            "canned": [first, second],
            "actions": [
                {"do": "send", "text": "tidy up"},
                {"do": "wait"},
                {"do": "print", "label": "paused"},
                {"do": "approve", "approved": True},
            ],
        }
    )

    tools = [p for p in assistant(paused)["parts"] if p["type"].startswith("tool-")]
    assert tools == [
        {
            "type": "tool-delete",
            "toolCallId": "call_delete",
            "state": "approval-requested",
            "input": {"path": "b"},
            "approval": {"id": decided},
        }
    ]
    # lastAssistantMessageIsCompleteWithApprovalResponses sent the decision by itself
    sent = end["requests"][-1]["body"]
    request = parse_ui_chat(sent)
    assert request.conversation_id == "c1" and request.message_id == RUN
    assert request.approvals == {decided: ApprovalResponse(True, None)}

    parts = assistant(end)["parts"]
    states = {p["toolCallId"]: (p["state"], p.get("output")) for p in parts if "toolCallId" in p}
    assert states == {
        "call_delete": ("output-available", "deleted b"),
        "call_read": ("output-available", "contents of a"),
    }
    assert parts[-1] == {"type": "text", "text": "Done.", "state": "done"}
    assert [m["role"] for m in end["messages"]] == ["user", "assistant"]


def test_a_denial_with_its_reason(aisdk_client: ChatClient) -> None:
    agent, records = paused_run([MIXED_CALL, "Left it."])
    decided = approval_id(records)
    more = record(agent.resume_stream({decided: False}), denied={"call_delete"})
    canned = [
        encode(records, end="paused").decode(),
        encode(records + more, start=len(records)).decode(),
    ]

    (end,) = aisdk_client.run(
        {
            "chat_id": "c1",
            "canned": canned,
            "actions": [
                {"do": "send", "text": "tidy up"},
                {"do": "wait"},
                {"do": "approve", "approved": False, "reason": "keep it"},
            ],
        }
    )

    request = parse_ui_chat(end["requests"][-1]["body"])
    assert request.approvals == {decided: ApprovalResponse(False, "keep it")}
    (delete_part,) = [p for p in assistant(end)["parts"] if p.get("toolCallId") == "call_delete"]
    assert delete_part["state"] == "output-denied"


def test_errors_and_transient_data(aisdk_client: ChatClient) -> None:
    records: list[dict[str, Any]] = [
        {"type": "retry", "attempt": 1, "delay": 0.5, "error": "ModelThrottledError: busy"},
        {"type": "text", "text": "partial"},
        {"type": "error", "error": "ModelHTTPError", "message": "the provider said no"},
    ]
    (end,) = aisdk_client.run(
        {
            "chat_id": "c1",
            "canned": [encode(records).decode()],
            "actions": [{"do": "send", "text": "hi"}, {"do": "wait", "expect": "error"}],
        }
    )

    assert end["status"] == "error" and end["error"] == "the provider said no"
    assert end["data"] == [
        {
            "type": "data-agent-sync",
            "data": {
                "event": "retry",
                "attempt": 1,
                "delay": 0.5,
                "error": "ModelThrottledError: busy",
            },
            "transient": True,
        }
    ]
    assert assistant(end)["parts"][-1] == {"type": "text", "text": "partial", "state": "done"}


def test_a_replay_after_a_reload_rebuilds_one_message(aisdk_client: ChatClient) -> None:
    agent = Agent(ScriptedModel(["Hello there, how are you?"]))
    whole = encode(record(agent.stream("hi"))).decode()

    (end,) = aisdk_client.run(
        {
            "chat_id": "c1",
            "canned": [whole, whole],
            "actions": [
                {"do": "send", "text": "hi"},
                {"do": "wait"},
                {"do": "reload", "keep": "all"},
                {"do": "resume"},
            ],
        }
    )

    assert end["requests"][-1]["method"] == "GET"
    assert end["requests"][-1]["url"].endswith("/c1/stream")
    assert [m["role"] for m in end["messages"]] == ["user", "assistant"]
    assert assistant(end)["parts"][-1]["text"] == "Hello there, how are you?"
