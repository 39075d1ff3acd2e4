"""An AG-UI ``RunAgentInput`` body, read at the edge.

The body is validated by the protocol's own model (``ag_ui.core.RunAgentInput``); then:

- ``threadId`` is the conversation id, checked as the chat routes check one;
- ``resume`` entries (AG-UI's answers to interrupts) give the decisions for the
  conversation's paused run: ``interruptId`` is the approval id; a ``resolved`` entry's
  ``payload`` is a decision as ``POST /runs/<id>/decisions`` takes one (``true``,
  ``false`` or ``{"approved", "input"?, "reason"?, "data"?}``); a ``cancelled`` entry
  denies the call;
- otherwise the last message must be the user's: its text (a string, or its text parts
  joined by newlines) starts a run. The store's history is the truth: the other messages,
  ``runId``, ``state``, ``tools`` and ``context`` are not read.

Anything malformed is a :class:`~._http.BadRequest` (400, nothing touched); the message
names the fields, never their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .._extras import missing_extra

try:
    from ag_ui.core import RunAgentInput, UserMessage
    from pydantic import ValidationError
except ImportError as exc:
    raise missing_extra("ag-ui-protocol", "agui") from exc

from .._decisions import Decision, Deny
from ._decision_input import parse_decision
from ._http import BadRequest, check_id

__all__ = ["AGUIRequest", "CANCELLED_REASON", "parse_agui"]

MAX_TEXT_CHARS: Final = 256 * 1024
"""The longest user text a request may start a run with."""
CANCELLED_REASON: Final = "the reviewer cancelled the request"
"""The denial reason of a ``cancelled`` resume entry."""
_MAX_PROBLEMS: Final = 5


@dataclass(frozen=True, kw_only=True)
class AGUIRequest:
    """What a ``RunAgentInput`` asks for: a new run, or decisions for a paused one."""

    conversation_id: str
    """``threadId``."""
    text: str | None
    """The user's text (``None`` for decisions)."""
    decisions: dict[str, Decision] | None
    """Approval id -> decision, from ``resume`` (``None`` for a new run)."""


def parse_agui(data: Mapping[str, Any]) -> AGUIRequest:
    """Read a ``RunAgentInput`` body (already parsed JSON).

    Raises:
        BadRequest: Not a ``RunAgentInput``, a bad ``threadId``, a malformed resume
            entry, or no user text to start a run with.
    """
    try:
        run_input = RunAgentInput.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)[:_MAX_PROBLEMS]
        ]
        raise BadRequest("not an AG-UI RunAgentInput: " + "; ".join(problems)) from None
    conversation_id = check_id(run_input.thread_id, "threadId")
    if run_input.resume:
        return AGUIRequest(
            conversation_id=conversation_id, text=None, decisions=_decisions(run_input)
        )
    if not run_input.messages or not isinstance(run_input.messages[-1], UserMessage):
        raise BadRequest("the last message must be the user's (or send 'resume' entries)")
    return AGUIRequest(
        conversation_id=conversation_id,
        text=_user_text(run_input.messages[-1]),
        decisions=None,
    )


def _decisions(run_input: RunAgentInput) -> dict[str, Decision]:
    decisions: dict[str, Decision] = {}
    for entry in run_input.resume or ():
        approval_id = entry.interrupt_id
        if approval_id in decisions:
            raise BadRequest(f"interrupt {approval_id!r} is answered twice")
        if entry.status == "cancelled":
            check_id(approval_id, "interruptId")
            decisions[approval_id] = Deny(reason=CANCELLED_REASON)
        elif entry.payload is None:
            raise BadRequest(f"the resolved interrupt {approval_id!r} needs a 'payload'")
        else:
            decisions[approval_id] = parse_decision(approval_id, entry.payload)
    return decisions


def _user_text(message: UserMessage) -> str:
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        texts = []
        for part in content:
            if part.type != "text":
                raise BadRequest(f"{part.type} parts are not supported: send text")
            texts.append(part.text)
        text = "\n".join(texts)
    if not text.strip():
        raise BadRequest("the user message has no text")
    if len(text) > MAX_TEXT_CHARS:
        raise BadRequest(f"the user text is longer than {MAX_TEXT_CHARS} characters")
    return text
