"""What ``@tool`` and ``Agent(tools=...)`` accept (issue 22, items 17 and 23, and DESIGN.md
section 10): an ``async def`` tool runs on a private event loop in its worker thread and a
cancel cancels its task at once; a tool's answer is never an awaitable's repr; an async
generator, a nameless callable, or a single function where a list of tools belongs is a
``UsageError``."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Generator
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, UsageError, tool
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel


def _run(fn: Any, tool_input: dict[str, Any], **options: Any) -> tuple[Agent, dict[str, Any]]:
    turns = [{"tool_calls": [{"name": "t", "input": tool_input}]}, "done"]
    agent = Agent(ScriptedModel(turns), tools=[tool(name="t")(fn)], **options)
    agent.invoke("go")
    result: dict[str, Any] = agent.messages[2]["content"][0]["toolResult"]
    return agent, result


async def fetch(url: str) -> str:
    """Fetch a page."""
    await asyncio.sleep(0)
    return f"page at {url}"


def test_an_async_def_tool_is_awaited_and_its_result_is_the_answer() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def fetch_here(url: str) -> str:
        loops.append(asyncio.get_running_loop())
        return await fetch(url)

    agent, result = _run(fetch_here, {"url": "u"})
    assert result == {"toolUseId": result["toolUseId"], "status": "success",
                      "content": [{"text": "page at u"}]}  # fmt: skip
    assert loops[0].is_closed()  # a private loop, for this call only
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # none left running in the invoking thread


def test_a_coroutine_returned_by_a_plain_def_is_awaited_too() -> None:
    made: list[Any] = []

    def wrapped(url: str) -> Any:  # e.g. a decorator that lost the async marker
        made.append(fetch(url))
        return made[-1]

    _, result = _run(wrapped, {"url": "u"})
    assert result["content"] == [{"text": "page at u"}]
    assert made[0].cr_frame is None  # ran to its end: no "never awaited" RuntimeWarning


class _Awaitable:
    def __await__(self) -> Generator[Any, None, str]:
        yield from ()
        return "never"


@pytest.mark.parametrize("value", [_Awaitable(), asyncio.Future], ids=["awaitable", "future"])
def test_another_awaitable_is_an_error_result_never_its_repr(value: Any) -> None:
    loop = asyncio.new_event_loop()
    try:
        returned = value(loop=loop) if value is asyncio.Future else value

        def odd(url: str) -> Any:
            return returned

        _, result = _run(odd, {"url": "u"})
    finally:
        loop.close()
    text = result["content"][0]["text"]
    assert result["status"] == "error" and "instead of a result" in text
    assert "<" not in text and "object at 0x" not in text


def test_an_exception_in_an_async_tool_is_an_error_result() -> None:
    async def broken(url: str) -> str:
        await asyncio.sleep(0)
        raise ValueError(f"no page at {url}")

    _, result = _run(broken, {"url": "u"})
    assert result["status"] == "error"
    assert "ValueError: no page at u" in result["content"][0]["text"]


def test_a_cancel_cancels_the_task_at_once() -> None:
    """The tool awaits something that never comes; the grace period is long, so only a
    cancel that reaches the task ends the call before the test's timeout (an abandoned tool
    would never run its ``except`` block)."""
    entered = threading.Event()
    seen: list[str] = []
    leftover: list[asyncio.Task[None]] = []

    async def forever(url: str) -> str:
        leftover.append(asyncio.get_running_loop().create_task(asyncio.Event().wait()))
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled at its await")
            raise
        return "never"

    turns = [{"tool_calls": [{"name": "t", "input": {"url": "u"}}]}, "done"]
    agent = Agent(ScriptedModel(turns), tools=[tool(name="t")(forever)], tool_grace_period=30)
    canceller = threading.Thread(target=lambda: entered.wait(30) and agent.cancel("stop"))
    canceller.start()
    result = agent.invoke("go")
    canceller.join(30)
    assert result.stop_reason == "cancelled"
    assert seen == ["cancelled at its await"]
    assert leftover[0].cancelled()  # what the tool left running is cancelled too
    answer = agent.messages[2]["content"][0]["toolResult"]
    assert answer["status"] == "error" and answer["content"][0]["text"] == CANCELLED_TEXT


def test_an_async_tool_gets_its_context() -> None:
    async def ask(question: str, context: ToolContext) -> str:
        return f"{question} in run {context.run_id}"

    agent, result = _run(ask, {"question": "q"})
    assert result["content"][0]["text"].startswith("q in run run_")
    assert tool(ask).input_schema["properties"] == {"question": {"type": "string"}}


async def pages(url: str) -> AsyncIterator[str]:
    """Stream a page."""
    yield url


class _AsyncGeneratorCall:
    __name__ = "agen"

    async def __call__(self, url: str) -> AsyncIterator[str]:
        yield url


@pytest.mark.parametrize("fn", [pages, _AsyncGeneratorCall()], ids=["function", "__call__"])
def test_an_async_generator_is_refused_at_definition(fn: Any) -> None:
    with pytest.raises(UsageError, match="async generator function"):
        tool(fn)


def test_a_callable_without_a_name_must_be_named() -> None:
    with pytest.raises(UsageError, match=r"has no __name__: name the tool with @tool\(name="):
        tool(functools.partial(fetch))


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
