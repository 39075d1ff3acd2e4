"""Guardrail checks (DESIGN 13): a check's verdict, and a failing check fails closed.

What a user relies on: a check that raises or answers nonsense trips the run (unless
``on_error="pass"``), and neither the trip's reason nor the log carries the exception's
message, which may quote the text being stopped.
"""

from __future__ import annotations

import logging

import pytest

from agent_sync._guardrails._checks import (
    Guardrail,
    GuardrailTrip,
    GuardView,
    Redact,
    Trip,
    guardrail,
)
from agent_sync.errors import UsageError

SECRET = "sk-LEAKED0123456789"


def view(text: str = "hello") -> GuardView:
    return GuardView(stage="output", run_id="run-1", text=text, pending=text)


def test_a_check_is_named_after_its_function_and_answers_its_verdict() -> None:
    @guardrail(stage="output")
    def no_secrets(seen: GuardView) -> Trip | Redact | None:
        return Trip("a key") if "sk-" in seen.text else None

    assert isinstance(no_secrets, Guardrail)
    assert no_secrets.name == "no_secrets" and no_secrets.stage == "output"
    assert no_secrets.judge(view("fine")) is None
    assert no_secrets.judge(view(SECRET)) == Trip("a key")


def test_a_check_that_raises_trips_naming_only_the_exception_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def leaky(seen: GuardView) -> None:
        raise ValueError(f"cannot parse {seen.text}")

    with caplog.at_level(logging.WARNING):
        verdict = Guardrail(leaky, stage="output").judge(view(SECRET))
    assert verdict == Trip("guardrail leaky failed: ValueError")
    assert "ValueError" in caplog.text
    assert SECRET not in caplog.text and SECRET not in repr(verdict)
    assert len(caplog.records) == 1


def test_on_error_pass_lets_a_failing_check_pass_and_logs_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(seen: GuardView) -> None:
        raise RuntimeError(seen.text)

    with caplog.at_level(logging.WARNING):
        assert Guardrail(broken, stage="input", on_error="pass").judge(view(SECRET)) is None
    assert len(caplog.records) == 1 and SECRET not in caplog.text


def test_an_answer_that_is_not_a_verdict_trips() -> None:
    def answers_text(seen: GuardView) -> object:
        return "ok"

    verdict = Guardrail(answers_text, stage="tool_result").judge(view())  # type: ignore[arg-type]
    assert isinstance(verdict, Trip) and "answered str" in verdict.reason


def test_a_trip_record_round_trips_through_json() -> None:
    trip = GuardrailTrip(name="no_secrets", stage="output", reason="a key", run_id="run-1")
    assert GuardrailTrip.from_dict(trip.to_dict()) == trip
    with pytest.raises(UsageError):
        GuardrailTrip.from_dict({**trip.to_dict(), "stage": "later"})
    with pytest.raises(UsageError):
        GuardrailTrip.from_dict({"name": "x"})


def check(seen: GuardView) -> None:
    return None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stage": "later"}, "stage must be one of"),
        ({"stage": "input", "mode": "eager"}, "mode must be"),
        ({"stage": "output", "every": 0}, "every must be"),
        ({"stage": "output", "every": True}, "every must be"),
        ({"stage": "input", "every": 10}, "output stage only"),
        ({"stage": "output", "timeout": 0}, "timeout must be"),
        ({"stage": "output", "timeout": float("nan")}, "timeout must be"),
        ({"stage": "output", "on_error": "ignore"}, "on_error must be"),
        ({"stage": "output", "name": ""}, "name must be"),
    ],
)
def test_a_bad_guardrail_is_refused_with_a_clear_error(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        Guardrail(check, **kwargs)  # type: ignore[arg-type]


def test_bad_verdicts_are_refused_where_they_are_made() -> None:
    with pytest.raises(UsageError):
        Trip("")
    with pytest.raises(UsageError):
        Redact(None)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        Guardrail(42, stage="output")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        guardrail(stage="later")  # type: ignore[arg-type]
