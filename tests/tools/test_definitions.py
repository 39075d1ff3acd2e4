"""What ``@tool`` and ``Agent(tools=...)`` refuse at definition, and what a tool's answer can
never be (issue 22, items 17 and 23): an ``async def`` tool, a coroutine returned at run time,
and a single function where a list of tools belongs."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from agent_sync import Agent, UsageError, tool
from agent_sync.testing import ScriptedModel


async def fetch(url: str) -> str:
    """Fetch a page."""
    return url


async def pages(url: str) -> AsyncIterator[str]:
    """Stream a page."""
    yield url


class AsyncCallable:
    """An object whose ``__call__`` is a coroutine function."""

    __name__ = "async_callable"

    async def __call__(self, url: str) -> str:
        return url


@pytest.mark.parametrize(
    "fn",
    [fetch, pages, functools.partial(fetch), AsyncCallable()],
    ids=["async-def", "async-generator", "partial-of-async", "async-__call__"],
)
def test_an_async_function_is_refused_at_definition(fn: Any) -> None:
    with pytest.raises(UsageError, match="async tools are not supported yet"):
        tool(fn)
    with pytest.raises(UsageError, match="async tools are not supported yet"):
        Agent(ScriptedModel(["hi"]), tools=[fn])  # a plain function is wrapped: same rule


def test_a_coroutine_returned_at_run_time_is_an_error_result_never_its_repr() -> None:
    made: list[Coroutine[Any, Any, str]] = []

    @tool
    def sneaky(url: str) -> Any:
        """Looks sync, returns a coroutine."""
        made.append(fetch(url))
        return made[-1]

    turns = [{"tool_calls": [{"name": "sneaky", "input": {"url": "u"}}]}, "done"]
    agent = Agent(ScriptedModel(turns), tools=[sneaky])
    assert agent.invoke("go").text == "done"
    result = agent.messages[2]["content"][0]["toolResult"]
    text = result["content"][0]["text"]
    assert result["status"] == "error"
    assert "returned coroutine object instead of a result" in text
    assert "async tools are not supported yet" in text and "<coroutine" not in text
    assert made[0].cr_frame is None  # closed: never awaited on purpose, no RuntimeWarning


def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (get_weather, r"tools must be a list .* write tools=\[get_weather\]"),
        (tool(get_weather), r"tools must be a list .* write tools=\[get_weather\]"),
        ("get_weather", "tools must be a list of @tool functions, got str"),
        ({"get_weather": get_weather}, "tools must be a list of @tool functions, got dict"),
        (42, "tools must be a list of @tool functions, got int"),
        ([get_weather, "get_weather"], r"tools\[1\] must be a @tool or a function, got str"),
        ([get_weather, get_weather], "two tools are named 'get_weather'"),
    ],
)
def test_tools_must_be_a_list_of_functions(tools: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Agent(ScriptedModel(["hi"]), tools=tools)


def test_a_tuple_or_a_generator_of_tools_is_a_list() -> None:
    assert list(Agent(ScriptedModel(["hi"]), tools=(get_weather,)).tools) == ["get_weather"]
    agent = Agent(ScriptedModel(["hi"]), tools=(f for f in [get_weather]))
    assert list(agent.tools) == ["get_weather"]
