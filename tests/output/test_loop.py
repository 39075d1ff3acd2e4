"""Structured output in the loop, through ScriptedModel: the answer read from the output
tool or the text, re-asks, the error, a valid history, partials, cancel, the run's state."""

from __future__ import annotations

import json
import threading
from typing import Any

import pydantic
import pytest

from agent_sync import Agent, RunState, tool, validate_history
from agent_sync.errors import OutputValidationError, UsageError
from agent_sync.events import Done, PartialOutput
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.stores._rules import decode_state, encode_state
from agent_sync.testing import ScriptedModel


class Invoice(pydantic.BaseModel):
    """An invoice."""

    number: str
    total: float


GOOD = {"number": "A-1", "total": 12.5}
BAD = {"number": "A-1", "total": "lots"}


def _final(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "final_result", "input": value}]}


def _roles(agent: Agent) -> list[str]:
    return [message["role"] for message in agent.messages]


def test_the_output_tools_answer_is_the_output_and_the_turn_is_closed() -> None:
    model = ScriptedModel([_final(GOOD)])
    agent = Agent(model, output_type=Invoice)
    result = agent.invoke("Extract the invoice")
    assert result.output == Invoice(number="A-1", total=12.5)
    assert result.stop_reason == "end_turn"
    assert json.loads(result.text) == GOOD
    assert _roles(agent) == ["user", "assistant", "user", "assistant"]
    answered = agent.messages[2]["content"][0]["toolResult"]
    assert answered["status"] == "success"
    assert answered["toolUseId"] == agent.messages[1]["content"][0]["toolUse"]["toolUseId"]
    assert validate_history(agent.messages) == []
    request = model.calls[0]
    assert request.output is not None and request.output.name == "final_result"
    assert request.output.schema["required"] == ["number", "total"]


@pytest.mark.parametrize(
    ("streamed", "closing"),
    [
        # the answer's JSON as the model wrote it closes the turn: not encoded again
        ('{"number":"A-1",  "total": 12.5}', '{"number":"A-1",  "total": 12.5}'),
        ('{"number": "Zoë \\u2713", "total": 1}', '{"number": "Zoë \\u2713", "total": 1}'),
        # a lone surrogate escape is cleaned in the input: the closing text is the clean
        # value's JSON, never the text that held it
        ('{"number": "A\\ud800", "total": 1}', '{"number": "A\ufffd", "total": 1}'),
    ],
)
def test_the_closing_text_is_the_answers_json_as_streamed_unless_it_was_cleaned(
    streamed: str, closing: str
) -> None:
    answer = {"tool_calls": [{"name": "final_result", "raw_input": streamed}], "chunk_size": 5}
    agent = Agent(ScriptedModel([answer]), output_type=Invoice)
    result = agent.invoke("Extract the invoice")
    assert agent.messages[-1]["content"] == [{"text": closing}]
    assert json.loads(closing) == agent.messages[1]["content"][0]["toolUse"]["input"]
    assert result.output == Invoice.model_validate_json(closing)
    assert validate_history(agent.messages) == []


def test_a_text_answer_is_parsed_and_a_wrapped_type_is_unwrapped() -> None:
    agent = Agent(ScriptedModel(['```json\n{"result": [3, 1, 2]}\n```']))
    result = agent.invoke("Numbers?", output_type=list[int])
    assert result.output == [3, 1, 2]
    assert _roles(agent) == ["user", "assistant"]


def test_a_json_schema_dict_gives_a_dict() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 2}},
        "required": ["city"],
    }
    agent = Agent(ScriptedModel([_final({"city": "X"}), _final({"city": "Oslo"})]))
    result = agent.invoke("Where?", output_type=schema)
    assert result.output == {"city": "Oslo"}
    assert "is too short" in agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"]


def test_an_invalid_answer_goes_back_to_the_model_with_each_problem() -> None:
    model = ScriptedModel([_final(BAD), '{"number": 7, "total": 1}', _final(GOOD)])
    agent = Agent(model, output_type=Invoice)
    result = agent.invoke("Extract")
    assert result.output.total == 12.5
    assert result.metrics.cycles == 3
    first_error = agent.messages[2]["content"][0]["toolResult"]
    assert first_error["status"] == "error"
    assert "total: Input should be a valid number" in first_error["content"][0]["text"]
    second_error = agent.messages[4]["content"][0]["text"]  # a text answer: a user message
    assert "number: Input should be a valid string" in second_error
    assert validate_history(agent.messages) == []


def test_after_the_re_asks_the_error_carries_the_problems_and_the_agent_goes_on() -> None:
    model = ScriptedModel([_final(BAD), _final(BAD), _final(BAD), "plain answer"])
    agent = Agent(model, output_type=Invoice, output_retries=2)
    with pytest.raises(OutputValidationError) as caught:
        agent.invoke("Extract")
    assert caught.value.output == BAD
    assert caught.value.errors[0].startswith("total: Input should be a valid number")
    assert len(model.calls) == 3  # output_retries=2: three answers at most
    assert validate_history(agent.messages) == []
    assert agent.messages[-1]["role"] == "assistant"
    assert not agent.is_running
    result = agent.invoke("Just talk", output_type=None)
    assert result.output == "plain answer"
    assert model.calls[-1].output is None


def test_an_invalid_text_answer_with_no_re_ask_left_ends_on_the_models_answer() -> None:
    agent = Agent(ScriptedModel(["not json"]), output_type=Invoice, output_retries=0)
    with pytest.raises(OutputValidationError, match="not valid JSON") as caught:
        agent.invoke("Extract")
    assert caught.value.output == "not json"
    assert _roles(agent) == ["user", "assistant"]


def test_tool_input_that_is_not_json_is_a_problem_sent_back() -> None:
    bad_json = {"tool_calls": [{"name": "final_result", "raw_input": '{"number": '}]}
    agent = Agent(ScriptedModel([bad_json, _final(GOOD)]), output_type=Invoice)
    assert agent.invoke("Extract").output.number == "A-1"
    assert "not valid JSON" in json.dumps(agent.messages[2])


def test_the_agents_tools_run_first_and_a_call_beside_the_answer_is_not_run() -> None:
    ran: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        ran.append(key)
        return "12.5"

    turns = [
        {"tool_calls": [{"name": "lookup", "input": {"key": "total"}}]},
        {
            "tool_calls": [
                {"name": "lookup", "input": {"key": "again"}},
                {"name": "final_result", "input": GOOD},
            ]
        },
    ]
    model = ScriptedModel(turns)
    agent = Agent(model, tools=[lookup], output_type=Invoice)
    result = agent.invoke("Extract")
    assert result.output.total == 12.5
    assert ran == ["total"]
    results = [b["toolResult"] for b in agent.messages[4]["content"]]
    assert [r["status"] for r in results] == ["error", "success"]
    assert "Not run" in results[0]["content"][0]["text"]
    assert [spec["name"] for spec in model.calls[0].tool_specs] == ["lookup"]
    assert validate_history(agent.messages) == []


def test_a_plain_call_after_a_structured_one_asks_for_no_output() -> None:
    model = ScriptedModel([_final(GOOD), "hello"])
    agent = Agent(model)
    agent.invoke("Extract", output_type=Invoice)
    result = agent.invoke("Hi")
    assert result.output == "hello" == result.text
    assert model.calls[1].output is None
    assert validate_history(agent.messages) == []


def test_the_per_call_type_overrides_the_agents() -> None:
    model = ScriptedModel(['{"result": 4}', "free text"])
    agent = Agent(model, output_type=Invoice)
    assert agent.invoke("How many?", output_type=int).output == 4
    assert agent.invoke("Talk", output_type=None).output == "free text"


def test_bad_output_arguments_are_usage_errors_at_once() -> None:
    with pytest.raises(UsageError, match="not a valid JSON schema"):
        Agent(ScriptedModel([]), output_type={"type": "strin"})
    with pytest.raises(UsageError, match="output_retries"):
        Agent(ScriptedModel([]), output_retries=-1)
    agent = Agent(ScriptedModel(["x"]))
    with pytest.raises(UsageError, match="has no JSON schema"):
        agent.invoke("x", output_type=object())
    assert agent.messages == [] and not agent.is_running


def test_a_stream_yields_partials_only_when_they_change() -> None:
    answer = json.dumps({"number": "A-1", "total": 12.5, "lines": ["tea", "milk"]})
    model = ScriptedModel([{"text": answer, "chunk_size": 3}])

    class WithLines(Invoice):
        lines: list[str]

    agent = Agent(model, output_type=WithLines)
    events = list(agent.stream("Extract"))
    partials = [e.partial for e in events if isinstance(e, PartialOutput)]
    assert partials[0] == {}
    assert {"number": "A-1"} in partials
    assert partials[-1] == {"number": "A-1", "total": 12.5, "lines": ["tea", "milk"]}
    shown = [json.dumps(p) for p in partials]
    assert all(a != b for a, b in zip(shown, shown[1:], strict=False))
    done = events[-1]
    assert isinstance(done, Done)
    assert all(e.run_id == done.result.run_id for e in events)
    assert done.result.output.lines == ["tea", "milk"]


def test_partials_come_from_the_output_tools_input_not_the_text_before_it() -> None:
    turn = {
        "text": "Let me {think}",
        "tool_calls": [{"name": "final_result", "input": {"result": [1, 2]}}],
        "chunk_size": 2,
    }
    agent = Agent(ScriptedModel([turn]))
    partials = [
        e.partial for e in agent.stream("N?", output_type=list[int]) if e.type == "partial_output"
    ]
    assert partials[-1] == [1, 2]
    assert all(isinstance(p, list) for p in partials)


def test_cancel_during_a_structured_answer_leaves_a_valid_history() -> None:
    started = threading.Event()
    model = ScriptedModel([{"text": '{"number": "A', "stall_after": 1}, _final(GOOD)])
    agent = Agent(model, output_type=Invoice)
    stream = agent.stream("Extract")
    for event in stream:
        if isinstance(event, PartialOutput):
            started.set()
            assert agent.cancel("enough")
    result = stream.result
    assert started.is_set() and result is not None
    assert result.stop_reason == "cancelled" and result.output is None
    assert agent.messages[-1]["content"][-1] == {"text": CANCELLED_TEXT}
    assert validate_history(agent.messages) == []
    assert agent.invoke("Again").output == Invoice(number="A-1", total=12.5)


def test_the_output_survives_the_runs_state_round_trip_as_json() -> None:
    agent = Agent(ScriptedModel([_final(GOOD)]), output_type=Invoice)
    with agent.steps("Extract") as run:
        steps = list(run)
    assert len(steps) == 1 and steps[0].tool_results[0]["status"] == "success"
    state = run.state
    assert state.output == GOOD
    again = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.output == GOOD and again == state
    assert decode_state(encode_state(state)).output == GOOD  # what every store writes


def test_a_state_written_before_outputs_existed_still_loads() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    with agent.steps("x") as run:
        list(run)
    data = run.state.to_dict()
    assert data["output"] is None
    del data["output"]
    assert RunState.from_dict(data).output is None


def test_without_an_output_type_the_output_is_the_text() -> None:
    agent = Agent(ScriptedModel(["just text"]))
    result = agent.invoke("Hi")
    assert result.output == "just text"


def test_a_resumed_run_answers_with_the_type_given_to_resume() -> None:
    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send the invoice.

        Args:
            to: The recipient.
        """
        return f"sent to {to}"

    turns = [{"tool_calls": [{"name": "send", "input": {"to": "ops"}}]}, _final(GOOD)]
    model = ScriptedModel(turns)
    agent = Agent(model, tools=[send])
    paused = agent.invoke("Send it, then give me the invoice", output_type=Invoice)
    assert paused.stop_reason == "paused" and paused.output is None
    request = agent.pending_approvals[0]
    result = agent.resume({request.id: True}, output_type=Invoice)
    assert result.output == Invoice(number="A-1", total=12.5)
    assert model.calls[1].output is not None
    assert validate_history(agent.messages) == []


_DEEP = '{"number": "A-1", "total": ' + "[" * 3000 + "]" * 3000 + "}"


@pytest.mark.parametrize(
    "answer", [_DEEP, {"tool_calls": [{"name": "final_result", "raw_input": _DEEP}]}]
)
def test_an_answer_nested_too_deep_is_re_asked_with_the_bound(answer: Any) -> None:
    model = ScriptedModel([answer, _final(GOOD)])
    agent = Agent(model, output_type=Invoice)
    assert agent.invoke("Extract").output.number == "A-1"
    assert "nested deeper than 200 levels" in json.dumps(model.calls[1].messages[-1])
    assert validate_history(agent.messages) == []


def test_tool_input_nested_too_deep_is_an_error_result_for_the_model() -> None:
    ran: list[object] = []

    @tool
    def lookup(key: Any) -> str:
        """Look up a key."""
        ran.append(key)
        return "found"

    deep = '{"key": ' + "[" * 3000 + "]" * 3000 + "}"
    model = ScriptedModel([{"tool_calls": [{"name": "lookup", "raw_input": deep}]}, "sorry"])
    agent = Agent(model, tools=[lookup])
    assert agent.invoke("Look").text == "sorry"
    answered = model.calls[1].messages[-1]["content"][0]["toolResult"]
    assert answered["status"] == "error" and ran == []
    assert "nested deeper than 200 levels" in answered["content"][0]["text"]
    assert validate_history(agent.messages) == []
