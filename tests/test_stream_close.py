"""AgentStream.close() from another thread while one thread iterates (DESIGN.md 4a).

The interpreter's switch interval is cut to a microsecond to interleave the two threads at
many more points; whatever the interleaving: no exception in either thread, at most one
closing "Cancelled by user" message, a valid history and an idle agent.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

import pytest

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync.events import ToolStart
from agent_sync.messages import CANCELLED_TEXT, Message
from agent_sync.testing import ScriptedModel
from tests.fixtures.soak import rounds


@tool
def lookup(q: str, context: ToolContext) -> str:
    """Cooperative lookup.

    Args:
        q: What to look up.
    """
    context.wait(0)
    return f"result for {q}"


SCRIPT = [
    {
        "text": "Let me look that up. " * 3,
        "chunk_size": 3,
        "tool_calls": [{"name": "lookup", "input": {"q": "a"}}],
    },
    {"text": "Here is the answer you wanted. " * 4, "chunk_size": 3},
]


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def closing_messages(messages: list[Message]) -> int:
    return sum(
        1 for m in messages if m["role"] == "assistant" and {"text": CANCELLED_TEXT} in m["content"]
    )


def one_race(rng: random.Random) -> list[str]:
    """Thread A iterates; thread B closes at a random moment once A is about to start."""
    agent = Agent(ScriptedModel(SCRIPT, repeat=True), tools=[lookup])
    stream = agent.stream("question")
    starting = threading.Event()
    spin = rng.randrange(300)  # where B lands: spread by work, not by time
    problems: list[str] = []

    def iterate() -> None:
        try:
            starting.set()
            for _ in stream:
                pass
        except BaseException as exc:  # reported to the test
            problems.append(f"iterating thread raised {exc!r}")

    def close() -> None:
        try:
            assert starting.wait(10)
            for _ in range(spin):
                pass
            stream.close()
        except BaseException as exc:  # reported to the test
            problems.append(f"closing thread raised {exc!r}")

    threads = [
        threading.Thread(target=iterate, name="test-iterate"),
        threading.Thread(target=close, name="test-close"),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
        if thread.is_alive():
            problems.append(f"{thread.name} hung")
    if agent.is_running:
        problems.append("agent still running")
    problems.extend(validate_history(agent.messages))
    if closing_messages(agent.messages) > 1:
        problems.append(f"{closing_messages(agent.messages)} closing messages")
    if not problems:
        follow_up = agent.invoke("and now?")  # usable again
        if follow_up.stop_reason != "end_turn" or validate_history(agent.messages):
            problems.append("the agent did not work after the race")
    return problems


@pytest.mark.usefixtures("tiny_switch_interval")
def test_close_from_another_thread_while_iterating_is_safe() -> None:
    rng = random.Random(3)
    problems: list[str] = []
    for _ in range(rounds(150)):  # python bench/soak_stress.py runs many more
        problems.extend(one_race(rng))
    assert problems == []


def test_next_while_another_thread_is_ending_the_run_stops_cleanly() -> None:
    """B's close() is inside the loop's cleanup (waiting for a tool) when A calls next():
    A's iteration stops; the generator never runs in two threads at once."""
    cancel_seen, release = threading.Event(), threading.Event()

    @tool
    def stubborn(context: ToolContext) -> str:
        """Notices the cancel, then takes its time to return."""
        context.cancel_event.wait(10)
        cancel_seen.set()
        release.wait(10)
        return "late but done"

    model = ScriptedModel([{"tool_calls": [{"name": "stubborn", "input": {}}]}, "after"])
    agent = Agent(model, tools=[stubborn], tool_grace_period=10)
    stream = agent.stream("go")
    for event in stream:
        if isinstance(event, ToolStart):
            break
    closer = threading.Thread(target=stream.close, name="test-close")
    closer.start()
    assert cancel_seen.wait(10)
    with pytest.raises(StopIteration):
        next(stream)  # not "ValueError: generator already executing"
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert closing_messages(agent.messages) == 1
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["content"] == [{"text": "late but done"}]


def test_close_while_another_thread_is_inside_next_lets_that_thread_end_the_run() -> None:
    """B's close() returns at once; A, blocked in the model, ends the run itself."""
    model = ScriptedModel([{"text": "Partial answer, then silence", "stall_after": 2}])
    agent = Agent(model)
    stream = agent.stream("question")
    first = next(stream)  # messageStart is buffered: this is the first text delta
    assert first is not None
    ended = threading.Event()
    outcome: list[object] = []

    def iterate() -> None:
        outcome.extend(stream)  # blocks in the stall until the close cancels it
        ended.set()

    reader = threading.Thread(target=iterate, name="test-iterate")
    reader.start()
    # Whether or not the reader has entered next() yet, close() must end the run once.
    stream.close()
    assert ended.wait(10)
    reader.join(10)
    assert not agent.is_running
    assert stream.result is not None and stream.result.stop_reason == "cancelled"
    assert closing_messages(agent.messages) == 1
    assert validate_history(agent.messages) == []


def test_close_is_idempotent_and_next_after_close_stops() -> None:
    agent = Agent(ScriptedModel(["one two three four"]))
    stream = agent.stream("q")
    next(stream)
    stream.close()
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    assert not agent.is_running
    assert closing_messages(agent.messages) == 1
    assert validate_history(agent.messages) == []
