"""The tool_call and tool_result stages (DESIGN 13): no tool starts before every tool_call
check passed the batch; a Redact replaces the input the tool runs with (the history keeps
the model's request); a tool_result check runs before anyone sees the result. After a trip:
the tripped call answered with an error naming the guardrail, the others "not run", then
"Stopped by guardrail"; no tool starts after it; the next invoke works."""

from __future__ import annotations

import json
import threading
from typing import Any

from agent_sync import Agent, tool, validate_history
from agent_sync.events import AgentEvent, Done, GuardrailTripped, ToolEnd, ToolStart
from agent_sync.guardrails import STOPPED_TEXT, Guardrail, GuardView, PatternGuard, Redact, Trip
from agent_sync.messages import Message
from agent_sync.testing import ScriptedModel


class Recorder:
    """Tools that record each start (under a lock: the batch runs them on threads)."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

        @tool
        def lookup(city: str) -> str:
            """Look a city up."""
            with self._lock:
                self.starts.append(("lookup", {"city": city}))
            return f"{city}: sunny, token sk-{city}SECRETSECRETSECRET"

        @tool
        def delete(path: str) -> str:
            """Delete a path."""
            with self._lock:
                self.starts.append(("delete", {"path": path}))
            return "deleted"

        self.tools = [lookup, delete]


def _results(messages: list[Message]) -> dict[str, tuple[str | None, str]]:
    found: dict[str, tuple[str | None, str]] = {}
    for message in messages:
        for block in message["content"]:
            if "toolResult" in block:
                result = block["toolResult"]
                text = "".join(p.get("text", "") for p in result["content"])
                found[result["toolUseId"]] = (result.get("status"), text)
    return found


def _no_rm(view: GuardView) -> Trip | None:
    assert view.tool_name is not None and view.tool_input is not None
    return Trip("destructive") if view.tool_name == "delete" else None


def test_a_tool_call_trip_starts_no_tool_of_the_batch() -> None:
    rec = Recorder()
    calls = [
        {"name": "lookup", "input": {"city": "Oslo"}, "id": "t1"},
        {"name": "delete", "input": {"path": "/"}, "id": "t2"},
        {"name": "lookup", "input": {"city": "Rome"}, "id": "t3"},
    ]
    model = ScriptedModel([{"tool_calls": calls}, "after"])
    guard = Guardrail(_no_rm, stage="tool_call", name="no_rm")
    agent = Agent(model, tools=rec.tools, guardrails=[guard])
    events: list[AgentEvent] = list(agent.stream("go"))
    assert rec.starts == []
    assert not any(isinstance(e, (ToolStart, ToolEnd)) for e in events)
    trips = [e for e in events if isinstance(e, GuardrailTripped)]
    assert [(t.name, t.stage, t.reason) for t in trips] == [("no_rm", "tool_call", "destructive")]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.result.stop_reason == "guardrail" and done.result.cancel_reason is None
    history = agent.messages
    assert validate_history(history) == []
    answers = _results(history)
    assert answers["t2"][0] == "error" and "no_rm" in answers["t2"][1]
    assert answers["t1"] == ("error", "not run: stopped by guardrail")
    assert answers["t3"] == ("error", "not run: stopped by guardrail")
    assert history[-1] == {"role": "assistant", "content": [{"text": STOPPED_TEXT}]}
    assert agent.invoke("again").text == "after"
    assert rec.starts == []


def test_a_tool_call_redaction_is_the_input_the_tool_runs_with() -> None:
    rec = Recorder()
    call = {"name": "lookup", "input": {"city": "Oslo sk-ABCDEFGHIJKLMNOPQRSTUV"}, "id": "t1"}
    model = ScriptedModel([{"tool_calls": [call]}, "after"])
    guard = PatternGuard(r"sk-[A-Za-z0-9]{20,}", stage="tool_call", action="redact")
    agent = Agent(model, tools=rec.tools, guardrails=[guard])
    assert agent.invoke("go").text == "after"
    assert rec.starts == [("lookup", {"city": "Oslo [redacted]"})]
    uses = [b["toolUse"] for m in agent.messages for b in m["content"] if "toolUse" in b]
    assert uses[0]["input"] == call["input"]  # the history keeps the model's request


def test_a_redaction_that_is_no_json_object_trips() -> None:
    rec = Recorder()
    model = ScriptedModel([{"tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}]}])

    def garble(view: GuardView) -> Redact:
        return Redact("not json")

    agent = Agent(model, tools=rec.tools, guardrails=[Guardrail(garble, stage="tool_call")])
    result = agent.invoke("go")
    assert result.stop_reason == "guardrail" and result.guardrail is not None
    assert result.guardrail.name == "garble"
    assert rec.starts == []
    assert validate_history(agent.messages) == []


def test_a_tool_result_is_checked_before_anyone_sees_it() -> None:
    rec = Recorder()
    model = ScriptedModel(
        [{"tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}, "id": "t1"}]}, "ok"]
    )
    guard = PatternGuard(r"sk-\w+", stage="tool_result", action="redact", replacement="[key]")
    seen_by_hooks: list[str] = []

    class Listener:
        def after_tool_call(self, event: Any) -> None:
            seen_by_hooks.append(json.dumps(event.result))

    agent = Agent(model, tools=rec.tools, guardrails=[guard], hooks=[Listener()])
    events = list(agent.stream("go"))
    shown = repr(events) + repr(agent.messages) + "".join(seen_by_hooks) + repr(model.calls)
    assert "SECRET" not in shown
    ends = [e for e in events if isinstance(e, ToolEnd)]
    assert ends[0].result["content"] == [{"text": "Oslo: sunny, token [key]"}]
    assert _results(agent.messages)["t1"] == ("success", "Oslo: sunny, token [key]")


def test_a_tool_result_trip_keeps_nothing_of_it() -> None:
    rec = Recorder()
    calls = [{"name": "lookup", "input": {"city": "Oslo"}, "id": "t1"}]
    model = ScriptedModel([{"tool_calls": calls}, {"tool_calls": calls}, "after"])
    guard = PatternGuard(r"sk-\w+", stage="tool_result", name="keys")
    agent = Agent(model, tools=rec.tools, guardrails=[guard])
    events = list(agent.stream("go"))
    assert "SECRET" not in repr(events) + repr(agent.messages)
    assert not any(isinstance(e, ToolEnd) for e in events)
    done = events[-1]
    assert isinstance(done, Done) and done.result.stop_reason == "guardrail"
    assert done.result.guardrail is not None and done.result.guardrail.stage == "tool_result"
    status, text = _results(agent.messages)["t1"]
    assert status == "error" and "keys" in text
    assert agent.messages[-1] == {"role": "assistant", "content": [{"text": STOPPED_TEXT}]}
    assert validate_history(agent.messages) == []
    assert len(rec.starts) == 1  # the model was not called again: nothing more started
    assert len(model.calls) == 1


def test_a_trip_in_a_sub_agent_is_an_error_result_and_the_parent_goes_on() -> None:
    child = Agent(
        ScriptedModel([f"leaking sk-{'X' * 24} now"], repeat=True),
        guardrails=[PatternGuard(r"sk-[A-Za-z0-9]{20,}", max_match=40, name="keys")],
        name="researcher",
    )
    parent_model = ScriptedModel(
        [
            {"tool_calls": [{"name": "researcher", "input": {"prompt": "find it"}, "id": "s1"}]},
            "done",
        ]
    )
    parent = Agent(parent_model, tools=[child.as_tool(name="researcher", description="Finds.")])
    result = parent.invoke("go")
    assert result.stop_reason == "end_turn" and result.text == "done"
    status, text = _results(parent.messages)["s1"]
    assert status == "error" and "guardrail keys" in text
    assert "XXXX" not in repr(parent.messages) + repr(parent_model.calls)
