"""Output judges (DESIGN 13, ``every=N``): checks on worker threads at each N characters.
Text is released only up to the latest checkpoint every judge passed; a judge's trip stops
the run from its thread (the loop wakes even on a silent stream); a judge that times out
trips (or passes, ``on_error="pass"``); ``cancel()`` never waits for a pending judge.

Synchronised with events only: a judge that waits is released by the test, never by time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from agent_sync import Agent, tool
from agent_sync._deadlines import schedule
from agent_sync.cancel import CancelScope
from agent_sync.events import AgentEvent, Done, GuardrailTripped, MessageComplete, TextDelta
from agent_sync.guardrails import STOPPED_TEXT, GuardView, PatternGuard, Redact, Trip, guardrail
from agent_sync.messages import Message, StreamEvent, validate_history
from agent_sync.models.base import Model, ModelRequest
from agent_sync.result import AgentResult
from agent_sync.testing import ScriptedModel
from agent_sync.tools import abandoned_tool_threads
from tests.run._gates import PausingModel

ANSWER = "".join(f"<{i:02d}>" for i in range(10))  # 40 characters: 5 checkpoints of 8
EVERY = 8
WAIT = 30.0  # a bound on waits that only a defect reaches


def _texts(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _result(events: list[AgentEvent]) -> AgentResult:
    done = events[-1]
    assert isinstance(done, Done)
    return done.result


def _assert_valid(messages: list[Message]) -> None:
    assert validate_history(messages) == []
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles


class _Finished:
    """Relays ``inner``; sets ``consumed`` once the run asked past the stream's last event
    (everything the stream brought has been fed to the guard and its deltas handed out)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.consumed = threading.Event()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        yield from self.inner.stream(request, cancel=cancel)
        self.consumed.set()


def _run_in_thread(agent: Agent, prompt: str, out: list[tuple[AgentEvent, bool]],
                   opened: threading.Event) -> threading.Thread:  # fmt: skip
    def drive() -> None:
        for event in agent.stream(prompt):
            out.append((event, opened.is_set()))

    thread = threading.Thread(target=drive, name="judge-test-run", daemon=True)
    thread.start()
    return thread


def test_nothing_past_the_last_passed_checkpoint_leaves_before_the_judge_passes() -> None:
    """The judge holds its second checkpoint: the whole stream is consumed, yet the events
    carry only the first checkpoint's text, and the message (event, hooks, history) comes
    only once the test lets the judge pass."""
    entered, let_pass, opened = threading.Event(), threading.Event(), threading.Event()
    seen: list[str] = []

    @guardrail(stage="output", every=EVERY, timeout=WAIT)
    def judge(view: GuardView) -> None:
        seen.append(view.pending)
        if len(seen) == 2:
            entered.set()
            let_pass.wait(WAIT)

    model = _Finished(ScriptedModel([{"text": ANSWER, "chunk_size": 3}]))
    agent = Agent(model, guardrails=[judge])
    events: list[tuple[AgentEvent, bool]] = []
    thread = _run_in_thread(agent, "hi", events, opened)
    assert entered.wait(WAIT) and model.consumed.wait(WAIT)
    before = [event for event, after in events]
    assert _texts(before) == ANSWER[:EVERY]
    assert not any(isinstance(e, MessageComplete) for e in before)
    assert agent.messages[-1]["role"] == "user"  # nothing of the answer in the history yet
    opened.set()
    let_pass.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert _texts([e for e, _ in events]) == ANSWER
    complete = [after for e, after in events if isinstance(e, MessageComplete)]
    assert complete == [True]
    assert seen == [ANSWER[i : i + EVERY] for i in range(0, len(ANSWER), EVERY)]
    assert agent.messages[-1]["content"] == [{"text": ANSWER}]


def test_a_judge_trip_at_each_checkpoint_releases_exactly_the_passed_text() -> None:
    """For each checkpoint ``k``: the judge passes those before and trips at ``k``; the
    events, the result and the history hold exactly the text before ``k``, then "Stopped by
    guardrail", and the next invoke works."""
    checkpoints = len(ANSWER) // EVERY
    for k in range(checkpoints):
        calls: list[str] = []

        @guardrail(stage="output", every=EVERY, name="judge")
        def judge(view: GuardView, k: int = k, calls: list[str] = calls) -> Trip | None:
            calls.append(view.pending)
            return Trip("off policy") if len(calls) == k + 1 else None

        agent = Agent(
            ScriptedModel([{"text": ANSWER, "chunk_size": 3}, "fine"]), guardrails=[judge]
        )
        events = list(agent.stream("hi"))
        passed = ANSWER[: k * EVERY]
        assert _texts(events) == passed, k
        trips = [e for e in events if isinstance(e, GuardrailTripped)]
        assert [(t.name, t.reason) for t in trips] == [("judge", "off policy")]
        result = _result(events)
        assert result.stop_reason == "guardrail", k
        assert result.guardrail is not None and result.guardrail.name == "judge"
        kept: list[dict[str, Any]] = [{"text": passed}] if passed else []
        assert agent.messages[-1]["content"] == [*kept, {"text": STOPPED_TEXT}]
        assert ANSWER[k * EVERY : k * EVERY + EVERY] not in repr(agent.messages)
        _assert_valid(agent.messages)
        assert agent.invoke("again").text == "fine"


def test_a_judge_redacts_its_checkpoint() -> None:
    """``Redact(text)`` replaces the checkpoint's pending text everywhere."""

    @guardrail(stage="output", every=EVERY)
    def no_digits(view: GuardView) -> Redact | None:
        return Redact("[num]") if any(c.isdigit() for c in view.pending) else None

    answer = "abcdefgh12345678ijklmnopqr"  # the last checkpoint is the rest: "qr"
    agent = Agent(ScriptedModel([{"text": answer, "chunk_size": 5}]), guardrails=[no_digits])
    events = list(agent.stream("hi"))
    assert _texts(events) == "abcdefgh[num]ijklmnopqr"
    assert agent.messages[-1]["content"] == [{"text": "abcdefgh[num]ijklmnopqr"}]
    assert "1234" not in repr(agent.messages)


def _join_guardrail_threads(name: str) -> None:
    for thread in threading.enumerate():
        if thread.name == f"guardrail-{name}":
            thread.join(WAIT)
            assert not thread.is_alive()


def test_a_judge_past_its_timeout_trips_and_on_error_pass_lets_it_through() -> None:
    """A judge stuck in its first checkpoint: past ``timeout`` it trips (nothing released);
    with ``on_error="pass"`` that checkpoint passes and a fresh worker judges the rest. The
    stuck thread counts as abandoned until it returns."""
    for on_error in ("trip", "pass"):
        stuck = threading.Event()
        calls: list[str] = []

        @guardrail(stage="output", every=EVERY, timeout=0.2, on_error=on_error, name="slow")
        def slow(view: GuardView, stuck: threading.Event = stuck, calls: list[str] = calls) -> None:
            calls.append(view.pending)
            if len(calls) == 1:
                stuck.wait(WAIT)  # ignores its cancel_token

        before = abandoned_tool_threads()
        agent = Agent(ScriptedModel([{"text": ANSWER, "chunk_size": 3}]), guardrails=[slow])
        events = list(agent.stream("hi"))
        assert abandoned_tool_threads() == before + 1  # the stuck judge's thread
        if on_error == "trip":
            assert _texts(events) == ""
            result = _result(events)
            assert result.stop_reason == "guardrail"
            assert result.guardrail is not None
            assert result.guardrail.reason == "guardrail slow failed: timeout"
            assert agent.messages[-1]["content"] == [{"text": STOPPED_TEXT}]
        else:
            assert _texts(events) == ANSWER
            assert agent.messages[-1]["content"] == [{"text": ANSWER}]
        _assert_valid(agent.messages)
        stuck.set()
        _join_guardrail_threads("slow")
        assert abandoned_tool_threads() == before  # its slot given back as it returned


def test_cancel_while_a_judge_is_pending_returns_at_once() -> None:
    """``cancel()`` while a judge (ignoring its token) holds the message: invoke returns
    "cancelled" without waiting for it, and the judge's token is cancelled."""
    entered, stuck = threading.Event(), threading.Event()
    views: list[GuardView] = []

    @guardrail(stage="output", every=EVERY, timeout=WAIT, name="busy")
    def busy(view: GuardView) -> None:
        views.append(view)
        entered.set()
        stuck.wait(WAIT)

    agent = Agent(
        ScriptedModel([{"text": ANSWER, "chunk_size": 3}, "next"]),
        guardrails=[busy],
        tool_grace_period=0.0,
    )
    before = abandoned_tool_threads()
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(agent.invoke("hi")), daemon=True)
    thread.start()
    assert entered.wait(WAIT)
    agent.cancel("user left")
    thread.join(WAIT)
    assert not thread.is_alive() and not stuck.is_set()  # returned while the judge is stuck
    assert results[0].stop_reason == "cancelled" and results[0].cancel_reason == "user left"
    assert views[0].cancel_token.cancelled
    assert ANSWER[:EVERY] not in repr(agent.messages)
    _assert_valid(agent.messages)
    # past the grace period the stuck judge is abandoned: the deadline thread runs its due
    # callbacks in order, so one scheduled now runs after the abandonment
    after_grace = threading.Event()
    schedule(0.0, after_grace.set)
    assert after_grace.wait(WAIT)
    assert abandoned_tool_threads() == before + 1
    stuck.set()
    _join_guardrail_threads("busy")
    assert abandoned_tool_threads() == before
    assert agent.invoke("again").text == "next"


def test_a_judge_trip_stops_a_silent_stream() -> None:
    """The model pauses after its first chunk (a silent stream): the judge's trip, from its
    thread, wakes the loop through the run's scope and the run stops at the trip."""

    tripped: list[str] = []
    model = PausingModel(ScriptedModel([{"text": ANSWER, "chunk_size": 8}, "after"]))

    @guardrail(stage="output", every=4, name="strict", timeout=WAIT)
    def strict(view: GuardView) -> Trip | None:
        if tripped:
            return None
        tripped.append(view.pending)
        assert model.paused.wait(WAIT)  # trips only once the stream is silent
        return Trip("no")

    agent = Agent(model, guardrails=[strict])
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(agent.invoke("hi")), daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert model.paused.is_set() and model.resume.is_set()  # woken by the trip's abort
    result = results[0]
    assert result.stop_reason == "guardrail" and result.cancel_reason is None
    assert result.guardrail is not None and result.guardrail.name == "strict"
    assert agent.messages[-1]["content"] == [{"text": STOPPED_TEXT}]
    _assert_valid(agent.messages)
    assert agent.invoke("again").text == "after"


def test_the_tools_wait_for_the_judges_last_checkpoint() -> None:
    """The stream ends with a toolUse while the judge holds the text's last checkpoint: the
    tool starts only after the judge passed it, and after the text was released."""
    entered, let_pass, opened = threading.Event(), threading.Event(), threading.Event()
    started: list[bool] = []

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        started.append(opened.is_set())
        return "sunny"

    @guardrail(stage="output", every=1000, timeout=WAIT)  # one checkpoint: the message's end
    def judge(view: GuardView) -> None:
        entered.set()
        let_pass.wait(WAIT)

    turn = {"text": "Let me look.", "tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}]}
    model = _Finished(ScriptedModel([turn, "Sunny in Oslo."]))
    agent = Agent(model, tools=[lookup], guardrails=[judge])
    events: list[tuple[AgentEvent, bool]] = []
    thread = _run_in_thread(agent, "weather?", events, opened)
    assert entered.wait(WAIT) and model.consumed.wait(WAIT)
    assert _texts([e for e, _ in events]) == "" and started == []
    opened.set()
    let_pass.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert started == [True]
    kinds = [type(e).__name__ for e, _ in events]
    assert kinds.index("TextDelta") < kinds.index("ToolStart")
    _assert_valid(agent.messages)


def test_a_pattern_trip_while_a_judge_is_pending_does_not_wait_for_it() -> None:
    """A loop-thread pattern trips while the judge (ignoring its token) is stuck: the run
    stops at the pattern at once and the judge's token is cancelled."""
    entered, stuck = threading.Event(), threading.Event()
    views: list[GuardView] = []

    @guardrail(stage="output", every=4, timeout=WAIT, name="busy")
    def busy(view: GuardView) -> None:
        views.append(view)
        entered.set()
        stuck.wait(WAIT)

    class _Gated:
        """The key is streamed only once the judge is stuck in its first checkpoint."""

        inner = ScriptedModel([{"text": "x" * 60 + "sk-" + "A" * 24 + " more", "chunk_size": 5}])

        def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
            sent = 0
            for event in self.inner.stream(request, cancel=cancel):
                if "contentBlockDelta" in event and sent >= 60:
                    assert entered.wait(WAIT)
                    sent = -1
                yield event
                if "contentBlockDelta" in event and sent >= 0:
                    sent += 5

    keys = PatternGuard(r"sk-[A-Za-z0-9]{20,}", stage="output", name="keys", max_match=30)
    agent = Agent(_Gated(), guardrails=[busy, keys])
    result = agent.invoke("hi")
    assert not stuck.is_set()  # returned while the judge is stuck
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    assert result.guardrail.name == "keys"
    assert views[0].cancel_token.cancelled
    assert "sk-" not in repr(agent.messages)
    _assert_valid(agent.messages)
    stuck.set()
    _join_guardrail_threads("busy")
