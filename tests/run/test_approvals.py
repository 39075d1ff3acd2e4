"""Human approval without a store: pause before a gated call, resume with decisions, cancel
while paused; every rule of DESIGN.md section 6 that needs no store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_sync import (
    Agent,
    ApprovalRequest,
    Approve,
    Deny,
    RunState,
    ToolContext,
    UsageError,
    tool,
    validate_history,
)
from agent_sync.errors import DecisionValidationError, PendingApprovalError
from agent_sync.events import ApprovalRequired, Done
from agent_sync.messages import CANCELLED_TEXT, ToolUse
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import assert_valid, texts

DELETED: list[dict[str, Any]] = []


@tool(
    requires_approval=True,
    decision_schema={
        "type": "object",
        "properties": {"ticket": {"type": "string"}},
        "required": ["ticket"],
    },
)
def delete_file(path: str, context: ToolContext) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    decision = context.decision
    DELETED.append({"path": path, "data": decision.data if decision else None})
    return f"deleted {path}"


def _only_outside_tmp(tool_use: ToolUse, context: ToolContext) -> bool:
    return not tool_use["input"]["path"].startswith("/tmp/")


@tool(requires_approval=_only_outside_tmp)
def remove(path: str) -> str:
    """Remove a path (approval needed outside /tmp).

    Args:
        path: The path.
    """
    DELETED.append({"path": path})
    return f"removed {path}"


@tool
def look(path: str) -> str:
    """Look at a path.

    Args:
        path: The path.
    """
    return f"{path} exists"


@pytest.fixture(autouse=True)
def _clear() -> None:
    DELETED.clear()


def _asks(*calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "text": "on it",
        "tool_calls": [{"name": name, "input": {"path": path}} for name, path in calls],
    }


def _agent(*turns: Any, **options: Any) -> Agent:
    return Agent(ScriptedModel(list(turns)), tools=[delete_file, remove, look], **options)


def test_a_gated_call_pauses_the_run_and_nothing_runs() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x"), ("look", "/etc")), "done")
    result = agent.invoke("clean up")
    assert result.stop_reason == "paused"
    assert agent.is_paused and not agent.is_running
    (request,) = result.approvals
    assert isinstance(request, ApprovalRequest)
    assert request.id.startswith("apr_")
    assert request.tool_use["name"] == "delete_file"
    assert request.schema == delete_file.decision_schema
    assert request.expires_at is None
    assert agent.pending_approvals == result.approvals
    assert DELETED == []
    assert agent.messages[-1]["role"] == "assistant"  # the calls wait for their answer


def test_resume_with_approve_runs_the_call_and_the_run_goes_on() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x"), ("look", "/etc")), "done")
    paused = agent.invoke("clean up")
    (request,) = paused.approvals
    result = agent.resume({request.id: Approve(data={"ticket": "T-1"})})
    assert result.stop_reason == "end_turn" and result.text == "done"
    assert result.run_id == paused.run_id
    assert DELETED == [{"path": "/etc/x", "data": {"ticket": "T-1"}}]
    results = [b["toolResult"] for b in agent.messages[2]["content"]]
    assert [r["status"] for r in results] == ["success", "success"]
    assert not agent.is_paused
    assert_valid(agent)


def test_deny_answers_with_the_reason_and_the_run_goes_on() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "ok, I will not")
    request = agent.invoke("clean up").approvals[0]
    result = agent.resume({request.id: Deny("not on a Friday")})
    assert result.stop_reason == "end_turn"
    denied = agent.messages[2]["content"][0]["toolResult"]
    assert denied["status"] == "error" and "not on a Friday" in denied["content"][0]["text"]
    assert DELETED == []
    assert_valid(agent)


def test_false_is_deny_and_true_fails_a_schema_with_required_fields() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "fine")
    request = agent.invoke("clean up").approvals[0]
    with pytest.raises(DecisionValidationError, match="ticket"):
        agent.resume({request.id: True})
    assert agent.is_paused and DELETED == []
    agent.resume({request.id: False})
    assert agent.messages[2]["content"][0]["toolResult"]["status"] == "error"
    assert_valid(agent)


def test_approve_with_input_runs_that_input_after_checking_it() -> None:
    agent = _agent(_asks(("remove", "/etc/x")), "done")
    request = agent.invoke("clean up").approvals[0]
    with pytest.raises(DecisionValidationError, match="path"):
        agent.resume({request.id: Approve(input={"wrong": 1})})
    assert agent.is_paused
    agent.resume({request.id: Approve(input={"path": "/tmp/x"})})
    assert DELETED == [{"path": "/tmp/x"}]
    assert agent.messages[1]["content"][1]["toolUse"]["input"] == {"path": "/etc/x"}


def test_a_gate_callable_gates_only_some_inputs() -> None:
    agent = _agent(_asks(("remove", "/tmp/scratch")), "done")
    assert agent.invoke("clean up").stop_reason == "end_turn"
    assert DELETED == [{"path": "/tmp/scratch"}]
    agent = _agent(_asks(("remove", "/home/me"), ("remove", "/tmp/a")), "done")
    result = agent.invoke("clean up")
    assert [r.tool_use["input"]["path"] for r in result.approvals] == ["/home/me"]


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ({}, "has no decision"),
        ({"apr_nope": True}, "unknown request id"),
        ("yes", "must be a dict"),
    ],
)
def test_partial_or_invalid_decisions_change_nothing(decisions: Any, message: str) -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    agent.invoke("clean up")
    before = json.dumps(agent.messages)
    with pytest.raises(DecisionValidationError) as raised:
        agent.resume(decisions)
    assert any(message in problem for problem in raised.value.problems)
    assert agent.is_paused and json.dumps(agent.messages) == before and DELETED == []


def test_a_wrong_decision_type_is_named() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    request = agent.invoke("clean up").approvals[0]
    with pytest.raises(DecisionValidationError, match="True, False, Approve"):
        agent.resume({request.id: "yes"})  # type: ignore[dict-item]
    assert isinstance(DecisionValidationError(["x"]), UsageError)


def test_while_paused_invoke_stream_and_steps_raise_and_touch_nothing() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    agent.invoke("clean up")
    before = json.dumps(agent.messages)
    for start in (agent.invoke, agent.stream, agent.steps):
        with pytest.raises(PendingApprovalError):
            start("something else")
    with pytest.raises(PendingApprovalError):
        agent.messages = []
    assert json.dumps(agent.messages) == before and agent.is_paused


def test_cancel_while_paused_closes_the_turn_and_frees_the_agent() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x"), ("look", "/")), "next answer")
    agent.invoke("clean up")
    assert agent.cancel("changed my mind") is True
    assert not agent.is_paused
    answers = [b["toolResult"] for b in agent.messages[2]["content"]]
    assert [a["content"] for a in answers] == [[{"text": CANCELLED_TEXT}]] * 2
    assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
    assert_valid(agent)
    assert agent.cancel() is False
    with pytest.raises(UsageError, match="nothing to resume"):
        agent.resume({})
    assert agent.invoke("go on").text == "next answer"


def test_stream_tells_of_the_pause_after_it_is_committed() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    seen_paused: list[bool] = []
    events = []
    with agent.stream("clean up") as stream:
        for event in stream:
            events.append(event)
            if isinstance(event, ApprovalRequired):
                seen_paused.append(agent.is_paused)
    assert seen_paused == [True]
    required = next(e for e in events if isinstance(e, ApprovalRequired))
    done = events[-1]
    assert isinstance(done, Done) and done.result.stop_reason == "paused"
    assert done.result.approvals == required.approvals
    assert stream.run.state.status == "paused"


def test_the_paused_state_is_data() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    with agent.stream("clean up") as stream:
        list(stream)
    state = stream.run.state
    assert (state.status, state.next_step) == ("paused", "tools")
    assert [t["name"] for t in state.pending_tool_uses] == ["delete_file"]
    again = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state and again.approvals == state.approvals


def test_an_expired_request_is_denied_when_the_run_is_resumed() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done", approval_timeout=1e-9)
    request = agent.invoke("clean up").approvals[0]
    assert request.expires_at is not None
    agent.resume({})  # nothing to answer: the request has expired
    denied = agent.messages[2]["content"][0]["toolResult"]
    assert "approval expired" in denied["content"][0]["text"]
    assert DELETED == []
    assert_valid(agent)


def test_input_injected_before_the_pause_is_kept_for_the_resumed_run() -> None:
    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    with agent.stream("clean up") as stream:
        for event in stream:
            if event.type == "message" and event.message["role"] == "assistant":
                stream.inject("and be careful")
    with pytest.raises(UsageError):
        stream.inject("too late: the run is paused")
    request = agent.pending_approvals[0]
    agent.resume({request.id: Approve(data={"ticket": "T-2"})})
    assert {"text": "and be careful"} in agent.messages[2]["content"]
    assert "too late" not in json.dumps(agent.messages)
    assert validate_history(agent.messages) == []


def test_resume_can_pause_again() -> None:
    agent = _agent(_asks(("delete_file", "/a")), _asks(("delete_file", "/b")), "done")
    first = agent.invoke("clean up").approvals[0]
    again = agent.resume({first.id: Approve(data={"ticket": "1"})})
    assert again.stop_reason == "paused" and again.approvals[0].id != first.id
    final = agent.resume({again.approvals[0].id: Approve(data={"ticket": "2"})})
    assert final.stop_reason == "end_turn"
    assert [d["path"] for d in DELETED] == ["/a", "/b"]
    assert_valid(agent)


def test_a_decision_answers_its_round_only_never_a_later_call_reusing_the_id() -> None:
    same_id = {"id": "tooluse_same", "name": "delete_file", "input": {"path": "/a"}}
    agent = _agent({"tool_calls": [same_id]}, {"tool_calls": [same_id]}, "done")
    first = agent.invoke("clean up").approvals[0]
    again = agent.resume({first.id: Approve(data={"ticket": "1"})})
    assert again.stop_reason == "paused"  # the model's second call is asked about again
    assert again.approvals[0].tool_use["toolUseId"] == "tooluse_same"
    assert [d["path"] for d in DELETED] == ["/a"]


def test_resume_stream_checks_at_once_then_yields_the_rest_of_the_run() -> None:
    agent = _agent(_asks(("delete_file", "/a")), "done")
    paused = agent.invoke("clean up")
    request = paused.approvals[0]
    with pytest.raises(DecisionValidationError):
        agent.resume_stream({"apr_unknown": True})  # before any event
    assert agent.is_paused and DELETED == []
    events = list(agent.resume_stream({request.id: Approve(data={"ticket": "1"})}))
    assert [e.type for e in events][:2] == ["tool_start", "tool_end"]
    done = events[-1]
    assert isinstance(done, Done) and done.result.text == "done"
    assert {e.run_id for e in events} == {paused.run_id}  # the same run goes on
    assert DELETED == [{"path": "/a", "data": {"ticket": "1"}}]
    assert_valid(agent)


def test_invalid_tool_options_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="requires_approval"):
        tool(requires_approval="yes")(look.fn)  # type: ignore[call-overload]
    with pytest.raises(UsageError, match="decision_schema"):
        tool(decision_schema="object")(look.fn)  # type: ignore[call-overload]


def _race_two_resumes() -> list[str]:
    import threading

    agent = _agent(_asks(("delete_file", "/etc/x")), "done")
    request = agent.invoke("clean up").approvals[0]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def resume() -> None:
        barrier.wait(10)
        try:
            agent.resume({request.id: Approve(data={"ticket": "T"})})
            outcomes.append("resumed")
        except UsageError as exc:  # ConcurrentInvocationError, or nothing left to resume
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=resume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert_valid(agent)
    return outcomes


@pytest.mark.timeout(60)
def test_two_threads_resuming_at_once_run_the_tool_once() -> None:
    for _ in range(20):
        DELETED.clear()
        outcomes = _race_two_resumes()
        assert outcomes.count("resumed") == 1, outcomes
        assert len(DELETED) == 1


# Every keyword of a decision_schema is enforced through the real resume path (issue 22,
# item 10): the old hand-written validator checked type/enum/required only, so each of
# these decisions resumed the run and the gated tool ran.
SIGN_OFF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ticket": {"type": "string", "pattern": "^T-[0-9]+$"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 9},
        "when": {"type": "string", "format": "date"},
        "mail": {"type": "string", "format": "email"},
        "level": {"$ref": "#/$defs/level"},
        "who": {"oneOf": [{"type": "string", "minLength": 2}, {"type": "integer"}]},
    },
    "required": ["ticket"],
    "additionalProperties": False,
    "$defs": {"level": {"enum": ["low", "high"]}},
}


@tool(requires_approval=True, decision_schema=SIGN_OFF_SCHEMA)
def sign_off(path: str, context: ToolContext) -> str:
    """Sign a path off.

    Args:
        path: The path.
    """
    decision = context.decision
    DELETED.append({"path": path, "data": decision.data if decision else None})
    return f"signed {path}"


@pytest.mark.parametrize(
    ("data", "field", "problem"),
    [
        ({"ticket": "T-x"}, "data.ticket", "does not match"),
        ({"ticket": "T-1", "seats": 0}, "data.seats", "less than the minimum of 1"),
        ({"ticket": "T-1", "when": "tomorrow"}, "data.when", "is not a 'date'"),
        ({"ticket": "T-1", "mail": "nobody"}, "data.mail", "is not a 'email'"),
        ({"ticket": "T-1", "level": "max"}, "data.level", "is not one of 'low', 'high'"),
        ({"ticket": "T-1", "who": "x"}, "data.who", "is too short"),
        ({"ticket": "T-1", "note": "hi"}, "data", "'note' was unexpected"),
        ({}, "data", "missing required parameter 'ticket'"),
    ],
)
def test_every_keyword_of_a_decision_schema_is_enforced_on_resume(
    data: dict[str, Any], field: str, problem: str
) -> None:
    agent = Agent(ScriptedModel([_asks(("sign_off", "/r")), "done"]), tools=[sign_off])
    paused = agent.invoke("sign it")
    (request,) = paused.approvals
    before = json.dumps(agent.messages)
    with pytest.raises(DecisionValidationError) as raised:
        agent.resume({request.id: Approve(data=data)})
    assert any(p.startswith(f"request {request.id}: {field}") for p in raised.value.problems)
    assert any(problem in p for p in raised.value.problems), raised.value.problems
    assert agent.is_paused and json.dumps(agent.messages) == before and DELETED == []
    good = {"ticket": "T-7", "seats": 2, "when": "2026-11-26", "level": "low", "who": 3}
    assert agent.resume({request.id: Approve(data=good)}).text == "done"
    assert DELETED == [{"path": "/r", "data": good}]


def test_deny_data_is_checked_against_the_schema_too() -> None:
    agent = Agent(ScriptedModel([_asks(("sign_off", "/r")), "ok"]), tools=[sign_off])
    request = agent.invoke("sign it").approvals[0]
    with pytest.raises(DecisionValidationError, match=r"data\.ticket"):
        agent.resume({request.id: Deny("no", data={"ticket": "nope"})})
    assert agent.is_paused
    agent.resume({request.id: Deny("no", data={"ticket": "T-2"})})
    assert DELETED == []


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "strin"}, "not a valid JSON schema"),
        ({"type": "string", "pattern": "["}, "'[' is not a 'regex'"),
        ({"type": "integer", "minimum": "1"}, "not a valid JSON schema"),
        ({"$ref": "#/$defs/missing"}, "'#/$defs/missing' cannot be resolved"),
        ({"$ref": "https://example.com/s.json"}, "never fetched"),
        ({"type": "string", "format": "phone"}, "unknown format 'phone'"),
        ({"const": float("nan")}, "plain JSON"),
        ("object", "must be a JSON schema"),
    ],
)
def test_an_invalid_decision_schema_is_refused_when_the_tool_is_built(
    schema: Any, message: str
) -> None:
    with pytest.raises(UsageError, match="decision_schema") as raised:
        tool(requires_approval=True, decision_schema=schema)(look.fn)
    assert message in str(raised.value)


def test_the_schema_is_the_tools_own_copy() -> None:
    schema: dict[str, Any] = {"type": "object", "required": ["ticket"]}
    copied = tool(requires_approval=True, decision_schema=schema)(look.fn)
    schema["required"] = []  # the caller's dict changes later: the tool keeps its rule
    assert copied.decision_schema == {"type": "object", "required": ["ticket"]}
    assert copied.validate_decision_data({}) == ["data: missing required parameter 'ticket'"]
