"""Guardrails: checks that gate what leaves a run and stop it when they trip (DESIGN 13).

::

    from agent_sync import Agent
    from agent_sync.guardrails import PatternGuard

    agent = Agent(model, guardrails=[PatternGuard(r"sk-[A-Za-z0-9]{20,}")])
    result = agent.invoke("...")
    if result.stop_reason == "guardrail":
        print(result.guardrail.name, result.guardrail.reason)

A check returns ``None`` (pass), :class:`Trip` (stop the run) or :class:`Redact` (go on
with other text). Streamed output is released only as far as every output check passed
it; a trip stops the run through the cancel path and leaves a valid history ending
"Stopped by guardrail". See ``docs/guardrails.md``.
"""

from __future__ import annotations

from ._guardrails._checks import Guardrail, GuardrailTrip, GuardView, Redact, Trip, guardrail
from ._guardrails._pattern import PatternGuard
from ._guardrails._set import STOPPED_TEXT

__all__ = [
    "STOPPED_TEXT",
    "GuardView",
    "Guardrail",
    "GuardrailTrip",
    "PatternGuard",
    "Redact",
    "Trip",
    "guardrail",
]
