"""An agent's conversation in its store is one binding, made once and passed down whole
(issue 33 items 2 and 4): the agent is one class whose state is the runner it owns, and a
sub-agent's child is bound to its caller's store and lease under a conversation of its own."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool
from agent_sync.run._binding import ConversationBinding
from agent_sync.stores import MemoryRunStore
from agent_sync.testing import ScriptedModel


def test_an_agent_is_one_class_whose_state_is_the_runner_it_owns() -> None:
    agent = Agent(ScriptedModel([]))
    assert Agent.__bases__ == (object,)
    assert set(vars(agent)) == {"_runner"}


def test_a_stored_agent_is_bound_once_to_its_conversation() -> None:
    store = MemoryRunStore()
    agent = Agent(
        ScriptedModel([]),
        store=store,
        conversation_id="c1",
        lease_s=7,
        on_owner_lost="resume",
    )
    binding = agent._binding
    assert binding is not None
    assert binding == ConversationBinding(
        store=store, conversation_id="c1", lease_s=7.0, on_owner_lost="resume"
    )
    assert binding.holds(store) and not binding.holds(MemoryRunStore())
    with pytest.raises(dataclasses.FrozenInstanceError):
        binding.lease_s = 1.0  # type: ignore[misc]
    assert Agent(ScriptedModel([]))._binding is None


def test_a_sub_agent_child_is_bound_to_its_callers_store_and_lease() -> None:
    seen: list[ConversationBinding | None] = []

    @tool
    def note(context: ToolContext[Any]) -> str:
        """Note where the run is stored."""
        seen.append(context.agent._binding)
        return "noted"

    template = Agent(  # no store of its own: its children go to the caller's
        ScriptedModel([{"tool_calls": [{"name": "note", "input": {}}]}, "done"]),
        tools=[note],
    )
    store = MemoryRunStore()
    caller = Agent(
        ScriptedModel([{"tool_calls": [{"name": "ask", "input": {"prompt": "go"}}]}, "ok"]),
        tools=[template.as_tool(name="ask", description="Ask the helper")],
        store=store,
        conversation_id="lead",
        lease_s=7,
    )
    assert caller.invoke("start").text == "ok"
    (child,) = seen
    assert child is not None and child.holds(store) and child.lease_s == 7.0
    assert child.conversation_id.startswith("sub_")
    assert template._binding is None  # the template itself is untouched
