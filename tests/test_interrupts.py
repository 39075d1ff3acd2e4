"""Ctrl-C (KeyboardInterrupt) at any moment of invoke()/stream() leaves the agent idle, the
history valid, and the next call working (DESIGN.md 4a).

Random SIGINTs run in a child process, so a stray signal can never kill the pytest run; in
process, KeyboardInterrupt comes only from code the test controls: a tool that sends SIGINT
to the main thread (as a terminal's Ctrl-C does), or a model stream that raises it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.events import ToolStart
from agent_sync.messages import CANCELLED_TEXT, StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.testing import ScriptedModel
from tests.fixtures.soak import rounds

ROOT = Path(__file__).resolve().parent.parent

# One random SIGINT per invoke; after each, wait (on signal.set_wakeup_fd, not on time) until
# the signal has been handled, wherever it landed, then check the agent. Prints one JSON line.
CHILD = r"""
import json, os, random, signal, sys, threading
from agent_sync import Agent, ConcurrentInvocationError, validate_history
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND

count, timeout, seed = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
timeout = None if timeout == "none" else float(timeout)
rng = random.Random(seed)
handled = 0
armed = False  # the handler raises only inside the try below: a SIGINT that lands after it
               # (the byte read off the wakeup fd before the handler ran) is just counted

package_handler = signal.getsignal(signal.SIGINT)  # agent_sync's: defers in a release

def on_sigint(signum, frame):
    global handled
    handled += 1
    if armed:
        package_handler(signum, frame)  # chained, as an application's handler should

read_end, write_end = os.pipe()
os.set_blocking(write_end, False)
signal.set_wakeup_fd(write_end)
signal.signal(signal.SIGINT, on_sigint)
pid = os.getpid()
seen = {"interrupted": 0, "returned": 0, "stuck": 0, "invalid": 0, "next_failed": 0}
agent = Agent(ScriptedModel(["quick answer"], repeat=True))
for n in range(1, count + 1):
    timer = threading.Timer(rng.uniform(0, 0.002), os.kill, (pid, signal.SIGINT))
    try:
        armed = True
        timer.start()
        agent.invoke("question", timeout=timeout)
        seen["returned"] += 1
    except KeyboardInterrupt:
        seen["interrupted"] += 1
    finally:
        armed = False
    while handled < n:  # the signal may land after invoke returned: wait for its handler
        os.read(read_end, 1)  # returns once the C-level handler has run
    timer.join(HANG_BOUND)
    if agent.is_running:
        seen["stuck"] += 1
        agent = Agent(ScriptedModel(["quick answer"], repeat=True))
        continue
    if validate_history(agent.messages):
        seen["invalid"] += 1
        agent = Agent(ScriptedModel(["quick answer"], repeat=True))
        continue
    try:
        agent.invoke("next")
    except ConcurrentInvocationError:
        seen["next_failed"] += 1
    if validate_history(agent.messages) or agent.is_running:
        seen["invalid"] += 1
        agent = Agent(ScriptedModel(["quick answer"], repeat=True))
    if len(agent.messages) > 200:
        agent = Agent(ScriptedModel(["quick answer"], repeat=True))
signal.set_wakeup_fd(-1)
print(json.dumps(seen))
"""


def run_child(count: int, timeout: str, seed: int) -> dict[str, int]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p
    )  # an inherited PYTHONPATH (e.g. an old worktree) comes first
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(count), timeout, str(seed)],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.parametrize("timeout", ["none", "30"])
def test_random_sigints_never_leave_the_agent_running(timeout: str) -> None:
    count = rounds(100)  # python bench/soak_interrupts.py sends thousands
    seen = run_child(count, timeout, seed=7)
    assert (seen["stuck"], seen["invalid"], seen["next_failed"]) == (0, 0, 0), seen
    assert seen["interrupted"] + seen["returned"] == count - seen["stuck"] - seen["invalid"]


# Real SIGINTs at random moments while the main thread schedules and cancels deadlines
# (each lands somewhere in the scheduler's caller-side code); after each, another thread
# checks that a due deadline still fires. Prints one JSON line.
CHURN_CHILD = r"""
import json, os, random, signal, sys, threading
from agent_sync._deadlines import schedule
from tests.fixtures.bounds import HANG_BOUND

count, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
handled = 0
armed = False  # as in the agent child: the handler raises only inside the try below

def on_sigint(signum, frame):
    global handled
    handled += 1
    if armed:
        raise KeyboardInterrupt

read_end, write_end = os.pipe()
os.set_blocking(write_end, False)
signal.set_wakeup_fd(write_end)
signal.signal(signal.SIGINT, on_sigint)
pid = os.getpid()
report = {"interrupts": 0, "wedged_after": None}
for n in range(1, count + 1):
    timer = threading.Timer(rng.uniform(0, 0.002), os.kill, (pid, signal.SIGINT))
    try:
        armed = True
        timer.start()
        # Until the SIGINT lands: its handler ran (CPython swallows the KeyboardInterrupt
        # when the signal lands in a garbage-collector weakref callback, so an endless loop
        # could spin on after it).
        while handled < n:
            schedule(rng.uniform(0, 60), int).cancel()
    except KeyboardInterrupt:
        pass
    finally:
        armed = False
    report["interrupts"] += handled == n
    while handled < n:
        os.read(read_end, 1)
    timer.join(HANG_BOUND)
    fired = []
    def probe():
        event = threading.Event()
        schedule(0, event.set)
        fired.append(event.wait(10))
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    prober.join(20)
    if fired != [True]:
        report["wedged_after"] = n
        break
print(json.dumps(report))
sys.stdout.flush()
os._exit(0)  # a wedged scheduler's callers must not hold the exit up
"""


def test_random_sigints_while_scheduling_deadlines_never_wedge_the_scheduler() -> None:
    """Ctrl-C in the middle of ``schedule``/``cancel`` (today: the first one that lands
    inside ``Condition.__enter__`` leaves the scheduler's lock held, and every later
    ``timeout=`` of the process hangs). Deterministic, bytecode by bytecode, in
    tests/test_signal_safety.py; here with real signals."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    done = subprocess.run(
        [sys.executable, "-c", CHURN_CHILD, str(rounds(60)), "11"],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"interrupts": rounds(60), "wedged_after": None}


def press_ctrl_c() -> None:
    """What a terminal's Ctrl-C does: SIGINT delivered to the main thread."""
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def test_ctrl_c_at_the_start_of_a_tool_batch_tells_the_tool() -> None:
    """The signal lands while the batch starts its worker (Thread.start() waits): the tool
    is told at once, as on cancel(), instead of sleeping out its wait, unaware."""
    assert threading.current_thread() is threading.main_thread()
    told = threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """Presses Ctrl-C, then waits cooperatively."""
        press_ctrl_c()
        if context.wait(30):
            told.set()
        return "done"

    model = ScriptedModel([{"tool_calls": [{"name": "slow", "input": {}}]}, "after"], repeat=True)
    agent = Agent(model, tools=[slow], tool_grace_period=5)
    with pytest.raises(KeyboardInterrupt):
        agent.invoke("go")
    assert told.wait(10), "the running tool was never told about Ctrl-C"
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert agent.messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert agent.invoke("again").stop_reason in ("end_turn", "tool_use")
    assert validate_history(agent.messages) == []


def test_ctrl_c_while_a_tool_runs_keeps_its_result_and_closes_the_turn() -> None:
    """Ctrl-C while the loop waits for a running tool: the tool is told, returns within
    its grace period, its result is kept, and the turn is closed; then it propagates."""
    assert threading.current_thread() is threading.main_thread()
    running, told = threading.Event(), threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """Waits until the test sees it running, presses Ctrl-C, waits cooperatively."""
        assert running.wait(10)
        press_ctrl_c()
        if context.wait(30):
            told.set()
        return "done"

    model = ScriptedModel([{"tool_calls": [{"name": "slow", "input": {}}]}, "after"], repeat=True)
    agent = Agent(model, tools=[slow], tool_grace_period=5)
    with pytest.raises(KeyboardInterrupt), agent.stream("go") as stream:
        for event in stream:
            if isinstance(event, ToolStart):
                running.set()
    assert told.is_set(), "the running tool was never told about Ctrl-C"
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["content"] == [{"text": "done"}]  # it returned within its grace period
    assert agent.messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert agent.invoke("again").stop_reason in ("end_turn", "tool_use")


def test_a_ctrl_c_the_main_threads_wait_did_not_see_is_handled_at_once() -> None:
    """A SIGINT that does not end the main thread's blocking wait (it arrived just before
    the wait blocked, or in another thread: here, the tool's) is still handled while the
    loop waits for the tool: the tool is told at once instead of running out its wait."""
    assert threading.current_thread() is threading.main_thread()
    told = threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """Once the loop waits for it, raises SIGINT in its own thread, then waits."""
        main = threading.main_thread().ident
        while not _waiting_for_tools(sys._current_frames().get(main or 0)):
            pass  # the main thread is not in the batch's wait yet
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        if context.wait(30):
            told.set()
        return "done"

    model = ScriptedModel([{"tool_calls": [{"name": "slow", "input": {}}]}, "after"], repeat=True)
    agent = Agent(model, tools=[slow], tool_grace_period=30)
    with pytest.raises(KeyboardInterrupt):
        agent.invoke("go")
    assert told.is_set(), "the tool ran out its wait: the Ctrl-C waited for it"
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert agent.invoke("again").stop_reason in ("end_turn", "tool_use")


def _waiting_for_tools(frame: Any) -> bool:
    return frame is not None and frame.f_code.co_name == "_drain"


class InterruptingModel:
    """Streams a little text, then raises KeyboardInterrupt (as Ctrl-C in a model's read)."""

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Half an"}}}
        raise KeyboardInterrupt


@pytest.mark.parametrize("kind", ["invoke", "stream"])
def test_keyboard_interrupt_in_a_model_stream_leaves_the_agent_idle(kind: str) -> None:
    agent = Agent(InterruptingModel())
    with pytest.raises(KeyboardInterrupt):
        if kind == "invoke":
            agent.invoke("hi")
        else:
            for _ in agent.stream("hi"):
                pass
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert agent.messages[-1] == {
        "role": "assistant",
        "content": [{"text": "Half an"}, {"text": CANCELLED_TEXT}],
    }


def test_keyboard_interrupt_raised_by_a_tool_does_not_wedge_the_agent() -> None:
    @tool
    def boom() -> str:
        """Raises KeyboardInterrupt in its worker thread."""
        raise KeyboardInterrupt

    model = ScriptedModel([{"tool_calls": [{"name": "boom", "input": {}}]}, "after"], repeat=True)
    agent = Agent(model, tools=[boom], tool_executor="sequential")
    try:
        agent.invoke("go")
    except KeyboardInterrupt:
        pass  # propagating it is allowed; wedging the agent is not
    assert not agent.is_running
    assert validate_history(agent.messages) == []
    assert agent.invoke("again").stop_reason in ("end_turn", "tool_use")
