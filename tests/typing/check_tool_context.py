"""Type-checked, not run by pytest: ``mypy --strict`` over this file fails if
``ToolContext[Deps]`` stops typing ``context.deps`` (``tests/test_docs.py`` runs it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from typing_extensions import assert_type

from agent_sync import Agent, ToolContext, tool
from agent_sync.testing import ScriptedModel


@dataclass
class Deps:
    db: dict[str, str]


@tool
def lookup(key: str, context: ToolContext[Deps]) -> str:
    assert_type(context.deps, Deps)
    assert_type(context.deps.db, dict[str, str])
    return context.deps.db[key]


@tool
def untyped(key: str, context: ToolContext[Any]) -> str:
    return str(context.deps)


def per_call(agent: Agent) -> None:
    agent.invoke("x", deps=Deps(db={}), params={"temperature": 0})
    agent.stream("x", deps=Deps(db={}), params={"temperature": 0})
    Agent(ScriptedModel(["ok"]), tools=[lookup, untyped], deps=Deps(db={}))
