"""Hooks: called in the loop's thread with frozen events; may deny or rewrite a tool call;
a hook that raises fails the run with a valid history."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from agent_sync import Agent, Approve, Deny, HookError, tool
from agent_sync.hooks import AfterModelCall, AfterToolCall, BeforeModelCall, BeforeToolCall
from agent_sync.run._hooks import NO_HOOKS, run_hooks
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import assert_valid

RAN: list[dict[str, Any]] = []


@tool
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    RAN.append({"path": path})
    return f"deleted {path}"


def _script() -> list[Any]:
    return [
        {
            "text": "deleting",
            "tool_calls": [{"name": "delete_file", "input": {"path": "/etc/passwd"}}],
        },
        "done",
    ]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, int]] = []

    def before_model_call(self, event: BeforeModelCall) -> None:
        self.calls.append(("before_model_call", event, threading.get_ident()))

    def after_model_call(self, event: AfterModelCall) -> None:
        self.calls.append(("after_model_call", event, threading.get_ident()))

    def before_tool_call(self, event: BeforeToolCall) -> None:
        self.calls.append(("before_tool_call", event, threading.get_ident()))

    def after_tool_call(self, event: AfterToolCall) -> None:
        self.calls.append(("after_tool_call", event, threading.get_ident()))


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def test_hooks_see_every_call_in_order_in_the_loop_thread() -> None:
    recorder = Recorder()
    agent = Agent(ScriptedModel(_script()), tools=[delete_file], hooks=[recorder])
    result = agent.invoke("clean up")
    names = [name for name, _, _ in recorder.calls]
    assert names == [
        "before_model_call",
        "after_model_call",
        "before_tool_call",
        "after_tool_call",
        "before_model_call",
        "after_model_call",
    ]
    assert {ident for _, _, ident in recorder.calls} == {threading.get_ident()}
    events = [event for _, event, _ in recorder.calls]
    assert {event.run_id for event in events} == {result.run_id}
    assert [e.cycle for e in events] == [1, 1, 1, 1, 2, 2]
    assert events[1].message is agent.messages[1] and events[1].stop_reason == "tool_use"
    assert events[3].result["content"] == [{"text": "deleted /etc/passwd"}]
    assert events[4].messages[-1] is agent.messages[2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[0].cycle = 9


def test_a_deny_answers_the_call_with_the_reason_and_the_tool_never_runs() -> None:
    class Guard:
        def before_tool_call(self, event: BeforeToolCall) -> Deny | None:
            if event.tool_use["input"]["path"].startswith("/etc"):
                return Deny("system files are off limits")
            return None

    agent = Agent(ScriptedModel(_script()), tools=[delete_file], hooks=[Guard()])
    assert agent.invoke("clean up").stop_reason == "end_turn"
    assert RAN == []
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    assert "system files are off limits" in result["content"][0]["text"]
    assert_valid(agent)


def test_approve_with_input_runs_the_tool_with_it_and_keeps_what_the_model_asked() -> None:
    seen: list[dict[str, Any]] = []

    class Sandbox:
        def before_tool_call(self, event: BeforeToolCall) -> Approve:
            return Approve(input={"path": "/tmp/sandbox" + event.tool_use["input"]["path"]})

    class Later:
        def before_tool_call(self, event: BeforeToolCall) -> None:
            seen.append(dict(event.tool_use["input"]))

    agent = Agent(ScriptedModel(_script()), tools=[delete_file], hooks=[Sandbox(), Later()])
    agent.invoke("clean up")
    assert RAN == [{"path": "/tmp/sandbox/etc/passwd"}]
    assert seen == [{"path": "/tmp/sandbox/etc/passwd"}]  # later hooks see the new input
    assert agent.messages[1]["content"][1]["toolUse"]["input"] == {"path": "/etc/passwd"}
    assert_valid(agent)


def test_a_replaced_input_is_still_checked_against_the_schema() -> None:
    class Broken:
        def before_tool_call(self, event: BeforeToolCall) -> Approve:
            return Approve(input={"wrong": 1})

    agent = Agent(ScriptedModel(_script()), tools=[delete_file], hooks=[Broken()])
    agent.invoke("clean up")
    assert RAN == []
    assert agent.messages[2]["content"][0]["toolResult"]["status"] == "error"


@pytest.mark.parametrize(
    "method", ["before_model_call", "after_model_call", "before_tool_call", "after_tool_call"]
)
def test_a_hook_that_raises_fails_the_run_with_a_valid_history(method: str) -> None:
    class Boom:
        pass

    def explode(self: object, event: object) -> None:
        raise RuntimeError(f"{method} exploded")

    setattr(Boom, method, explode)
    agent = Agent(ScriptedModel(_script() + ["again"]), tools=[delete_file], hooks=[Boom()])
    with pytest.raises(HookError, match=f"Boom.{method} raised RuntimeError") as raised:
        agent.invoke("clean up")
    assert raised.value.method == method
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert_valid(agent)
    if method == "before_tool_call":
        assert RAN == []


def test_a_hook_returning_nonsense_is_a_hook_error() -> None:
    class Odd:
        def before_tool_call(self, event: BeforeToolCall) -> str:
            return "yes please"

    agent = Agent(ScriptedModel(_script()), tools=[delete_file], hooks=[Odd()])
    with pytest.raises(HookError, match="return None, Approve"):
        agent.invoke("clean up")
    assert RAN == []
    assert_valid(agent)


def test_after_model_call_sees_a_failed_call_and_cannot_mask_its_error() -> None:
    from agent_sync.errors import ModelError

    failures: list[AfterModelCall] = []

    class Watch:
        def after_model_call(self, event: AfterModelCall) -> None:
            failures.append(event)
            raise RuntimeError("hook bug")

    agent = Agent(
        ScriptedModel([{"text": "x", "error": ModelError("down"), "error_after": 1}]),
        hooks=[Watch()],
    )
    with pytest.raises(ModelError, match="down"):
        agent.invoke("go")
    assert len(failures) == 1 and isinstance(failures[0].error, ModelError)
    assert failures[0].message is None


def test_hooks_must_be_a_list() -> None:
    from agent_sync import UsageError

    with pytest.raises(UsageError, match="hooks"):
        Agent(ScriptedModel(["x"]), hooks=Recorder())  # type: ignore[arg-type]


def test_a_run_without_hooks_or_tracing_shares_one_empty_runner() -> None:
    """Hooks are never None, yet cost nothing unused: no runner is built per run."""
    plain = Agent(ScriptedModel(["hi"]))
    assert run_hooks("run_1", plain._settings) is NO_HOOKS
    assert (
        run_hooks("run_1", Agent(ScriptedModel(["hi"]), hooks=[Recorder()])._settings)
        is not NO_HOOKS
    )
