"""A tool's direct path (``DirectTool``: what MCP tools use): when every call of a round
would get a worker of its own, such a call starts in the run's own thread and answers
through a callback, from any thread. The rules the batch keeps for it: one result per call
(the first answer wins), errors and failures answered as from a worker, cancel's grace
period and the late answer of an abandoned call, and workers as before when there are
more calls than workers or the tool is not ready.

The tool here hands each call to the test (a queue) and the test answers it, from its own
thread: the order of events is fixed by the queue, never by sleeps.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agent_sync import Agent, ToolContext
from agent_sync.cancel import CancelledError
from agent_sync.events import ToolEnd, ToolStart
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel
from agent_sync.tools import Tool
from tests.fixtures.doubles import BackgroundInvoke, assert_valid

Done = Callable[[Any, "BaseException | None"], None]


class Relay(Tool[Any]):
    """A tool whose calls go to the test: ``started`` gets ``(text, thread name, done)``;
    called the ordinary way (a worker), it answers ``"worker: <text>"``."""

    def __init__(self, *, ready: bool = True, fail: BaseException | None = None) -> None:
        def relay(text: str) -> str:
            """Relays ``text``."""
            return f"worker: {text}"

        super().__init__(relay, name="relay")
        self.ready = ready
        self.fail = fail
        self.started: queue.SimpleQueue[tuple[str, str, Done]] = queue.SimpleQueue()

    def direct_ready(self) -> bool:
        return self.ready

    def start_direct(
        self, arguments: dict[str, Any], context: ToolContext[Any], done: Done
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.started.put((arguments["text"], threading.current_thread().name, done))


def turn(*texts: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "relay", "input": {"text": text}} for text in texts]}


def results(agent: Agent) -> list[Any]:
    return [block["toolResult"] for block in agent.messages[2]["content"]]


def tool_threads() -> set[threading.Thread]:
    """The tool worker threads alive (other tests' abandoned ones included)."""
    return {t for t in threading.enumerate() if t.name.startswith("agent_sync-tool-")}


def test_a_direct_call_starts_in_the_runs_thread_and_its_first_answer_wins() -> None:
    relay = Relay()
    before = tool_threads()
    agent = Agent(ScriptedModel([turn("ping"), "done"]), tools=[relay])
    events: list[Any] = []
    run = threading.Thread(
        target=lambda: events.extend(agent.stream("go")), name="test-run", daemon=True
    )
    run.start()
    text, thread, done = relay.started.get(timeout=10)
    assert (text, thread) == ("ping", "test-run")
    assert tool_threads() <= before  # no worker holds the call
    done("pong", None)
    done("again", None)  # a second answer is ignored
    run.join(10)
    assert not run.is_alive()
    assert results(agent)[0]["content"] == [{"text": "pong"}]
    assert [type(e) for e in events if type(e) in (ToolStart, ToolEnd)] == [ToolStart, ToolEnd]
    assert_valid(agent)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ValueError("bad input"), "Tool 'relay' failed: ValueError: bad input"),
        (None, "Tool 'relay' failed: RuntimeError: no start"),  # start_direct itself raises
    ],
)
def test_a_failed_direct_call_is_an_error_result(
    error: BaseException | None, expected: str
) -> None:
    relay = Relay(fail=None if error is not None else RuntimeError("no start"))
    agent = Agent(ScriptedModel([turn("x"), "done"]), tools=[relay])
    run = BackgroundInvoke(agent)
    if error is not None:
        relay.started.get(timeout=10)[2](None, error)
    run.result()
    (result,) = results(agent)
    assert result["status"] == "error"
    assert result["content"] == [{"text": expected}]
    assert_valid(agent)


def test_a_cancelled_direct_call_that_never_answers_is_abandoned_without_a_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    relay = Relay()
    before = tool_threads()
    agent = Agent(ScriptedModel([turn("stuck"), "never"]), tools=[relay], tool_grace_period=0.05)
    run = BackgroundInvoke(agent)
    done = relay.started.get(timeout=10)[2]
    assert agent.cancel("stop") is True
    result = run.result()
    assert result.stop_reason == "cancelled"
    assert results(agent)[0]["content"] == [{"text": CANCELLED_TEXT}]
    assert tool_threads() <= before  # no thread was left behind
    with caplog.at_level(logging.WARNING, logger="agent_sync.tools.executor"):
        done("too late", None)
    assert "discarding late result of an abandoned tool" in caplog.text
    assert "too late" not in str(agent.messages)
    assert_valid(agent)


def test_a_direct_call_answered_cancelled_is_cancelled_by_user() -> None:
    relay = Relay()
    agent = Agent(ScriptedModel([turn("long"), "never"]), tools=[relay])
    run = BackgroundInvoke(agent)
    done = relay.started.get(timeout=10)[2]
    agent.cancel("stop")
    done(None, CancelledError("stop"))
    assert run.result().stop_reason == "cancelled"
    assert results(agent)[0]["content"] == [{"text": CANCELLED_TEXT}]
    assert_valid(agent)


@pytest.mark.parametrize("how", ["not ready", "more calls than workers"])
def test_otherwise_the_call_runs_in_a_worker_as_before(how: str) -> None:
    relay = Relay(ready=how != "not ready")
    texts = ("a",) if how == "not ready" else ("a", "b", "c")
    agent = Agent(ScriptedModel([turn(*texts), "done"]), tools=[relay], tool_executor="sequential")
    agent.invoke("go")
    assert [r["content"] for r in results(agent)] == [[{"text": f"worker: {t}"}] for t in texts]
    assert relay.started.empty()
    assert_valid(agent)
