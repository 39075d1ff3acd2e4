"""Guardrail checks (DESIGN 13): what a check sees (``GuardView``), what it answers (``Trip``,
``Redact`` or ``None``), how it is configured (``Guardrail``, ``@guardrail``), and the record
of a trip (``GuardrailTrip``).

A check's verdict goes through :meth:`Guardrail.judge`, the one place where a check that raises
or answers something else becomes a trip (fail closed) or a pass (``on_error="pass"``, logged
once). Its reason names the exception's type only: an exception's message may quote the very
text the check was stopping, and nothing of that text may reach a log or a record.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from ..cancel import CancelToken
from ..errors import UsageError
from ..messages import Message
from ._pattern import STAGES, PatternGuard, Stage

logger = logging.getLogger(__name__)

Mode = Literal["race", "block"]
OnError = Literal["trip", "pass"]
_REASON_LIMIT: Final = 500  # characters of a reason kept in events and records


@dataclass(frozen=True, slots=True)
class Trip:
    """A check's verdict: stop the run. ``reason`` says why (it reaches events, the result
    and the store: never put the offending text in it)."""

    reason: str = "tripped"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason:
            raise UsageError("Trip(reason) must be a non-empty str")


@dataclass(frozen=True, slots=True)
class Redact:
    """A check's verdict: go on with ``text`` in place of what was checked (the output's
    pending text, the prompt, the tool input as JSON, or the tool result)."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise UsageError(f"Redact(text) must be a str, got {type(self.text).__name__}")


Verdict: TypeAlias = "Trip | Redact | None"


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardView:
    """What a check sees. Read-only; built anew for each check.

    Attributes:
        stage: ``"input"``, ``"output"``, ``"tool_call"`` or ``"tool_result"``.
        run_id: The run being checked.
        text: input: the prompt's or inject's text; output: this assistant message's text so
            far, redactions applied; tool_call: the input as JSON; tool_result: the result's
            text.
        pending: output: the part of ``text`` not released yet (else ``text``); for a judge
            (``every=N``), the text since its previous checkpoint, which it has not passed
            yet and which its ``Redact`` replaces.
        tool_name: tool_call and tool_result: the tool's name.
        tool_input: tool_call and tool_result: the tool's input.
        messages: The run's history before the subject being checked.
        cancel_token: Cancelled when the run ends, is cancelled, or another check trips: a
            check that waits (an LLM judge) should pass it on or watch it.
    """

    stage: Stage
    run_id: str
    text: str
    pending: str
    tool_name: str | None = None
    tool_input: Mapping[str, Any] | None = None
    messages: tuple[Message, ...] = ()
    cancel_token: CancelToken = field(default_factory=CancelToken)


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardrailTrip:
    """The record of a trip: ``result.guardrail``, ``RunSnapshot.guardrail`` and the done
    record's ``guardrail`` field."""

    name: str
    stage: Stage
    reason: str
    run_id: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready, as stores and SSE frames carry it."""
        return {
            "name": self.name,
            "stage": self.stage,
            "reason": self.reason,
            "run_id": self.run_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GuardrailTrip:
        """The trip :meth:`to_dict` described.

        Raises:
            UsageError: a field is missing or of the wrong type.
        """
        values = {key: data.get(key) for key in ("name", "stage", "reason", "run_id")}
        if not all(isinstance(value, str) for value in values.values()):
            raise UsageError("a GuardrailTrip dict has the str fields name, stage, reason, run_id")
        if values["stage"] not in STAGES:
            raise UsageError(f"GuardrailTrip stage must be one of {list(STAGES)}")
        return cls(**values)  # type: ignore[arg-type]


Check: TypeAlias = Callable[[GuardView], "Trip | Redact | None"]


class Guardrail:
    """A check at one stage of a run.

    Args:
        check: ``check(view) -> Trip | Redact | None``.
        stage: ``"input"``, ``"output"``, ``"tool_call"`` or ``"tool_result"``.
        name: The name a trip reports (default: the check's ``__name__``).
        mode: input only: ``"race"`` (default) calls the model at once and releases nothing
            until the check passed; ``"block"`` calls the model only after.
        every: output only: run the check on a worker thread at each ``every`` characters
            (an LLM judge): text is released only up to the latest checkpoint it and every
            earlier one passed. One thread per judge: a checkpoint that comes while the
            judge is busy waits in its queue, in order. ``None`` runs it on each chunk in
            the loop's thread (it must be fast).
        timeout: Seconds a check on a worker thread may take; past it, it trips (or passes
            with ``on_error="pass"``).
        on_error: ``"trip"`` (default, fail closed) or ``"pass"`` when the check raises or
            times out.

    Raises:
        UsageError: An argument is invalid.
    """

    __slots__ = ("check", "every", "mode", "name", "on_error", "stage", "timeout")

    def __init__(
        self,
        check: Check,
        *,
        stage: Stage,
        name: str | None = None,
        mode: Mode = "race",
        every: int | None = None,
        timeout: float = 5.0,
        on_error: OnError = "trip",
    ) -> None:
        if not callable(check):
            raise UsageError(f"Guardrail check must be callable, got {type(check).__name__}")
        if stage not in STAGES:
            raise UsageError(f"Guardrail stage must be one of {list(STAGES)}, got {stage!r}")
        if mode not in ("race", "block"):
            raise UsageError(f"Guardrail mode must be 'race' or 'block', got {mode!r}")
        if every is not None:
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise UsageError(f"Guardrail every must be None or an int >= 1, got {every!r}")
            if stage != "output":
                raise UsageError("Guardrail every= applies to the output stage only")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise UsageError(f"Guardrail timeout must be a number of seconds > 0, got {timeout!r}")
        if on_error not in ("trip", "pass"):
            raise UsageError(f"Guardrail on_error must be 'trip' or 'pass', got {on_error!r}")
        name = name if name is not None else getattr(check, "__name__", None)
        if not isinstance(name, str) or not name:
            raise UsageError("Guardrail name must be a non-empty str (the check has no __name__)")
        self.check = check
        self.stage: Stage = stage
        self.name = name
        self.mode: Mode = mode
        self.every = every
        self.timeout = float(timeout)
        self.on_error: OnError = on_error

    def __repr__(self) -> str:
        return f"Guardrail({self.name!r}, stage={self.stage!r})"

    def judge(self, view: GuardView) -> Trip | Redact | None:
        """Run the check on ``view``: its verdict, where raising (or answering anything
        but ``Trip``, ``Redact`` or ``None``) is a trip naming the exception's type, or a
        pass with ``on_error="pass"`` (logged once)."""
        try:
            verdict = self.check(view)
        except Exception as exc:  # any failure of a user's check: fail closed, or pass
            return self.failed(type(exc).__name__)
        if verdict is None or isinstance(verdict, (Trip, Redact)):
            return verdict
        return self.failed(f"answered {type(verdict).__name__}, not Trip, Redact or None")

    def failed(self, what: str) -> Trip | None:
        """The verdict for a check that failed (``what``: an exception type, "timeout")."""
        if self.on_error == "pass":
            logger.warning("guardrail=<%s>, failure=<%s> | check failed, passing", self.name, what)
            return None
        logger.warning("guardrail=<%s>, failure=<%s> | check failed, tripping", self.name, what)
        return Trip(f"guardrail {self.name} failed: {what}"[:_REASON_LIMIT])


def pattern_verdict(check: PatternGuard, text: str) -> Trip | Redact | None:
    """A :class:`PatternGuard`'s verdict on a whole text (an input, a tool call or result):
    a trip naming the pattern, the text with its matches redacted, or a pass."""
    scanned = check.scan(text)
    if scanned is None:
        return Trip(f"matched the {check.name} pattern")
    return Redact(scanned) if scanned != text else None


def guardrail(
    *,
    stage: Stage,
    name: str | None = None,
    mode: Mode = "race",
    every: int | None = None,
    timeout: float = 5.0,
    on_error: OnError = "trip",
) -> Callable[[Check], Guardrail]:
    """Make a function a :class:`Guardrail`; every argument is :class:`Guardrail`'s. For
    example, ``@guardrail(stage="output")`` over ``def no_leak(view: GuardView) -> Trip |
    Redact | None``."""
    if stage not in STAGES:  # refused at the decorator's line, not where it is applied
        raise UsageError(f"guardrail stage must be one of {list(STAGES)}, got {stage!r}")

    def make(check: Check) -> Guardrail:
        return Guardrail(
            check, stage=stage, name=name, mode=mode, every=every, timeout=timeout,
            on_error=on_error,
        )  # fmt: skip

    return make
