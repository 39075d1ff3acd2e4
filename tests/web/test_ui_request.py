"""``parse_ui_chat``: the AI SDK transport's POST body, read at the edge.

The well-formed bodies are the ones ``DefaultChatTransport`` of ``ai`` 6.0 sends (captured
from it by ``tests/aisdk/chat_client.mjs``); the rest are what a hostile client could send.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent_sync.web._http import BadRequest
from agent_sync.web._ui_request import (
    MAX_MESSAGES,
    MAX_PARTS,
    MAX_REASON_CHARS,
    MAX_TEXT_CHARS,
    ApprovalResponse,
    UIChatRequest,
    is_ui_chat,
    parse_ui_chat,
)

USER: dict[str, Any] = {"parts": [{"type": "text", "text": "tidy up"}], "id": "Zq1", "role": "user"}

SUBMIT: dict[str, Any] = {"id": "c1", "messages": [USER], "trigger": "submit-message"}
"""A new user message (``messageId`` is left out: the transport sends it undefined)."""

ASSISTANT: dict[str, Any] = {
    "id": "run_1",
    "role": "assistant",
    "parts": [
        {"type": "step-start"},
        {"type": "text", "text": "Let me look.", "state": "done"},
        {
            "type": "tool-delete",
            "toolCallId": "call_delete",
            "state": "approval-responded",
            "input": {"path": "b"},
            "approval": {"id": "apr_1", "approved": True},
        },
        {
            "type": "dynamic-tool",
            "toolName": "wipe",
            "toolCallId": "call_wipe",
            "state": "approval-responded",
            "input": {},
            "approval": {"id": "apr_2", "approved": False, "reason": "not today"},
        },
        {
            "type": "tool-read",
            "toolCallId": "call_read",
            "state": "output-available",
            "input": {"path": "a"},
            "output": "contents of a",
        },
    ],
}

DECIDE: dict[str, Any] = {
    "id": "c1",
    "messages": [USER, ASSISTANT],
    "trigger": "submit-message",
    "messageId": "run_1",
}
"""What ``addToolApprovalResponse`` sends once every request is answered."""


def body(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    data.update(changes)
    return data


def test_a_user_message_starts_a_run() -> None:
    request = parse_ui_chat(SUBMIT)
    assert request == UIChatRequest(
        conversation_id="c1",
        text="tidy up",
        approvals=None,
        message_id="Zq1",
        trigger="submit-message",
        extra={},
    )


def test_approval_responses_give_the_decisions() -> None:
    request = parse_ui_chat(DECIDE)
    assert request.text is None
    assert request.message_id == "run_1"
    assert request.approvals == {
        "apr_1": ApprovalResponse(approved=True, reason=None),
        "apr_2": ApprovalResponse(approved=False, reason="not today"),
    }


def test_only_the_last_message_is_read() -> None:
    older = {"id": "old", "role": "user", "parts": [{"type": "text", "text": "ignore me"}]}
    request = parse_ui_chat(body(SUBMIT, messages=[older, ASSISTANT, USER]))
    assert request.text == "tidy up"


def test_message_id_names_the_message_read() -> None:
    later = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "later"}]}
    assert parse_ui_chat(body(DECIDE, messages=[USER, ASSISTANT, later])).approvals is not None
    # a message id not in the list (regenerate sends the removed answer's): the last one
    assert parse_ui_chat(body(SUBMIT, messageId="gone")).text == "tidy up"


def test_message_ids_are_labels_not_store_keys() -> None:
    """An app's generateId may use any printable character: message ids name no store
    key, so only the conversation and approval ids follow the strict id rule."""
    user = {**USER, "id": "msg:1/a b"}
    request = parse_ui_chat(body(SUBMIT, messageId="msg:1/a b", messages=[user]))
    assert request.message_id == "msg:1/a b" and request.text == "tidy up"


def test_text_parts_are_joined_and_other_parts_ignored() -> None:
    user = {
        "id": "u",
        "role": "user",
        "parts": [
            {"type": "text", "text": "one"},
            {"type": "data-note", "data": {"x": 1}},
            {"type": "text", "text": "two"},
        ],
    }
    assert parse_ui_chat(body(SUBMIT, messages=[user])).text == "one\ntwo"


def test_user_body_fields_are_kept_apart() -> None:
    request = parse_ui_chat(body(SUBMIT, model="small", temperature=0))
    assert request.extra == {"model": "small", "temperature": 0}


def test_is_ui_chat() -> None:
    assert is_ui_chat(SUBMIT)
    assert not is_ui_chat({"conversation_id": "c1", "message": "hi"})
    assert not is_ui_chat({"messages": "not a list"})
    assert not is_ui_chat(["messages"])


def test_resolved_approvals_are_not_decisions_again() -> None:
    done = copy.deepcopy(ASSISTANT)
    for part in done["parts"]:
        if "approval" in part:
            part["state"] = "output-available"
    with pytest.raises(BadRequest, match="approval-responded"):
        parse_ui_chat(body(DECIDE, messages=[USER, done]))


def _with_part(part: Any) -> dict[str, Any]:
    assistant = copy.deepcopy(ASSISTANT)
    assistant["parts"] = [part]
    return body(DECIDE, messages=[USER, assistant])


def _responded(approval: Any) -> dict[str, Any]:
    return {
        "type": "tool-delete",
        "toolCallId": "t",
        "state": "approval-responded",
        "approval": approval,
    }


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("no id", {"messages": [USER]}, "'id'"),
    ("id not a string", body(SUBMIT, id=7), "'id'"),
    ("empty id", body(SUBMIT, id=""), "'id'"),
    ("id too long", body(SUBMIT, id="c" * 257), "'id'"),
    ("id with a newline", body(SUBMIT, id="c1\n"), "'id'"),
    ("messages missing", {"id": "c1"}, "'messages'"),
    ("no messages", body(SUBMIT, messages=[]), "'messages'"),
    ("messages an object", body(SUBMIT, messages={"0": USER}), "'messages'"),
    ("a message not an object", body(SUBMIT, messages=[USER, "hi"]), "JSON object"),
    ("too many messages", body(SUBMIT, messages=[USER] * (MAX_MESSAGES + 1)), "at most"),
    ("trigger not a string", body(SUBMIT, trigger=["x"]), "'trigger'"),
    ("messageId not a string", body(SUBMIT, messageId=1), "'messageId'"),
    ("message id not a string", body(SUBMIT, messages=[{**USER, "id": 5}]), "'id'"),
    ("no parts", body(SUBMIT, messages=[{"id": "u", "role": "user"}]), "'parts'"),
    (
        "too many parts",
        body(
            SUBMIT, messages=[{**USER, "parts": [{"type": "text", "text": "x"}] * (MAX_PARTS + 1)}]
        ),
        "at most",
    ),
    ("a part not an object", body(SUBMIT, messages=[{**USER, "parts": ["hi"]}]), "'type'"),
    ("a part without type", body(SUBMIT, messages=[{**USER, "parts": [{"text": "hi"}]}]), "'type'"),
    (
        "text not a string",
        body(SUBMIT, messages=[{**USER, "parts": [{"type": "text", "text": 5}]}]),
        "'text'",
    ),
    (
        "blank text",
        body(SUBMIT, messages=[{**USER, "parts": [{"type": "text", "text": " \n"}]}]),
        "no text",
    ),
    (
        "huge text",
        body(
            SUBMIT,
            messages=[{**USER, "parts": [{"type": "text", "text": "x" * (MAX_TEXT_CHARS + 1)}]}],
        ),
        "longer than",
    ),
    (
        "a file",
        body(SUBMIT, messages=[{**USER, "parts": [{"type": "file", "url": "data:,x"}]}]),
        "file parts",
    ),
    ("system message", body(SUBMIT, messages=[{**USER, "role": "system"}]), "role"),
    ("no role", body(SUBMIT, messages=[{"id": "u", "parts": []}]), "role"),
    (
        "assistant, nothing answered",
        _with_part({"type": "text", "text": "hi"}),
        "approval-responded",
    ),
    ("approval missing", _with_part({**_responded(None)}), "'approval'"),
    ("approval not an object", _with_part(_responded("yes")), "'approval'"),
    ("approval id missing", _with_part(_responded({"approved": True})), "'id'"),
    ("approval id not a string", _with_part(_responded({"id": 1, "approved": True})), "'id'"),
    ("approved missing", _with_part(_responded({"id": "a"})), "approved"),
    ("approved a string", _with_part(_responded({"id": "a", "approved": "true"})), "approved"),
    ("approved a number", _with_part(_responded({"id": "a", "approved": 1})), "approved"),
    (
        "reason not a string",
        _with_part(_responded({"id": "a", "approved": False, "reason": 1})),
        "'reason'",
    ),
    (
        "huge reason",
        _with_part(
            _responded({"id": "a", "approved": False, "reason": "r" * (MAX_REASON_CHARS + 1)})
        ),
        "longer than",
    ),
]


@pytest.mark.parametrize(("data", "message"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_malformed_bodies_are_bad_requests(data: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_ui_chat(data)
    assert message in caught.value.message


def test_an_approval_answered_twice() -> None:
    assistant = copy.deepcopy(ASSISTANT)
    assistant["parts"].append({**assistant["parts"][2], "toolCallId": "other"})
    with pytest.raises(BadRequest, match="twice"):
        parse_ui_chat(body(DECIDE, messages=[USER, assistant]))


def test_a_decision_is_only_its_shape() -> None:
    """Nothing is checked against the run here: the route compares them with the store."""
    forged = _with_part(_responded({"id": "apr_made_up", "approved": True}))
    assert parse_ui_chat(forged).approvals == {"apr_made_up": ApprovalResponse(True, None)}


def test_the_request_is_frozen() -> None:
    request = parse_ui_chat(SUBMIT)
    with pytest.raises(AttributeError):
        request.text = "changed"  # type: ignore[misc]
