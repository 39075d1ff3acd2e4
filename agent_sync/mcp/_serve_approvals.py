"""A served agent's approvals, asked of the MCP client as its protocol version allows.

* Up to protocol 2025-11-25 the server may send requests mid-call: each pending approval is
  one ``elicitation/create`` (form mode, no fields) while the call waits (:func:`ask_now`).
* From 2026-07-28 on it may not: the call answers an ``InputRequiredResult`` carrying one
  elicitation per approval and an opaque ``request_state``; the paused run waits in a
  :class:`PausedRuns` table under that key until the client retries the call with its
  answers (:func:`input_required`, :func:`decisions_from`).

Accept approves; decline, cancel, no answer or an error denies. A client that declared no
elicitation capability is not asked: each call is denied with :data:`NO_ELICITATION`.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError as SDKError

from .._decisions import ApprovalRequest, Deny
from ..agent import Agent

__all__ = [
    "NO_ELICITATION",
    "PAUSE_TTL",
    "Paused",
    "PausedRuns",
    "Decision",
    "ask_now",
    "can_elicit",
    "decisions_from",
    "input_required",
]

logger = logging.getLogger(__name__)

Decision = bool | Deny

NO_ELICITATION = "the MCP client cannot answer approvals (it declared no elicitation support)"
"""The reason of a denial when the client cannot be asked."""

PAUSE_TTL = 600.0
"""Seconds a run paused for the client's answers (2026-07-28 input-required round) waits
for the retry before it is cancelled."""

_MAX_PAUSED = 256
_SCHEMA: types.ElicitRequestedSchema = {"type": "object", "properties": {}}


def can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared form elicitation."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def describe(value: Any, limit: int = 2000) -> str:
    """``value`` as short JSON text for a question to a human."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def question(request: ApprovalRequest) -> str:
    """What the client is asked for one gated call."""
    use = request.tool_use
    return f"Allow the tool {use['name']} to run with input {describe(use['input'])}?"


def answer(result: types.ElicitResult | None) -> Decision:
    """A decision from the client's answer (``None``: no answer)."""
    if result is None:
        return Deny("the MCP client gave no answer")
    if result.action == "accept":
        return True
    return Deny(f"the MCP client's user chose {result.action}")


async def ask_now(
    ctx: ServerRequestContext[Any, Any], approvals: Sequence[ApprovalRequest]
) -> dict[str, Decision]:
    """Ask each approval by ``elicitation/create`` while the call waits (up to 2025-11-25)."""
    decisions: dict[str, Decision] = {}
    for request in approvals:
        try:
            result = await ctx.session.elicit_form(
                question(request), _SCHEMA, related_request_id=ctx.request_id
            )
        except SDKError as exc:
            logger.info("an approval could not be asked of the MCP client: %s", exc.error.code)
            decisions[request.id] = Deny("the MCP client could not be asked")
            continue
        decisions[request.id] = answer(result)
    return decisions


@dataclass(kw_only=True)
class Paused:
    """A run paused for the client's answers, between two rounds of one call."""

    agent: Agent
    approvals: tuple[ApprovalRequest, ...]
    owned: bool
    """Whether the agent is the server's single agent (its busy mark is held)."""
    expires: float


class PausedRuns:
    """Runs paused for an input-required round, by an unguessable key (the request state).

    Lives on the server's event loop (one thread): no lock. Expired runs are cancelled
    (their agent is left ready) when the table is next used.
    """

    def __init__(self) -> None:
        self._runs: dict[str, Paused] = {}

    def put(self, paused: Paused) -> str | None:
        """Keep ``paused``; its key, or ``None`` when the table is full."""
        self.sweep()
        if len(self._runs) >= _MAX_PAUSED:
            return None
        key = secrets.token_urlsafe(24)
        self._runs[key] = paused
        return key

    def take(self, key: str) -> Paused | None:
        """The run kept under ``key`` (removed), or ``None`` if unknown or expired."""
        self.sweep()
        return self._runs.pop(key, None)

    def sweep(self) -> list[Paused]:
        """Drop the expired runs (cancelled: their agents are ready again); returns them."""
        now = time.monotonic()
        gone = [key for key, paused in self._runs.items() if paused.expires <= now]
        dropped = [self._runs.pop(key) for key in gone]
        for paused in dropped:
            paused.agent.cancel("the MCP client did not answer the approvals in time")
        return dropped

    def clear(self) -> list[Paused]:
        """Cancel every kept run (the server is stopping); returns them."""
        dropped = list(self._runs.values())
        self._runs.clear()
        for paused in dropped:
            paused.agent.cancel("the MCP server stopped")
        return dropped


def input_required(approvals: Sequence[ApprovalRequest], key: str) -> types.InputRequiredResult:
    """The answer of a call whose run paused (2026-07-28): one elicitation per approval."""
    requests: types.InputRequests = {
        request.id: types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=question(request), requested_schema=_SCHEMA
            )
        )
        for request in approvals
    }
    return types.InputRequiredResult(input_requests=requests, request_state=key)


def decisions_from(
    approvals: Sequence[ApprovalRequest], responses: types.InputResponses | None
) -> dict[str, Decision]:
    """The decisions the client's retry carries (a missing answer denies)."""
    found = responses or {}
    decisions: dict[str, Decision] = {}
    for request in approvals:
        response = found.get(request.id)
        decisions[request.id] = answer(
            response if isinstance(response, types.ElicitResult) else None
        )
    return decisions
