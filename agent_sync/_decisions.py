"""Answers to a gated tool call: :class:`Approve` and :class:`Deny`.

The same two objects answer a human approval (``agent.resume``, DESIGN.md section 6) and a
``before_tool_call`` hook (section 5): ``Approve(input=...)`` lets the call run, with a
replaced input if given; ``Deny("why")`` answers it with an error ``toolResult`` carrying
the reason, and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias, Union

__all__ = ["Approve", "Decision", "Deny"]


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


Decision: TypeAlias = Union[Approve, Deny, bool]
"""``True`` is ``Approve()``, ``False`` is ``Deny()``."""
