"""Reviewers' decisions as the routes receive them, read at the edge (one rule for every
route that takes them: ``POST /runs/<id>/decisions`` and the AG-UI resume entries).

A decision is ``true``, ``false`` or ``{"approved": bool, "input"?, "reason"?, "data"?}``.
Nothing here is trusted beyond its shape: ``agent.resume_stream`` checks each one against
the run's stored pending approvals (a client cannot answer a call never asked about).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._decisions import Approve, Decision, Deny
from ._http import BadRequest, check_id, optional_str

__all__ = ["DECISION_SCHEMA", "parse_decision", "parse_decisions"]

DECISION_SCHEMA: Final[dict[str, Any]] = {
    "oneOf": [
        {"type": "boolean"},
        {
            "type": "object",
            "properties": {
                "approved": {"type": "boolean"},
                "input": {"type": "object"},
                "reason": {"type": "string"},
                "data": {"type": "object"},
            },
            "required": ["approved"],
            "additionalProperties": False,
        },
    ]
}
"""The JSON Schema of one decision (what :func:`parse_decision` takes)."""


def parse_decisions(data: Mapping[str, Any]) -> dict[str, Decision]:
    """``{"decisions": {approval_id: decision}}`` as decisions.

    Raises:
        BadRequest: Not that shape.
    """
    raw = data.get("decisions")
    if not isinstance(raw, dict):
        raise BadRequest("'decisions' must be an object: approval id -> decision")
    return {approval_id: parse_decision(approval_id, value) for approval_id, value in raw.items()}


def parse_decision(approval_id: str, value: Any) -> Decision:
    """One decision for ``approval_id`` (a checked id).

    Raises:
        BadRequest: A malformed id or decision.
    """
    check_id(approval_id, "approval id")
    if isinstance(value, bool):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("approved"), bool):
        raise BadRequest(
            f"decision {approval_id!r} must be true, false or "
            '{"approved": bool, "input"?, "reason"?, "data"?}'
        )
    unknown = set(value) - {"approved", "input", "reason", "data"}
    if unknown:
        raise BadRequest(f"decision {approval_id!r} has unknown fields {sorted(unknown)}")
    extra = value.get("data")
    if extra is not None and not isinstance(extra, dict):
        raise BadRequest(f"decision {approval_id!r}: 'data' must be an object")
    if value["approved"]:
        given = value.get("input")
        if given is not None and not isinstance(given, dict):
            raise BadRequest(f"decision {approval_id!r}: 'input' must be an object")
        return Approve(input=given, data=extra)
    return Deny(reason=optional_str(value, "reason") or "", data=extra)
