"""Checking a human's decisions against a paused run's approval requests, at the edge.

:func:`check_decisions` is the one place that decides whether ``resume(decisions)`` may go
on: every pending request answered (expired ones are answered ``Deny("approval expired")``
whatever was sent), nothing unknown, each answer a ``bool``, ``Approve`` or ``Deny``, a
replaced input valid for the tool, and decision data valid for the request's
``decision_schema`` (checked with ``jsonschema``, every keyword, by the same validator as
tool input: :mod:`agent_sync._jsonschema`). Anything wrong raises
:class:`~agent_sync.errors.DecisionValidationError` listing every problem, and nothing runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .. import _jsonschema
from .._decisions import Approve, Deny
from .._run_state import RunState
from ..errors import DecisionValidationError, UsageError
from ..tools.decorator import Tool

__all__ = ["EXPIRED_REASON", "check_decisions"]

EXPIRED_REASON = "approval expired"


def check_decisions(
    state: RunState, tools: Mapping[str, Tool[Any]], decisions: object
) -> dict[str, Approve | Deny]:
    """The decisions as ``toolUseId`` -> ``Approve``/``Deny`` (a paused sub-agent's
    requests, which the run carries for its child: request id -> decision), or raise.

    Raises:
        DecisionValidationError: Missing, unknown or invalid decisions (all listed).
    """
    if not isinstance(decisions, Mapping):
        raise DecisionValidationError(
            [f"decisions must be a dict of request id -> decision, got {type(decisions).__name__}"]
        )
    now = time.time()
    checked: dict[str, Approve | Deny] = {}
    pending = {request.id: request for request in state.approvals}
    # an unknown id first: it usually explains the rest (a decision sent for another run)
    problems = [
        f"unknown request id {request_id!r}"
        for request_id in decisions
        if request_id not in pending
    ]
    for request_id, request in pending.items():
        tool_use = request.tool_use
        name = tool_use["name"]
        if request.expires_at is not None and now >= request.expires_at:
            own = request.run_id in (None, state.run_id)
            checked[tool_use["toolUseId"] if own else request_id] = Deny(EXPIRED_REASON)
            continue
        if request_id not in decisions:
            problems.append(f"request {request_id} ({name}) has no decision")
            continue
        decision = _normalise(decisions[request_id])
        if decision is None:
            problems.append(
                f"request {request_id}: a decision is True, False, Approve(...) or Deny(...), "
                f"got {type(decisions[request_id]).__name__}"
            )
            continue
        if request.run_id not in (None, state.run_id):  # a paused sub-agent's request:
            # checked against its schema here, against its tool when the child resumes
            problems.extend(_problems(request_id, decision, None, request.schema))
            checked[request_id] = decision
            continue
        problems.extend(_problems(request_id, decision, tools.get(name), request.schema))
        checked[tool_use["toolUseId"]] = decision
    if problems:
        raise DecisionValidationError(problems)
    return checked


def _normalise(decision: object) -> Approve | Deny | None:
    if decision is True:
        return Approve()
    if decision is False:
        return Deny()
    if isinstance(decision, (Approve, Deny)):
        return decision
    return None


def _problems(
    request_id: str, decision: Approve | Deny, tool: Tool[Any] | None, schema: Any
) -> list[str]:
    where = f"request {request_id}"
    problems: list[str] = []
    if isinstance(decision, Deny) and not isinstance(decision.reason, str):
        problems.append(f"{where}: Deny reason must be a str")
    if isinstance(decision, Approve) and decision.input is not None:
        if not isinstance(decision.input, dict):
            problems.append(f"{where}: Approve input must be a dict")
        elif tool is not None:
            problems.extend(f"{where}: {p}" for p in tool.validate_input(decision.input))
    data = decision.data
    if data is not None and not isinstance(data, dict):
        problems.append(f"{where}: decision data must be a dict")
    elif schema is not None and (isinstance(decision, Approve) or data is not None):
        problems.extend(f"{where}: {p}" for p in _data_problems(tool, schema, data or {}))
    return problems


def _data_problems(tool: Tool[Any] | None, schema: Any, data: dict[str, Any]) -> list[str]:
    """``data`` checked against the schema stored with the request (the tool's own compiled
    one when it is the same); a stored schema that cannot be used is a problem, not a crash."""
    try:
        if tool is not None:
            return tool.validate_decision_data(data, schema)
        validator = _jsonschema.compile_schema(schema, "the request's decision schema")
        return _jsonschema.problems(validator, data, "data")
    except UsageError as exc:
        return [str(exc)]
