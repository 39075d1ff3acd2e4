"""The AI SDK chat transport's request body, read at the edge.

``DefaultChatTransport`` POSTs ``{"id", "messages", "trigger", "messageId", ...}`` (plus
the fields of its ``body`` option, at the top level): the whole conversation as the
browser holds it. The store's history is the truth, so only one message is read: the one
named by ``messageId`` if it is in the list (a continuation after approvals names the
assistant message), else the last one.

- A ``user`` message: its ``text`` parts, joined by newlines, start a run.
- An ``assistant`` message: its tool parts in state ``approval-responded`` give the
  decisions, by ``approval.{id, approved, reason}``.

Nothing here is trusted beyond its shape: the route checks each decision against the
stored pending approvals, so a client cannot approve a call that was never asked about.
Anything malformed is a :class:`~._http.BadRequest` (answered 400, nothing touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from ._http import BadRequest, check_label, optional_str, required_str

__all__ = ["ApprovalResponse", "UIChatRequest", "is_ui_chat", "parse_ui_chat"]

MAX_MESSAGES: Final = 10_000
"""The most messages a request may carry (the body is capped at 1 MiB anyway)."""

MAX_PARTS: Final = 1_000
"""The most parts the message read may have (a long agentic answer has many)."""

MAX_TEXT_CHARS: Final = 256 * 1024
"""The longest user text a request may start a run with."""

MAX_REASON_CHARS: Final = 4_000
"""The longest reason a decision may carry (it goes to the model)."""

_TRANSPORT_FIELDS: Final = frozenset({"id", "messages", "trigger", "messageId"})


class ApprovalResponse(NamedTuple):
    """A reviewer's answer to one approval request, as the client sent it."""

    approved: bool
    """``True`` to let the call run."""
    reason: str | None
    """Why (shown to the model for a denial), if given."""


@dataclass(frozen=True, kw_only=True)
class UIChatRequest:
    """What an AI SDK chat request asks for: a new run, or decisions for a paused one."""

    conversation_id: str
    """The chat id (``id``): the conversation."""
    text: str | None
    """The user's text: start a run with it (``None`` for decisions)."""
    approvals: Mapping[str, ApprovalResponse] | None
    """Approval id -> answer, from an assistant message (``None`` for a new run)."""
    message_id: str | None = None
    """The id of the message read (the run id, for an assistant message this server
    wrote)."""
    trigger: str | None = None
    """``submit-message``, ``regenerate-message``, ... as sent."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The other top-level fields (the transport's ``body`` option)."""


def is_ui_chat(data: object) -> bool:
    """Whether a JSON body is the AI SDK transport's (it has a ``messages`` list)."""
    return isinstance(data, Mapping) and isinstance(data.get("messages"), list)


def parse_ui_chat(data: Mapping[str, Any]) -> UIChatRequest:
    """Read an AI SDK chat request body (already parsed JSON).

    Raises:
        BadRequest: A missing or malformed field, no messages, too many of them, or a
            message read that is neither user text nor approval responses.
    """
    conversation_id = required_str(data, "id", is_id=True)
    trigger = optional_str(data, "trigger")
    if trigger is not None:
        check_label(trigger, "trigger")
    wanted = optional_str(data, "messageId")
    if wanted is not None:
        check_label(wanted, "messageId")
    message = _message_to_read(data.get("messages"), wanted)
    message_id = message.get("id")
    if message_id is not None:
        if not isinstance(message_id, str):
            raise BadRequest("a message's 'id' must be a string")
        check_label(message_id, "message id")
    parts = _parts(message)
    role = message.get("role")
    text: str | None = None
    approvals: dict[str, ApprovalResponse] | None = None
    if role == "user":
        text = _user_text(parts)
    elif role == "assistant":
        approvals = _approvals(parts)
    else:
        raise BadRequest("the message read must have role 'user' or 'assistant'")
    return UIChatRequest(
        conversation_id=conversation_id,
        text=text,
        approvals=approvals,
        message_id=message_id,
        trigger=trigger,
        extra={k: v for k, v in data.items() if k not in _TRANSPORT_FIELDS},
    )


def _message_to_read(messages: object, wanted: str | None) -> Mapping[str, Any]:
    """The message named ``wanted`` if the list has it, else the last."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"'messages' may hold at most {MAX_MESSAGES} messages")
    if not all(isinstance(message, Mapping) for message in messages):
        raise BadRequest("every message must be a JSON object")
    checked: list[Mapping[str, Any]] = messages
    named = [message for message in checked if wanted is not None and message.get("id") == wanted]
    return (named or checked)[-1]


def _parts(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise BadRequest("the message's 'parts' must be a list")
    if len(parts) > MAX_PARTS:
        raise BadRequest(f"a message may have at most {MAX_PARTS} parts")
    for part in parts:
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise BadRequest("every part must be a JSON object with a string 'type'")
    return parts


def _user_text(parts: list[Mapping[str, Any]]) -> str:
    texts: list[str] = []
    for part in parts:
        kind = part["type"]
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise BadRequest("a text part's 'text' must be a string")
            texts.append(text)
        elif kind == "file":
            raise BadRequest("file parts are not supported: send text")
    text = "\n".join(texts)
    if not text.strip():
        raise BadRequest("the user message has no text")
    if len(text) > MAX_TEXT_CHARS:
        raise BadRequest(f"the user text is longer than {MAX_TEXT_CHARS} characters")
    return text


def _approvals(parts: list[Mapping[str, Any]]) -> dict[str, ApprovalResponse]:
    approvals: dict[str, ApprovalResponse] = {}
    for part in parts:
        kind = part["type"]
        is_tool = kind == "dynamic-tool" or kind.startswith("tool-")
        if not is_tool or part.get("state") != "approval-responded":
            continue
        approval = part.get("approval")
        if not isinstance(approval, Mapping):
            raise BadRequest("an 'approval-responded' tool part must have an 'approval' object")
        approval_id = required_str(approval, "id", is_id=True)
        approved = approval.get("approved")
        if not isinstance(approved, bool):
            raise BadRequest("'approval.approved' must be true or false")
        reason = optional_str(approval, "reason")
        if reason is not None and len(reason) > MAX_REASON_CHARS:
            raise BadRequest(f"'approval.reason' is longer than {MAX_REASON_CHARS} characters")
        if approval_id in approvals:
            raise BadRequest(f"approval {approval_id!r} is answered twice")
        approvals[approval_id] = ApprovalResponse(approved, reason)
    if not approvals:
        raise BadRequest(
            "the assistant message has no tool part in state 'approval-responded': "
            "send a user message or approval responses"
        )
    return approvals
