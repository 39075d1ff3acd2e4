"""Issue 10 item 4: abandoned tool threads count against one process-wide cap.

Tools here ignore cancel and block on an Event that the test sets at the end, so every
thread they hold is released and joined before the test returns (nothing leaks). The order
of events is fixed by Events and log records, never by sleeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from agent_sync import Agent, tool
from agent_sync.errors import UsageError
from agent_sync.messages import CANCELLED_TEXT
from agent_sync.testing import ScriptedModel
from agent_sync.tools import (
    abandoned_tool_threads,
    max_abandoned_tool_threads,
    set_max_abandoned_tool_threads,
)
from tests.fixtures.doubles import BackgroundInvoke, assert_valid

CALLS = 4
TURN = {"tool_calls": [{"name": "stuck", "input": {"n": n}} for n in range(CALLS)]}


class _Records(logging.Handler):
    """Collects the executor's records; ``matched`` is set when ``needle`` is logged."""

    def __init__(self, needle: str) -> None:
        super().__init__(logging.DEBUG)
        self.needle = needle
        self.records: list[logging.LogRecord] = []
        self.matched = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if self.needle in record.getMessage():
            self.matched.set()


class _Stuck:
    """A tool that ignores cancel; counts its starts and remembers its threads."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.lock = threading.Lock()
        self.started = 0
        self.all_started = threading.Event()
        self.threads: list[threading.Thread] = []
        self.tool = tool(name="stuck")(self.run)

    def run(self, n: int) -> str:
        """Blocks until released, ignoring cancel."""
        with self.lock:
            self.started += 1
            self.threads.append(threading.current_thread())
            if self.started == CALLS:
                self.all_started.set()
        self.release.wait(30)
        return f"result {n}"

    def agent(self) -> Agent:
        model = ScriptedModel([TURN], repeat=True)
        return Agent(model, tools=[self.tool], tool_grace_period=0)

    def cancel_when_started(self, agent: Agent) -> None:
        assert self.all_started.wait(10), "the tools did not start"
        assert agent.cancel("test")


@pytest.fixture
def restore_limit() -> Iterator[None]:
    # Tool threads other tests released may still be finishing: let them, so that the
    # count this test reads moves only with its own tools.
    for thread in threading.enumerate():
        if thread.name.startswith("agent_sync-tool-"):
            thread.join(30)
    old = max_abandoned_tool_threads()
    yield
    set_max_abandoned_tool_threads(old)


@pytest.fixture
def executor_log() -> Iterator[_Records]:
    logger = logging.getLogger("agent_sync.tools.executor")
    handler, level = _Records("limit reached"), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_limit_is_readable_and_settable(restore_limit: None) -> None:
    assert max_abandoned_tool_threads() == 64  # the documented default
    set_max_abandoned_tool_threads(3)
    assert max_abandoned_tool_threads() == 3
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(UsageError):
            set_max_abandoned_tool_threads(bad)  # type: ignore[arg-type]
    assert max_abandoned_tool_threads() == 3


def test_abandoned_threads_are_counted_and_capped(
    restore_limit: None, executor_log: _Records
) -> None:
    before = abandoned_tool_threads()
    set_max_abandoned_tool_threads(before + CALLS)  # room for exactly one batch
    release = threading.Event()
    first, second, third = _Stuck(release), _Stuck(release), _Stuck(release)
    try:
        # Run 1 fits under the cap: its four stuck calls are abandoned and counted.
        agent1 = first.agent()
        run1 = BackgroundInvoke(agent1)
        first.cancel_when_started(agent1)
        result1 = run1.result(timeout=30)
        assert result1.stop_reason == "cancelled"
        texts1 = [b["toolResult"]["content"][0]["text"] for b in agent1.messages[2]["content"]]
        assert texts1 == [CANCELLED_TEXT] * CALLS
        assert abandoned_tool_threads() == before + CALLS
        assert not executor_log.matched.is_set()

        # Run 2 would pass the cap: it waits for its tools (no grace period), warning once.
        agent2 = second.agent()
        run2 = BackgroundInvoke(agent2)
        second.cancel_when_started(agent2)
        assert executor_log.matched.wait(10), "no warning at the cap"
        assert run2.thread.is_alive()  # its tools are blocked until release: it must wait
        assert agent2.is_running

        # Run 3 hits the cap too: it waits as well, and the warning is not repeated.
        executor_log.matched.clear()
        agent3 = third.agent()
        run3 = BackgroundInvoke(agent3)
        third.cancel_when_started(agent3)
        assert executor_log.matched.wait(10)
        assert run3.thread.is_alive()
        assert abandoned_tool_threads() == before + CALLS  # never past the cap
        warnings = [r for r in executor_log.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "abandoned tool thread limit reached" in warnings[0].getMessage()
    finally:
        release.set()
    for agent, run in ((agent2, run2), (agent3, run3)):
        result = run.result(timeout=30)
        assert result.stop_reason == "cancelled"
        # It waited, so the real results are in the history, not "Cancelled by user".
        got = [b["toolResult"]["content"][0]["text"] for b in agent.messages[2]["content"]]
        assert got == [f"result {n}" for n in range(CALLS)]
        assert_valid(agent)
    for thread in first.threads + second.threads + third.threads:
        thread.join(30)
        assert not thread.is_alive()
    assert abandoned_tool_threads() == before  # abandoned threads give their slot back
    assert_valid(agent1)


def test_a_limit_of_zero_never_abandons(restore_limit: None, executor_log: _Records) -> None:
    set_max_abandoned_tool_threads(0)
    release = threading.Event()
    stuck = _Stuck(release)
    agent = stuck.agent()
    try:
        run = BackgroundInvoke(agent, timeout=60)
        stuck.cancel_when_started(agent)
        assert executor_log.matched.wait(10)
        assert run.thread.is_alive()
    finally:
        release.set()
    assert run.result(timeout=30).stop_reason == "cancelled"
    for thread in stuck.threads:
        thread.join(30)
    assert_valid(agent)
