"""The guardrails of a run, checked once and sorted by stage (DESIGN 13).

``Agent(guardrails=[...])`` and ``invoke(..., guardrails=[...])`` (added to the agent's) are
checked here, at the edge, into one :class:`GuardrailSet`; a run without guardrails holds
``None``, so its loop adds nothing per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from ..errors import UsageError
from ._checks import Guardrail
from ._pattern import PatternGuard

AnyGuard: TypeAlias = "Guardrail | PatternGuard"

STOPPED_TEXT: Final = "Stopped by guardrail"
"""The assistant text that closes a run a guardrail stopped."""

NOT_RUN_TEXT: Final = "not run: stopped by guardrail"
"""The error result of a tool call a trip kept from starting."""


@dataclass(frozen=True, slots=True)
class GuardrailSet:
    """A run's guardrails by stage, in the order given (the agent's first)."""

    all: tuple[AnyGuard, ...]

    def stage(self, stage: str) -> tuple[AnyGuard, ...]:
        """The guardrails of ``stage``, in order."""
        return tuple(guard for guard in self.all if guard.stage == stage)

    def output_patterns(self) -> tuple[PatternGuard, ...]:
        return tuple(g for g in self.all if isinstance(g, PatternGuard) and g.stage == "output")

    def output_checks(self) -> tuple[Guardrail, ...]:
        """Output checks run on each chunk in the loop's thread (no ``every``)."""
        return tuple(
            g for g in self.all
            if isinstance(g, Guardrail) and g.stage == "output" and g.every is None
        )  # fmt: skip

    def output_judges(self) -> tuple[Guardrail, ...]:
        """Output checks with ``every``: judges on worker threads, at their checkpoints."""
        return tuple(
            g for g in self.all
            if isinstance(g, Guardrail) and g.stage == "output" and g.every is not None
        )  # fmt: skip

    def has(self, stage: str) -> bool:
        return any(guard.stage == stage for guard in self.all)


def checked_guardrails(guardrails: object, base: GuardrailSet | None = None) -> GuardrailSet | None:
    """``base``'s guardrails and ``guardrails`` (a list of :class:`Guardrail` or
    :class:`PatternGuard`), or ``None`` when there are none.

    Raises:
        UsageError: ``guardrails`` is not a list of guardrails (the first bad item named).
    """
    if guardrails is None:
        return base
    if isinstance(guardrails, (str, bytes)) or not isinstance(guardrails, Sequence):
        raise UsageError(
            "guardrails must be a list of Guardrail or PatternGuard, got "
            f"{type(guardrails).__name__}"
        )
    for index, guard in enumerate(guardrails):
        if not isinstance(guard, (Guardrail, PatternGuard)):
            hint = (
                " (a plain function: wrap it with @guardrail(stage=...))" if callable(guard) else ""
            )
            raise UsageError(
                f"guardrails[{index}] must be a Guardrail or PatternGuard, got "
                f"{type(guard).__name__}{hint}"
            )
    every = (base.all if base is not None else ()) + tuple(guardrails)
    return GuardrailSet(every) if every else None
