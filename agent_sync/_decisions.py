"""Human approval: :class:`ApprovalRequest`, and the answers :class:`Approve` and :class:`Deny`.

The same two objects answer a human approval (``agent.resume`` of a run paused on a tool
that requires approval) and a ``before_tool_call`` hook: ``Approve(input=...)`` lets the
call run, with a replaced input if given; ``Deny("why")`` answers it with an error
``toolResult`` carrying the reason, and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias, Union

from ._encodable import clean_text
from .messages import ToolUse

__all__ = [
    "ApprovalRequest",
    "Approve",
    "Decision",
    "Deny",
    "decision_from_dict",
    "decision_to_dict",
]


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """A tool call that waits for a human decision (the run is paused).

    Answer it with ``agent.resume({request.id: True | False | Approve(...) | Deny(...)})``.
    """

    id: str
    """Unique; the same in every process (it is part of the run's state)."""
    tool_use: ToolUse
    """The model's call: ``toolUseId``, ``name``, ``input``."""
    schema: dict[str, Any] | None
    """The tool's ``decision_schema`` (what ``Approve(data=...)`` must match), or ``None``."""
    expires_at: float | None
    """Epoch seconds after which the request is answered ``Deny("approval expired")``
    (``Agent(approval_timeout=...)``), or ``None``."""
    run_id: str | None = None
    """The run whose tool call waits: the paused run's own id, or a sub-agent's run
    (``agent.as_tool()``) whose request its caller carries; ``None`` in states stored by
    an older version."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (see :meth:`from_dict`)."""
        return {
            "id": self.id,
            "tool_use": dict(self.tool_use),
            "schema": self.schema,
            "expires_at": self.expires_at,
            "run_id": self.run_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApprovalRequest:
        """The request :meth:`to_dict` described."""
        return cls(
            id=data["id"],
            tool_use=data["tool_use"],
            schema=data.get("schema"),
            expires_at=data.get("expires_at"),
            run_id=data.get("run_id"),
        )


@dataclass(frozen=True)
class Approve:
    """Let a tool call run.

    Attributes:
        input: A replacement for the model's input (checked against the tool's schema),
            or ``None`` to run the call as the model asked.
        data: Extra decision fields (validated against the tool's ``decision_schema``).
    """

    input: dict[str, Any] | None = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class Deny:
    """Refuse a tool call: the model gets an error ``toolResult`` with :attr:`reason`.

    Attributes:
        reason: Why, in words the model can act on (``""``: a generic refusal).
        data: Extra decision fields (validated against the tool's ``decision_schema``).
    """

    reason: str = ""
    data: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.reason, str):  # the history and the store take encodable text only
            object.__setattr__(self, "reason", clean_text(self.reason))


Decision: TypeAlias = Union[Approve, Deny, bool]
"""``True`` is ``Approve()``, ``False`` is ``Deny()``."""


def decision_to_dict(decision: Approve | Deny) -> dict[str, Any]:
    """A JSON-ready dict of a checked decision (what a run's state keeps of it)."""
    if isinstance(decision, Approve):
        return {"approved": True, "input": decision.input, "data": decision.data}
    return {"approved": False, "reason": decision.reason, "data": decision.data}


def decision_from_dict(data: dict[str, Any]) -> Approve | Deny:
    """The decision :func:`decision_to_dict` described."""
    if data["approved"]:
        return Approve(input=data.get("input"), data=data.get("data"))
    return Deny(reason=data.get("reason") or "", data=data.get("data"))
