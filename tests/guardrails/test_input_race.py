"""Input checks in race mode (DESIGN 13): the model is called at once while the checks run on
worker threads, and nothing of the call leaves the run before every check passed; a trip
stops the model call through the cancel path; a Redact discards the call made with the
original prompt; a cancel while a check is pending returns at once, and the check abandoned
counts against the abandoned-thread cap until it returns."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from agent_sync import Agent, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.events import AgentEvent, Done, GuardrailTripped, TextDelta
from agent_sync.guardrails import Guardrail, GuardView, Redact, Trip
from agent_sync.messages import StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.stores import SQLiteRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.tools import abandoned_tool_threads
from tests.fixtures.bounds import HANG_BOUND


class GatedModel:
    """A :class:`ScriptedModel` whose first call stops after ``gate_after`` text chunks until
    ``gate`` is set or the call is aborted (``aborted`` then set); ``streamed`` is set once the
    loop took the call's last event."""

    def __init__(self, turns: list[str | dict[str, object]], gate_after: int | None = None) -> None:
        self.inner = ScriptedModel(turns)
        self.gate_after = gate_after
        self.reached, self.gate = threading.Event(), threading.Event()
        self.aborted, self.streamed = threading.Event(), threading.Event()
        self.calls = self.inner.calls
        self._woken = threading.Event()

    def open(self) -> None:
        """Let the gated call go on."""
        self.gate.set()
        self._woken.set()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        first = not self.inner.calls
        events = self.inner.stream(request, cancel=cancel)
        return self._relay(events, cancel) if first else events

    def _relay(self, events: Iterator[StreamEvent], cancel: CancelScope) -> Iterator[StreamEvent]:
        woken = self._woken
        unregister = cancel.register_abort(woken.set)
        try:
            chunks = 0
            for event in events:
                yield event
                if "text" in event.get("contentBlockDelta", {}).get("delta", {}):
                    chunks += 1
                    if chunks == self.gate_after:
                        self.reached.set()
                        woken.wait()  # the gate opens, or the call is aborted
                        if not self.gate.is_set():
                            self.aborted.set()
                            raise ConnectionError("aborted")
            self.streamed.set()
        finally:
            unregister()


class Consumer:
    """Iterates ``agent.stream(prompt)`` on a thread; ``first`` is set at its first event,
    ``deltas`` once ``want`` text deltas arrived."""

    def __init__(self, agent: Agent, prompt: str, want: int = 1) -> None:
        self.events: list[AgentEvent] = []
        self.first, self.deltas = threading.Event(), threading.Event()
        self._want = want
        self.thread = threading.Thread(target=self._run, args=(agent, prompt), daemon=True)
        self.thread.start()

    def _run(self, agent: Agent, prompt: str) -> None:
        for event in agent.stream(prompt):
            self.events.append(event)
            self.first.set()
            if sum(isinstance(e, TextDelta) for e in self.events) >= self._want:
                self.deltas.set()

    def done(self) -> Done:
        self.thread.join(HANG_BOUND)
        assert not self.thread.is_alive()
        last = self.events[-1]
        assert isinstance(last, Done)
        return last

    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))


def test_nothing_is_released_before_the_check_passes_then_all_in_order() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(view: GuardView) -> None:
        entered.set()
        release.wait(HANG_BOUND)

    model = GatedModel([{"text": "hello there, friend", "chunk_size": 4}])
    agent = Agent(model, guardrails=[Guardrail(slow, stage="input")])
    consumer = Consumer(agent, "hi")
    assert entered.wait(HANG_BOUND) and model.streamed.wait(HANG_BOUND)  # raced, answered
    assert consumer.events == [] and not consumer.first.is_set()
    assert agent.messages == [] or agent.messages[-1]["role"] == "user"  # nothing committed
    release.set()
    done = consumer.done()
    assert consumer.text() == "hello there, friend"
    assert done.result.text == "hello there, friend" and done.result.stop_reason == "end_turn"
    assert len(model.calls) == 1


def test_held_text_is_released_as_the_check_passes_while_the_model_is_silent() -> None:
    release = threading.Event()
    model = GatedModel([{"text": "one two three four", "chunk_size": 4}], gate_after=2)

    def slow(view: GuardView) -> None:
        release.wait(HANG_BOUND)

    agent = Agent(model, guardrails=[Guardrail(slow, stage="input", name="slow")])
    consumer = Consumer(agent, "hi", want=2)
    try:
        assert model.reached.wait(HANG_BOUND)  # two chunks streamed, the model now silent
        assert consumer.events == []
        release.set()
        assert consumer.deltas.wait(HANG_BOUND)  # released without waiting for the model
        assert consumer.text() == "one two "
    finally:
        model.open()
    assert consumer.done().result.text == "one two three four"


def test_a_trip_mid_stream_leaves_history_and_store_unchanged(tmp_path: Path) -> None:
    model = GatedModel([{"text": "secret answer here", "chunk_size": 3}, "next answer"], 2)

    def judge(view: GuardView) -> Trip | None:
        if "attack" not in view.text:
            return None
        model.reached.wait(HANG_BOUND)  # the model has streamed, and now waits
        return Trip("injection")

    store = SQLiteRunStore(str(tmp_path / "runs.db"))
    guards = [Guardrail(judge, stage="input")]
    agent = Agent(model, store=store, conversation_id="c1", guardrails=guards)
    consumer = Consumer(agent, "an attack")
    done = consumer.done()
    snapshot = store.get(done.result.run_id)
    assert snapshot is not None and snapshot.status == "done"
    assert snapshot.guardrail == done.result.guardrail
    assert Agent(model, store=store, conversation_id="c1").messages == []
    assert model.aborted.wait(HANG_BOUND)  # the call was stopped through the cancel path
    assert done.result.stop_reason == "guardrail" and done.result.guardrail is not None
    assert done.result.guardrail.stage == "input" and done.result.text == ""
    assert not any(isinstance(e, TextDelta) for e in consumer.events)
    assert [type(e) for e in consumer.events] == [GuardrailTripped, Done]
    assert agent.messages == []
    assert "secret" not in repr(done.result)
    assert agent.invoke("a question").text == "next answer"  # the agent goes on
    assert validate_history(agent.messages) == []
    store.close()


def test_a_redaction_discards_the_first_call_and_asks_again() -> None:
    def scrub(view: GuardView) -> Redact | None:
        model.streamed.wait(HANG_BOUND)  # the call with the original has ended
        return Redact(view.text.replace("4111", "[card]"))

    model = GatedModel([
        {"text": "answer to the original", "usage": {"inputTokens": 3, "outputTokens": 5}},
        {"text": "answer to the clean one", "usage": {"inputTokens": 4, "outputTokens": 7}},
    ])  # fmt: skip
    agent = Agent(model, guardrails=[Guardrail(scrub, stage="input")])
    consumer = Consumer(agent, "my card is 4111")
    done = consumer.done()
    assert consumer.text() == "answer to the clean one"
    assert "original" not in repr(consumer.events) and "original" not in repr(agent.messages)
    assert [c.messages[-1]["content"] for c in model.calls] == [
        [{"text": "my card is 4111"}],
        [{"text": "my card is [card]"}],
    ]
    assert agent.messages[0]["content"] == [{"text": "my card is [card]"}]
    assert done.result.usage["outputTokens"] == 5 + 7  # the discarded call's usage counted


def test_a_redaction_aborts_the_first_call_at_once_however_long_it_would_stream() -> None:
    # The call made with the original prompt is discarded: it is aborted as the checks
    # settle on a redaction, not read to its end (the gated model would stream on forever).
    model = GatedModel(["answer to the original", "answer to the clean one"], gate_after=1)

    def scrub(view: GuardView) -> Redact | None:
        model.reached.wait(HANG_BOUND)  # the call streams, then waits
        return Redact(view.text.replace("4111", "[card]"))

    agent = Agent(model, guardrails=[Guardrail(scrub, stage="input")])
    consumer = Consumer(agent, "my card is 4111")
    try:
        assert model.aborted.wait(HANG_BOUND)  # the first call, stopped through its scope
        done = consumer.done()
    finally:
        model.open()
    assert done.result.stop_reason == "end_turn"
    assert consumer.text() == "answer to the clean one"
    assert "original" not in repr(consumer.events) and "original" not in repr(agent.messages)
    assert agent.messages[0]["content"] == [{"text": "my card is [card]"}]
    assert validate_history(agent.messages) == []


def test_cancel_while_a_race_check_is_pending_returns_and_abandons_it(quiet_cap: None) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(view: GuardView) -> None:
        entered.set()
        release.wait(HANG_BOUND)  # ignores its cancel_token on purpose

    model = GatedModel(["an answer"])
    agent = Agent(model, guardrails=[Guardrail(stuck, stage="input", timeout=HANG_BOUND)])
    consumer = Consumer(agent, "hi")
    before = abandoned_tool_threads()
    try:
        assert entered.wait(HANG_BOUND) and model.streamed.wait(HANG_BOUND)
        agent.cancel("user left")
        done = consumer.done()  # returns without the check
        assert done.result.stop_reason == "cancelled"
        assert not any(isinstance(e, TextDelta) for e in consumer.events)
        assert "an answer" not in repr(agent.messages)  # nothing unchecked released
        assert agent.messages == []  # the unchecked prompt is not committed either
        assert abandoned_tool_threads() == before + 1  # the stuck check takes a slot
    finally:
        release.set()
    checks = [t for t in threading.enumerate() if t.name == "guardrail-stuck"]
    for thread in checks:
        thread.join(HANG_BOUND)
    assert abandoned_tool_threads() == before  # given back as the check returned
    assert validate_history(agent.messages) == []


def test_a_check_past_its_timeout_counts_as_abandoned_until_it_returns(quiet_cap: None) -> None:
    release = threading.Event()

    def slow(view: GuardView) -> None:
        release.wait(HANG_BOUND)  # ignores its cancel_token on purpose

    before = abandoned_tool_threads()
    agent = Agent(ScriptedModel(["ok"]))
    guard = Guardrail(slow, stage="input", mode="block", timeout=0.01, name="late")
    try:
        result = agent.invoke("hi", guardrails=[guard])
        assert result.stop_reason == "guardrail"  # the check timed out, still running
        assert abandoned_tool_threads() == before + 1
    finally:
        release.set()
    for thread in [t for t in threading.enumerate() if t.name == "guardrail-late"]:
        thread.join(HANG_BOUND)
    assert abandoned_tool_threads() == before
