"""The output stage wired into the run (DESIGN 13): only released text reaches the events,
the history and the hooks; a trip stops the run as a cancel does, leaving the released text
and "Stopped by guardrail"; a trip in the message drops its toolUses (never run).

On :class:`ScriptedModel`: a trip at every chunk index, a pattern split at every boundary.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from agent_sync import Agent, tool
from agent_sync.errors import UsageError
from agent_sync.events import AgentEvent, Done, GuardrailTripped, MessageComplete, TextDelta
from agent_sync.guardrails import (
    STOPPED_TEXT,
    Guardrail,
    GuardrailTrip,
    GuardView,
    PatternGuard,
    Redact,
    Trip,
    guardrail,
)
from agent_sync.messages import Message, validate_history
from agent_sync.testing import ScriptedModel

SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K"  # 24 characters, matches the pattern below
KEY_PATTERN = r"sk-[A-Za-z0-9]{20,}"
OSLO = {"name": "lookup", "input": {"city": "Oslo"}}


def _texts(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _history_text(messages: list[Message]) -> str:
    return repr(messages)


def _assert_valid(messages: list[Message]) -> None:
    assert validate_history(messages) == []
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), roles


def test_no_guardrails_leaves_settings_without_a_set() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    assert agent._settings.guardrails is None  # nothing per chunk: the guard is None


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("x", "must be a list"),
        ([lambda view: None], "wrap it with @guardrail"),
        ([3], "guardrails[0] must be a Guardrail or PatternGuard, got int"),
    ],
)
def test_bad_guardrails_are_refused_at_the_edge(bad: Any, needle: str) -> None:
    with pytest.raises(UsageError) as caught:
        Agent(ScriptedModel(["hi"]), guardrails=bad)
    assert needle in str(caught.value)
    agent = Agent(ScriptedModel(["hi"]))
    with pytest.raises(UsageError) as caught:
        agent.invoke("x", guardrails=bad)
    assert needle in str(caught.value)
    assert agent.messages == []  # nothing was touched


def test_trip_at_every_chunk_index_releases_only_what_passed() -> None:
    """A check trips when the chunk numbered ``k`` arrives: exactly the text passed before
    reaches the events, the result and the history, for every ``k``."""
    chunks = [f"<c{i:02d}>" for i in range(12)]  # 5 characters each
    answer = "".join(chunks)
    for k in range(len(chunks)):
        marker = chunks[k]

        @guardrail(stage="output", name="stop_at_k")
        def stop_at_k(view: GuardView, marker: str = marker) -> Trip | None:
            return Trip("marker seen") if marker in view.text else None

        model = ScriptedModel([{"text": answer, "chunk_size": 5}, "next answer"])
        agent = Agent(model, guardrails=[stop_at_k])
        events = list(agent.stream("go"))
        released = answer[: 5 * k]
        assert _texts(events) == released, k
        trips = [e for e in events if isinstance(e, GuardrailTripped)]
        assert [(t.name, t.stage, t.reason) for t in trips] == [
            ("stop_at_k", "output", "marker seen")
        ]
        done = events[-1]
        assert isinstance(done, Done)
        result = done.result
        assert result.stop_reason == "guardrail"
        assert result.cancel_reason is None
        assert result.text == released
        assert result.guardrail == GuardrailTrip(
            name="stop_at_k", stage="output", reason="marker seen", run_id=result.run_id
        )
        history = agent.messages
        assert history[-1]["content"][-1] == {"text": STOPPED_TEXT}
        assert marker not in _history_text(history)
        assert all(c not in _history_text(history) for c in chunks[k:])
        _assert_valid(history)
        # the agent is reusable, and the model saw only the released text
        assert agent.invoke("again").text == "next answer"
        assert marker not in repr(model.calls[1].messages)


def test_pattern_split_at_every_boundary_leaks_no_byte(caplog: pytest.LogCaptureFixture) -> None:
    """The secret at every offset and chunk size: no character of it (nor after it) reaches
    an event, the history, a hook or a log; the text before it may be released."""
    caplog.set_level(logging.DEBUG)
    seen_by_hooks: list[str] = []

    class Listener:
        def before_model_call(self, event: Any) -> None:
            seen_by_hooks.append(repr(event))

        def after_model_call(self, event: Any) -> None:
            seen_by_hooks.append(repr(event))

    guard = PatternGuard(KEY_PATTERN, max_match=40)
    for chunk_size in (1, 2, 3, 5, 7, 24, 64):
        for offset in range(0, 30):
            before = "x" * offset
            answer = before + SECRET + " tail!"
            model = ScriptedModel([{"text": answer, "chunk_size": chunk_size}])
            agent = Agent(model, guardrails=[guard], hooks=[Listener()])
            events = list(agent.stream("go"))
            released = _texts(events)
            assert before.startswith(released), (chunk_size, offset)
            everywhere = repr(events) + repr(agent.messages) + "".join(seen_by_hooks)
            everywhere += caplog.text
            assert SECRET[:2] + SECRET[3:6] not in everywhere
            assert "tail!" not in everywhere
            assert seen_by_hooks  # the hooks heard the call (and nothing of the secret)
            assert "sk-A" not in everywhere
            result = events[-1]
            assert isinstance(result, Done) and result.result.stop_reason == "guardrail"
            _assert_valid(agent.messages)


def test_redaction_is_what_every_reader_gets() -> None:
    guard = PatternGuard(KEY_PATTERN, action="redact", replacement="[key]", max_match=40)
    answer = f"the key is {SECRET}, keep it"
    model = ScriptedModel([{"text": answer, "chunk_size": 3}])
    agent = Agent(model, guardrails=[guard])
    events = list(agent.stream("go"))
    expected = "the key is [key], keep it"
    assert _texts(events) == expected
    done = events[-1]
    assert isinstance(done, Done)
    assert done.result.stop_reason == "end_turn" and done.result.text == expected
    assert done.result.guardrail is None
    complete = [e for e in events if isinstance(e, MessageComplete)]
    assert complete[0].message["content"] == [{"text": expected}]
    assert agent.messages[-1]["content"] == [{"text": expected}]


def _recording_tool() -> tuple[Any, list[str]]:
    starts: list[str] = []
    lock = threading.Lock()

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        with lock:
            starts.append(city)
        return f"{city}: sunny"

    return lookup, starts


def test_a_trip_in_the_message_drops_its_tool_calls() -> None:
    lookup, starts = _recording_tool()
    model = ScriptedModel(
        [
            {"text": f"calling with {SECRET}", "tool_calls": [OSLO]},
            "after",
        ]
    )
    agent = Agent(model, tools=[lookup], guardrails=[PatternGuard(KEY_PATTERN)])
    result = agent.invoke("go")
    assert result.stop_reason == "guardrail"
    assert starts == []
    assert not any("toolUse" in b for m in agent.messages for b in m["content"])
    _assert_valid(agent.messages)
    assert agent.invoke("again").text == "after"
    assert starts == []


def test_tool_calls_are_released_after_the_text_before_them() -> None:
    lookup, starts = _recording_tool()
    guard = PatternGuard(KEY_PATTERN, action="redact", replacement="[key]", max_match=40)
    model = ScriptedModel(
        [
            {"text": f"with {SECRET}", "tool_calls": [OSLO]},
            "done",
        ]
    )
    agent = Agent(model, tools=[lookup], guardrails=[guard])
    events = list(agent.stream("go"))
    first = next(e for e in events if isinstance(e, MessageComplete))
    assert first.message["content"][0] == {"text": "with [key]"}
    assert "toolUse" in first.message["content"][1]
    texts_before = _texts(events[: events.index(first)])
    assert texts_before == "with [key]"  # all of the text before the call, then the call
    assert starts == ["Oslo"]
    assert SECRET not in repr(agent.messages)


def test_a_check_that_raises_trips_and_on_error_pass_passes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(view: GuardView) -> None:
        raise RuntimeError(f"cannot judge {view.text}")

    agent = Agent(ScriptedModel(["secret words"]), guardrails=[Guardrail(broken, stage="output")])
    result = agent.invoke("go")
    assert result.stop_reason == "guardrail"
    assert result.guardrail is not None and "RuntimeError" in result.guardrail.reason
    assert "secret words" not in caplog.text and "secret words" not in repr(agent.messages)

    lenient = Guardrail(broken, stage="output", on_error="pass")
    agent = Agent(ScriptedModel(["fine words"]), guardrails=[lenient])
    assert agent.invoke("go").text == "fine words"


def test_per_call_guardrails_add_to_the_agents() -> None:
    def no_b(view: GuardView) -> Trip | None:
        return Trip("b") if "b" in view.text else None

    def upper(view: GuardView) -> Redact:
        return Redact(view.pending.upper())

    model = ScriptedModel(["abc", "abc"])
    agent = Agent(model, guardrails=[Guardrail(upper, stage="output")])
    assert agent.invoke("one").text == "ABC"
    result = agent.invoke("two", guardrails=[Guardrail(no_b, stage="output")])
    assert result.text == "ABC"  # upper ran first: no "b" left to trip on
    model = ScriptedModel(["abc"])
    agent = Agent(model)
    result = agent.invoke("two", guardrails=[Guardrail(no_b, stage="output")])
    assert result.stop_reason == "guardrail" and result.text == ""


def test_a_cancel_keeps_only_released_text() -> None:
    """A cancel mid-stream with guardrails keeps the released text only: the held-back
    part was never checked."""
    started = threading.Event()

    def watch(view: GuardView) -> None:
        if "held" in view.text:
            started.set()

    turn = {"text": "held back " + SECRET[:10], "chunk_size": 4, "stall_after": 5}
    guards: list[Guardrail | PatternGuard] = [
        PatternGuard(KEY_PATTERN, max_match=40),
        Guardrail(watch, stage="output"),
    ]
    agent = Agent(ScriptedModel([turn]), guardrails=guards)
    stream = agent.stream("go")
    result_box: list[Any] = []
    worker = threading.Thread(target=lambda: result_box.extend(stream), name="test-reader")
    worker.start()
    assert started.wait(30)
    agent.cancel()
    worker.join(30)
    assert not worker.is_alive()
    done = result_box[-1]
    assert isinstance(done, Done) and done.result.stop_reason == "cancelled"
    assert "sk-" not in repr(agent.messages) and "held" not in repr(agent.messages)
    _assert_valid(agent.messages)


def test_partial_output_never_shows_what_the_guardrails_did_not_pass() -> None:
    from pydantic import BaseModel

    class Note(BaseModel):
        body: str

    answer = '{"body": "here is ' + SECRET + ' for you"}'
    model = ScriptedModel([{"text": answer, "chunk_size": 4}])
    agent = Agent(model, output_type=Note, guardrails=[PatternGuard(KEY_PATTERN, max_match=40)])
    events = list(agent.stream("go"))
    assert "sk-" not in repr(events) + repr(agent.messages)
    done = events[-1]
    assert isinstance(done, Done) and done.result.stop_reason == "guardrail"
