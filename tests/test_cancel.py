"""cancel(): every checkpoint of DESIGN.md section 3 and the history shape it leaves."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from functools import partial
from itertools import pairwise

import pytest

from agent_sync import Agent, RetryPolicy, ToolContext, tool
from agent_sync.cancel import CancelScope
from agent_sync.errors import ModelThrottledError
from agent_sync.events import ModelRetry, TextDelta
from agent_sync.messages import CANCELLED_TEXT, StreamEvent
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.doubles import BackgroundInvoke, ObservedModel, assert_valid, texts

TOOL_TURN = {"tool_calls": [{"name": "lookup", "input": {"q": "x"}}]}


def _cancelled_tool_result(message: dict) -> list[str]:
    return [
        b["toolResult"]["content"][0]["text"]
        for b in message["content"]
        if b["toolResult"]["status"] == "error"
    ]


def test_cancel_mid_stream_keeps_streamed_text_and_closes_the_message() -> None:
    model = ScriptedModel([{"text": "The answer is forty-two.", "chunk_size": 4, "stall_after": 2}])
    agent = Agent(model)
    seen = threading.Event()
    received: list[str] = []

    def consume() -> None:
        for event in stream:
            if isinstance(event, TextDelta):
                received.append(event.text)
                if len(received) == 2:
                    seen.set()

    stream = agent.stream("question")
    worker = threading.Thread(target=consume, name="test-consumer")
    worker.start()
    assert seen.wait(HANG_BOUND)
    assert agent.cancel("user pressed stop") is True
    worker.join(HANG_BOUND)
    assert not worker.is_alive()
    assert stream.result is not None
    assert stream.result.stop_reason == "cancelled"
    assert stream.result.cancel_reason == "user pressed stop"
    assert agent.messages[-1] == {
        "role": "assistant",
        "content": [{"text": "The answ"}, {"text": CANCELLED_TEXT}],
    }
    assert_valid(agent)


def test_cancel_mid_stream_drops_unfinished_tool_use() -> None:
    model = ScriptedModel(
        [
            {
                "text": "Let me check.",
                "tool_calls": [{"name": "lookup", "input": {"q": "long query"}}],
                "chunk_size": 5,
                "stall_after": 4,
            }
        ]
    )
    called = threading.Event()

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        called.set()
        return q

    # messageStart, 3 text deltas, blockStop, toolUse start, 1 input delta: then silence
    observed = ObservedModel(model, signal_after_events=7)
    agent = Agent(observed, tools=[lookup])
    running = BackgroundInvoke(agent)
    assert observed.events_reached.wait(HANG_BOUND)
    agent.cancel()
    result = running.result()
    assert result.stop_reason == "cancelled"
    last = agent.messages[-1]
    assert not any("toolUse" in block for block in last["content"])
    assert texts(last) == ["Let me check.", CANCELLED_TEXT]
    assert not called.is_set()
    assert_valid(agent)


def test_cancel_while_stalled_before_any_event() -> None:
    inner = ScriptedModel([{"text": "never sent", "stall_after": 0}])
    model = ObservedModel(inner)
    agent = Agent(model)
    running = BackgroundInvoke(agent)
    assert model.called.wait(HANG_BOUND)
    assert agent.cancel() is True
    result = running.result()
    assert result.stop_reason == "cancelled"
    assert agent.messages == [
        {"role": "user", "content": [{"text": "go"}]},
        {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]},
    ]
    assert_valid(agent)


def test_cancel_before_tools_answers_every_tool_use_with_cancelled() -> None:
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "lookup", "input": {"q": "a"}},
                    {"name": "lookup", "input": {"q": "b"}},
                ]
            }
        ]
    )
    ran: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look up."""
        ran.append(q)
        return q

    agent = Agent(model, tools=[lookup])
    with agent.stream("go") as stream:
        for event in stream:
            if event.type == "message":  # the toolUse message is complete, tools not started
                agent.cancel("stop before tools")
    assert stream.result is not None and stream.result.stop_reason == "cancelled"
    assert ran == []
    tool_use_msg, results_msg, closing = agent.messages[1:]
    assert [b["toolUse"]["name"] for b in tool_use_msg["content"]] == ["lookup", "lookup"]
    assert _cancelled_tool_result(results_msg) == [CANCELLED_TEXT, CANCELLED_TEXT]
    assert closing == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert_valid(agent)


def test_cancel_during_cooperative_tool_stops_it_promptly() -> None:
    started = threading.Event()

    @tool
    def lookup(q: str, context: ToolContext) -> str:
        """Look up, cooperating with cancel."""
        started.set()
        if context.wait(30):
            context.raise_if_cancelled()
        return "finished"

    model = ScriptedModel([TOOL_TURN, "unreachable"])
    agent = Agent(model, tools=[lookup], tool_grace_period=10)
    running = BackgroundInvoke(agent)
    assert started.wait(HANG_BOUND)
    agent.cancel()
    result = running.result(timeout=5)  # far below the 10 s grace: the tool cooperated
    assert result.stop_reason == "cancelled"
    assert _cancelled_tool_result(agent.messages[2]) == [CANCELLED_TEXT]
    assert agent.messages[3] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert len(model.calls) == 1
    assert_valid(agent)


def test_cooperative_tool_result_returned_after_cancel_is_kept() -> None:
    started = threading.Event()

    @tool
    def lookup(q: str, context: ToolContext) -> str:
        """Look up; on cancel, return what was found so far."""
        started.set()
        context.wait(30)
        return "partial findings"

    agent = Agent(ScriptedModel([TOOL_TURN]), tools=[lookup])
    running = BackgroundInvoke(agent)
    assert started.wait(HANG_BOUND)
    agent.cancel()
    assert running.result().stop_reason == "cancelled"
    result_block = agent.messages[2]["content"][0]["toolResult"]
    assert result_block["status"] == "success"
    assert result_block["content"] == [{"text": "partial findings"}]
    assert_valid(agent)


class _LateResultLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "late result" in record.getMessage():
            self.seen.set()


def test_non_cooperative_tool_is_abandoned_after_grace_and_late_result_discarded() -> None:
    started, release = threading.Event(), threading.Event()

    @tool
    def lookup(q: str) -> str:
        """Look up, ignoring cancel."""
        started.set()
        release.wait(30)
        return "late result"

    late_log = _LateResultLog()
    logging.getLogger("agent_sync.tools.executor").addHandler(late_log)
    try:
        agent = Agent(ScriptedModel([TOOL_TURN]), tools=[lookup], tool_grace_period=0.05)
        running = BackgroundInvoke(agent)
        assert started.wait(HANG_BOUND)
        agent.cancel()
        result = running.result()
        assert result.stop_reason == "cancelled"
        snapshot = [dict(m) for m in agent.messages]
        assert _cancelled_tool_result(agent.messages[2]) == [CANCELLED_TEXT]
        release.set()
        assert late_log.seen.wait(HANG_BOUND), "the late result was not logged"
        assert agent.messages == snapshot  # never written into the history
        assert "late result" not in str(agent.messages)
        assert_valid(agent)
    finally:
        release.set()
        logging.getLogger("agent_sync.tools.executor").removeHandler(late_log)


def test_cancel_between_sequential_tools_skips_the_rest() -> None:
    ran: list[str] = []

    @tool
    def step(name: str, context: ToolContext) -> str:
        """One step; the first one cancels the run."""
        ran.append(name)
        context.agent.cancel("enough")
        return f"{name} done"

    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "step", "input": {"name": n}} for n in ("first", "second", "third")
                ]
            }
        ]
    )
    agent = Agent(model, tools=[step], tool_executor="sequential")
    result = agent.invoke("go")
    assert result.stop_reason == "cancelled"
    assert result.cancel_reason == "enough"
    assert ran == ["first"]
    results = [b["toolResult"] for b in agent.messages[2]["content"]]
    assert results[0] == {
        "toolUseId": results[0]["toolUseId"],
        "status": "success",
        "content": [{"text": "first done"}],
    }
    assert [r["content"][0]["text"] for r in results[1:]] == [CANCELLED_TEXT, CANCELLED_TEXT]
    assert_valid(agent)


def test_cancel_after_tools_prevents_the_next_model_call() -> None:
    @tool
    def lookup(q: str, context: ToolContext) -> str:
        """Finishes, but cancels the run on its way out."""
        context.agent.cancel()
        return "found it"

    model = ScriptedModel([TOOL_TURN, "should never be requested"])
    agent = Agent(model, tools=[lookup])
    result = agent.invoke("go")
    assert result.stop_reason == "cancelled"
    assert len(model.calls) == 1
    assert agent.messages[2]["content"][0]["toolResult"]["content"] == [{"text": "found it"}]
    assert agent.messages[3] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert_valid(agent)


def test_cancel_during_backoff_wakes_at_once_and_sends_no_new_request() -> None:
    model = ScriptedModel([{"error": ModelThrottledError("slow down")}, "never reached"])
    agent = Agent(model, retry=RetryPolicy(initial_delay=60, jitter=0, max_delay=60))
    retrying = threading.Event()
    result_holder: list = []

    def consume() -> None:
        with agent.stream("go") as stream:
            for event in stream:
                if isinstance(event, ModelRetry):
                    retrying.set()
        result_holder.append(stream.result)

    worker = threading.Thread(target=consume, name="test-consumer")
    worker.start()
    assert retrying.wait(HANG_BOUND)
    agent.cancel()
    worker.join(HANG_BOUND)  # far below the 60 s back-off
    assert not worker.is_alive()
    assert result_holder[0].stop_reason == "cancelled"
    assert len(model.calls) == 1
    assert_valid(agent)


def test_timeout_cancels_with_reason_timeout() -> None:
    agent = Agent(ScriptedModel([{"text": "slow", "stall_after": 1}]))
    result = agent.invoke("go", timeout=0.05)
    assert result.stop_reason == "cancelled"
    assert result.cancel_reason == "timeout"
    assert_valid(agent)


def test_timeout_that_does_not_expire_changes_nothing() -> None:
    agent = Agent(ScriptedModel(["quick answer"]))
    result = agent.invoke("go", timeout=30)
    assert result.stop_reason == "end_turn"
    assert result.cancel_reason is None


def test_cancel_on_idle_agent_is_a_noop_that_does_not_affect_the_next_call() -> None:
    agent = Agent(ScriptedModel(["hello"]))
    assert agent.cancel("too early") is False
    result = agent.invoke("hi")
    assert result.stop_reason == "end_turn"
    assert result.text == "hello"


def test_cancel_after_the_run_ended_returns_false() -> None:
    agent = Agent(ScriptedModel(["hello"]))
    agent.invoke("hi")
    assert agent.cancel() is False


def test_cancel_twice_keeps_the_first_reason() -> None:
    model = ObservedModel(ScriptedModel([{"text": "x", "stall_after": 0}]))
    agent = Agent(model)
    running = BackgroundInvoke(agent)
    assert model.called.wait(HANG_BOUND)
    assert agent.cancel("first") is True
    assert agent.cancel("second") is True
    result = running.result()
    assert result.cancel_reason == "first"
    assert_valid(agent)


@pytest.mark.parametrize("round_", range(30))
def test_cancel_racing_the_natural_end(round_: int) -> None:
    model = ScriptedModel(["done " * 3], repeat=True)
    agent = Agent(model)
    barrier = threading.Barrier(2)

    def canceller() -> None:
        barrier.wait(HANG_BOUND)
        for _ in range(round_ * 10):
            pass
        agent.cancel("race")

    thread = threading.Thread(target=canceller, name="test-canceller")
    thread.start()
    barrier.wait(HANG_BOUND)
    result = agent.invoke("go")
    thread.join(HANG_BOUND)
    assert result.stop_reason in ("end_turn", "cancelled")
    assert_valid(agent)
    assert agent.invoke("again").stop_reason == "end_turn"  # reusable, no leaked cancel
    assert_valid(agent)


def test_agent_is_reusable_after_a_cancel() -> None:
    model = ObservedModel(ScriptedModel([{"text": "x", "stall_after": 0}, "second answer"]))
    agent = Agent(model)
    running = BackgroundInvoke(agent)
    assert model.called.wait(HANG_BOUND)
    agent.cancel()
    assert running.result().stop_reason == "cancelled"
    result = agent.invoke("next question")
    assert result.stop_reason == "end_turn"
    assert result.text == "second answer"
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user", "assistant"]
    assert_valid(agent)


def test_abandoned_tool_sees_its_own_scope_stay_cancelled() -> None:
    """A tool abandoned by run 1 must not see run 2's fresh, uncancelled scope."""
    started, release = threading.Event(), threading.Event()
    observed: list[bool] = []

    @tool
    def lookup(q: str, context: ToolContext) -> str:
        """Ignores cancel until released, then reports what it sees."""
        started.set()
        release.wait(30)
        observed.append(context.cancelled)
        return "late"

    model = ObservedModel(ScriptedModel([TOOL_TURN, {"text": "second", "stall_after": 1}]))
    agent = Agent(model, tools=[lookup], tool_grace_period=0.01)
    running = BackgroundInvoke(agent)
    assert started.wait(HANG_BOUND)
    agent.cancel()
    running.result()
    model.called.clear()
    second = BackgroundInvoke(agent, "next")
    assert model.called.wait(10)  # run 2 is live (its fresh scope) before the tool looks
    release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("agent_sync-tool"):
            thread.join(HANG_BOUND)
    assert observed == [True]
    # Only once run 2 is live: a cancel() of an idle agent is a no-op, and run 2 would
    # stall for good (the flake: the thread had not taken the agent yet).
    assert agent.cancel() is True
    second.result()
    assert_valid(agent)


class QuietAfterAbortModel:
    """Follows models.base to the letter: after an abort it simply stops yielding (no
    messageStop, no error), like a provider whose read ends quietly when its socket is
    shut down."""

    def __init__(self) -> None:
        self.streaming = threading.Event()

    def stream(self, request: object, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        aborted = threading.Event()
        unregister = cancel.register_abort(aborted.set)
        try:
            yield {"messageStart": {"role": "assistant"}}
            yield {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Half an"}}}
            self.streaming.set()
            aborted.wait(30)  # a silent socket; the abort ends it and the stream just ends
        finally:
            unregister()


def test_a_stream_that_stops_quietly_after_the_abort_is_cancelled_not_an_answer() -> None:
    model = QuietAfterAbortModel()
    agent = Agent(model)
    run = BackgroundInvoke(agent, "hi")
    assert model.streaming.wait(10)
    assert agent.cancel("stop") is True
    result = run.result()
    assert (result.stop_reason, result.cancel_reason) == ("cancelled", "stop")
    assert agent.messages[-1] == {
        "role": "assistant",
        "content": [{"text": "Half an"}, {"text": CANCELLED_TEXT}],
    }
    assert_valid(agent)


def test_an_after_turn_request_lives_in_the_scope_and_cancels_at_the_end_of_the_turn() -> None:
    """``cancel(mode="after_turn")`` from any thread is the scope's state, under its lock:
    the first reason wins, nothing is cancelled until the loop's end-of-turn checkpoint, a
    cancel now still cuts the turn short, and a finished scope refuses the request."""
    scope = CancelScope("run_1")
    requests = [threading.Thread(target=scope.cancel_after_turn, args=("first",))]
    requests[0].start()
    requests[0].join(10)
    assert scope.cancel_after_turn("second") is True
    assert not scope.cancelled  # the turn in flight goes on
    scope.end_of_turn()
    assert scope.cancelled and scope.reason == "first"

    escalated = CancelScope("run_2")
    escalated.cancel_after_turn("later")
    assert escalated.cancel("now") is True
    escalated.end_of_turn()
    assert escalated.reason == "now"

    finished = CancelScope("run_3")
    finished.close()
    assert finished.cancel_after_turn("too late") is False
    finished.end_of_turn()
    assert not finished.cancelled


@pytest.mark.parametrize("depth", [1, 3, 5000])
def test_a_linked_tree_of_any_depth_is_cancelled_whole(depth: int) -> None:
    """A chain of linked scopes (sub-agents of sub-agents), and a wide level at its end:
    cancelling the root cancels every one with its reason, each scope's callbacks run once,
    after its children's (a child's abort frees its parent's tool). Today: recursion, so
    2,000 levels raise RecursionError with 997 cancelled."""
    chain = [CancelScope(f"run_{n}") for n in range(depth)]
    for parent, child in pairwise(chain):
        parent.link(child)
    leaves = [CancelScope(f"leaf_{n}") for n in range(3)]
    for leaf in leaves:
        chain[-1].link(leaf)
    ran: list[str] = []
    for scope in chain + leaves:
        scope.register_abort(partial(ran.append, scope.run_id or ""))
    assert chain[0].cancel("stop") is True
    assert all(s.cancelled and s.reason == "stop" for s in chain + leaves)
    assert sorted(ran[:3]) == ["leaf_0", "leaf_1", "leaf_2"]
    assert ran[3:] == [s.run_id for s in reversed(chain)]  # each once, children first
    assert chain[0].cancel("again") is True and len(ran) == depth + 3  # idempotent


@pytest.mark.parametrize("depth", [3, 5000])
def test_an_after_turn_request_reaches_a_linked_tree_of_any_depth(depth: int) -> None:
    chain = [CancelScope(f"run_{n}") for n in range(depth)]
    for parent, child in pairwise(chain):
        parent.link(child)
    assert chain[-1].cancel_after_turn("later") is True  # a child's own request is kept
    assert chain[0].cancel_after_turn("wrap up") is True
    assert all(s.cancel_requested and not s.cancelled for s in chain)
    chain[-1].end_of_turn()
    chain[-2].end_of_turn()
    assert (chain[-1].reason, chain[-2].reason) == ("later", "wrap up")
    chain[-1].close()
    assert chain[-1].cancel_after_turn("closed") is False
