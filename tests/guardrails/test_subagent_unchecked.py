"""A sub-agent's run that handed injected input back (its input guardrails never passed it:
DESIGN 13) says so to its caller: the caller's call result tells its model how much input
was not delivered, never what (nothing checked it), and the child's ``Done`` in the
caller's stream carries the input itself."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pydantic

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync._subagent import _answer
from agent_sync.events import Done, SubAgentEvent
from agent_sync.guardrails import Guardrail, GuardView, PatternGuard
from agent_sync.testing import ScriptedModel

QUESTION = "a question asked meanwhile"


def _passes(view: GuardView) -> None:
    return None


@tool
def look(context: ToolContext[object]) -> str:
    """Look around."""
    context.agent.inject(QUESTION)  # queued in the child's run; its result trips next
    return "a secret result"


def _results(messages: list[Any]) -> list[dict[str, Any]]:
    return [b["toolResult"] for m in messages for b in m["content"] if "toolResult" in b]


def test_a_child_that_handed_input_back_tells_its_caller() -> None:
    child = Agent(
        ScriptedModel([{"tool_calls": [{"name": "look", "input": {}}]}, "never"]),
        tools=[look],
        guardrails=[
            Guardrail(_passes, stage="input"),
            PatternGuard("secret", stage="tool_result", name="secrets"),
        ],
    )
    helper = child.as_tool(name="helper", description="Looks around.")
    model = ScriptedModel(
        [{"tool_calls": [{"name": "helper", "input": {"prompt": "look"}}]}, "the parent's answer"]
    )
    parent = Agent(model, tools=[helper])
    events = list(parent.stream("ask the helper"))
    done = events[-1]
    assert isinstance(done, Done) and done.result.text == "the parent's answer"
    (child_done,) = [
        e.event for e in events if isinstance(e, SubAgentEvent) and isinstance(e.event, Done)
    ]
    assert child_done.result.stop_reason == "guardrail"
    assert child_done.result.unchecked_input == ({"text": QUESTION},)  # the input, handed back
    (answered,) = _results(parent.messages)
    assert answered["status"] == "error"
    (text,) = [piece["text"] for piece in answered["content"]]
    assert "stopped by guardrail secrets" in text
    assert f"{child_done.result.run_id} was not delivered to it (1 block" in text
    assert "meanwhile" not in repr(parent.messages)  # how much, never what
    assert "meanwhile" not in repr([call.messages for call in model.calls])
    assert validate_history(parent.messages) == []


def test_a_child_answer_keeps_its_answer_and_says_what_was_not_delivered() -> None:
    """A child that answered (a usage limit or ``max_cycles`` stopped it with input
    queued): its answer, then the sentence."""
    result = Agent(ScriptedModel(["the child's answer"])).invoke("go")
    handed_back = replace(result, unchecked_input=({"text": QUESTION}, {"text": "and more"}))
    assert _answer(result, False) == "the child's answer"  # nothing handed back: as before
    answer = _answer(handed_back, False)
    assert answer["content"][0] == {"text": "the child's answer"}
    (note,) = answer["content"][1:]
    assert note["text"].startswith(f"Input injected into the sub-agent's run {result.run_id}")
    assert "(2 blocks: its input guardrails never passed it)" in note["text"]
    assert "meanwhile" not in repr(answer)


class Found(pydantic.BaseModel):
    path: str


def test_a_child_structured_answer_stays_json_before_the_sentence() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "final_result", "input": {"path": "/a"}}]}])
    result = Agent(model, output_type=Found).invoke("go")
    answer = _answer(replace(result, unchecked_input=({"text": QUESTION},)), False)
    assert answer["content"][0] == {"json": {"path": "/a"}}
    assert "(1 block: its input guardrails" in answer["content"][1]["text"]
