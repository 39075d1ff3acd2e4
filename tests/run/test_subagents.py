"""Sub-agents (``agent.as_tool``): child runs of the calling run, cancel as a tree, nested
events, usage, stores with ``parent_run_id``.

The trees have three levels: a lead (``boss``) whose tool ``research`` is the template
``researcher``, whose tool ``deep`` is the template ``digger`` (and whose tool ``hold``
waits for a cancel). Every test waits for the state it cancels in through events set by
the models and tools (never by timing), and every level gets a long grace period: a cancel
that did not reach a child would leave it running for a minute, which the latency bound
catches.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from agent_sync import Agent, CancelToken, ToolContext, tool, validate_history
from agent_sync.cancel import CancelScope
from agent_sync.errors import ModelError
from agent_sync.events import Done, MessageComplete, SubAgentEvent, TextDelta, ToolEnd
from agent_sync.messages import CANCELLED_TEXT, StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.stores import MemoryRunStore, RunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.doubles import texts
from tests.fixtures.processes import child_context
from tests.stores.test_processes import Spec, open_store

pytestmark = pytest.mark.timeout(120)

GRACE = 60.0  # a child the cancel did not reach would hold its caller this long
SILENT = {"text": "thinking", "chunk_size": 1, "stall_after": 1}
RESEARCH = {"tool_calls": [{"name": "research", "input": {"prompt": "dig"}}]}
DEEP = {"tool_calls": [{"name": "deep", "input": {"prompt": "deeper"}}]}
HOLD = {"tool_calls": [{"name": "hold", "input": {}}]}


class Flagged:
    """A model around a :class:`ScriptedModel`: records the run id of each call's cancel
    scope, and sets ``streaming`` once a call has streamed its first content."""

    def __init__(self, turns: list[Any]) -> None:
        self.inner = ScriptedModel(turns)
        self.run_ids: list[str | None] = []
        self.streaming = threading.Event()

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        self.run_ids.append(cancel.run_id)
        for event in self.inner.stream(request, cancel=cancel):
            yield event
            if "contentBlockDelta" in event:
                self.streaming.set()


class ByLastMessage:
    """A model for a template whose copies run at once: each call's turn depends only on
    the kind of the request's last block (so the copies do not share one script)."""

    def __init__(self, turns: dict[str, Any]) -> None:
        self.turns = turns

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        last = request.messages[-1]["content"][-1]
        kind = "toolResult" if "toolResult" in last else "text"
        return ScriptedModel([self.turns[kind]]).stream(request, cancel=cancel)


MEET = {"tool_calls": [{"name": "meet", "input": {}}]}


class Tree:
    """boss -> research (researcher) -> deep (digger); the researcher may also ``hold``."""

    def __init__(self, state: str, store: RunStore | None = None) -> None:
        self.held = threading.Event()

        @tool
        def hold(context: ToolContext) -> str:
            """Wait for a cancel."""
            self.held.set()
            return "told to stop" if context.wait(120) else "never told"

        researcher_turn = {"child": SILENT, "tool": HOLD, "grandchild": DEEP}[state]
        self.digger_model = Flagged(
            [SILENT, "dug again"] if state == "grandchild" else ["dug again"]
        )
        self.researcher_model = Flagged([researcher_turn, "researched again"])
        self.boss_model = Flagged([RESEARCH, "boss again"])
        self.digger = Agent(self.digger_model, tool_grace_period=GRACE)
        self.researcher = Agent(
            self.researcher_model,
            tools=[hold, self.digger.as_tool(name="deep", description="Dig deeper", **_named())],
            tool_grace_period=GRACE,
        )
        self.boss = Agent(
            self.boss_model,
            tools=[self.researcher.as_tool(name="research", description="Research", **_named())],
            tool_grace_period=GRACE,
            store=store,
            conversation_id="boss" if store is not None else None,
        )
        self.reached = {
            "child": self.researcher_model.streaming,
            "tool": self.held,
            "grandchild": self.digger_model.streaming,
        }[state]

    def check_after_cancel(self, store: RunStore | None, reason: str) -> None:
        """Every level's history valid and closed as a cancel closes it; the lead's call
        answered "Cancelled by user"; every agent usable again."""
        boss = self.boss
        assert validate_history(boss.messages) == []
        results = [
            block["toolResult"]
            for message in boss.messages
            for block in message["content"]
            if "toolResult" in block
        ]
        assert [(r["status"], r["content"]) for r in results] == [
            ("error", [{"text": CANCELLED_TEXT}])
        ]
        assert texts(boss.messages[-1]) == [CANCELLED_TEXT]
        if store is not None:
            for model in (self.researcher_model, self.digger_model):
                for run_id in filter(None, model.run_ids):
                    snapshot = store.get(run_id)
                    assert snapshot is not None and snapshot.parent_run_id is not None
                    assert snapshot.status == "cancelled" and snapshot.cancel_reason == reason
            names = _conversations(store)
            assert len(names) == (2 if self.digger_model.run_ids else 1)  # one per child run
            for name in names:
                logged = list(store.load(name).messages)
                assert validate_history(logged) == [], name
                assert texts(logged[-1])[-1] == CANCELLED_TEXT
        # every agent reusable: the templates were never touched, the lead goes on
        assert self.researcher.messages == [] and self.digger.messages == []
        assert boss.invoke("again").text == "boss again"
        assert self.researcher.invoke("direct").text == "researched again"
        assert self.digger.invoke("direct").text == "dug again"


def _named() -> dict[str, Any]:
    """A conversation per call named after the call, so a test can read it from the store."""
    return {"conversation_id": lambda context: f"sub-{context.tool_use['toolUseId']}-{_tag()}"}


_seen: list[str] = []


def _tag() -> str:
    tag = uuid.uuid4().hex[:8]
    _seen.append(tag)
    return tag


def _conversations(store: RunStore) -> list[str]:
    """The sub-agents' conversations (named by :func:`_named`) that exist in ``store``."""
    found = []
    for tag in _seen:
        for n in range(1, 5):
            name = f"sub-tooluse_{n:04d}-{tag}"
            if store.load(name).log_length:
                found.append(name)
    return found


def _run_in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _finish(thread: threading.Thread, out: dict[str, Any], cancelled_at: float) -> Any:
    thread.join(GRACE / 2)
    assert not thread.is_alive(), "the tree was not cancelled (a child held its caller)"
    assert time.perf_counter() - cancelled_at < GRACE / 4
    if "error" in out:
        raise out["error"]
    return out["result"]


# -- as_tool: the basics --


def test_a_call_runs_a_child_run_and_its_text_is_the_result() -> None:
    child_model = Flagged(["child answer"])
    researcher = Agent(child_model, system_prompt="You research.")
    boss_model = Flagged([RESEARCH, "done"])
    boss = Agent(boss_model, tools=[researcher.as_tool(name="research", description="Research")])
    result = boss.invoke("go")
    assert result.text == "done"
    answer = boss.messages[2]["content"][0]["toolResult"]
    assert answer["status"] == "success" and answer["content"] == [{"text": "child answer"}]
    assert researcher.messages == []  # the template is untouched
    (child_run,) = child_model.run_ids  # its own run id, seen by its model
    assert child_run is not None and child_run != result.run_id
    assert child_model.inner.calls[0].system_prompt == "You research."
    assert set(boss_model.run_ids) == {result.run_id}


def test_the_lead_usage_includes_its_children_and_grandchildren() -> None:
    usage = {"inputTokens": 10, "outputTokens": 1}
    digger = Agent(ScriptedModel([{"text": "dug", "usage": usage}]))
    researcher = Agent(
        ScriptedModel([{**DEEP, "usage": usage}, {"text": "found", "usage": usage}]),
        tools=[digger.as_tool(name="deep", description="Dig")],
    )
    boss = Agent(
        ScriptedModel([{**RESEARCH, "usage": usage}, {"text": "done", "usage": usage}]),
        tools=[researcher.as_tool(name="research", description="Research")],
    )
    result = boss.invoke("go")
    assert result.usage["inputTokens"] == 50 and result.usage["outputTokens"] == 5


def test_parallel_calls_run_on_fresh_copies_at_once() -> None:
    both = threading.Barrier(2, timeout=30)

    @tool
    def meet() -> str:
        """Wait for the other call."""
        both.wait()  # both children run at the same time, or this breaks
        return "met"

    researcher = Agent(ByLastMessage({"text": MEET, "toolResult": "found"}), tools=[meet])
    calls = [{"name": "research", "input": {"prompt": p}} for p in ("a", "b")]
    boss = Agent(
        ScriptedModel([{"tool_calls": calls}, "done"]),
        tools=[researcher.as_tool(name="research", description="Research")],
    )
    events = list(boss.stream("go"))
    result = events[-1].result
    assert result.text == "done" and validate_history(boss.messages) == []
    answers = [b["toolResult"]["content"] for b in boss.messages[2]["content"]]
    assert answers == [[{"text": "found"}], [{"text": "found"}]]
    children = {e.run_id for e in events if isinstance(e, SubAgentEvent)}
    assert len(children) == 2 and researcher.messages == []


def test_events_are_wrapped_once_per_level() -> None:
    digger = Agent(ScriptedModel(["dug"]))
    researcher = Agent(
        ScriptedModel([DEEP, "found"]), tools=[digger.as_tool(name="deep", description="Dig")]
    )
    boss = Agent(
        ScriptedModel([RESEARCH, "done"]),
        tools=[researcher.as_tool(name="research", description="Research")],
    )
    events = list(boss.stream("go"))
    lead = events[-1].run_id
    own = [e for e in events if not isinstance(e, SubAgentEvent)]
    assert {e.run_id for e in own} == {lead}
    nested = [e for e in events if isinstance(e, SubAgentEvent)]
    child_ids = {e.run_id for e in nested}
    assert len(child_ids) == 1 and all(e.parent_run_id == lead for e in nested)
    (child,) = child_ids
    deep = [e.event for e in nested if isinstance(e.event, SubAgentEvent)]
    assert deep and all(e.parent_run_id == child for e in deep)
    assert all(not isinstance(e.event, SubAgentEvent) for e in deep)  # wrapped once per level
    assert {type(e.event) for e in deep} >= {TextDelta, MessageComplete, Done}
    assert [e.event.text for e in deep if isinstance(e.event, TextDelta)] == ["dug"]
    boss_call = boss.messages[1]["content"][0]["toolUse"]["toolUseId"]
    assert {e.tool_use_id for e in nested} == {boss_call}
    # the wrapped Done is the child's: its result is the call's result
    (child_done,) = [e.event for e in nested if isinstance(e.event, Done)]
    assert child_done.result.text == "found" and child_done.run_id == child
    tool_end = next(e for e in own if isinstance(e, ToolEnd))
    assert tool_end.result["content"] == [{"text": "found"}]


def test_a_child_error_answers_the_call_with_an_error_result() -> None:
    researcher = Agent(
        ScriptedModel([{"error": ModelError("the provider is down")}]),
        retry=_no_retry(),
    )
    boss = Agent(
        ScriptedModel([RESEARCH, "I will tell the user"]),
        tools=[researcher.as_tool(name="research", description="Research")],
    )
    result = boss.invoke("go")
    assert result.text == "I will tell the user"
    answer = boss.messages[2]["content"][0]["toolResult"]
    assert answer["status"] == "error" and "the provider is down" in answer["content"][0]["text"]
    assert validate_history(boss.messages) == []


def test_a_named_conversation_goes_on_across_calls_without_a_store() -> None:
    model = ScriptedModel(["first", "second"])
    researcher = Agent(model)
    tool_ = researcher.as_tool(
        name="research", description="Research", conversation_id=lambda context: "topic"
    )
    boss = Agent(ScriptedModel([RESEARCH, "one", RESEARCH, "two"]), tools=[tool_])
    boss.invoke("go")
    boss.invoke("again")
    assert [len(call.messages) for call in model.calls] == [1, 3]  # the child remembered


def test_as_tool_checks_its_arguments() -> None:
    from agent_sync.errors import UsageError

    researcher = Agent(ScriptedModel(["x"]))
    with pytest.raises(UsageError):
        researcher.as_tool(name="bad name", description="x")
    with pytest.raises(UsageError):
        researcher.as_tool(name="research", description="")
    with pytest.raises(UsageError):
        researcher.as_tool(name="research", description="x", conversation_id="c1")  # type: ignore[arg-type]


# -- cancel is a tree --

STATES = ["child", "tool", "grandchild"]


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("means", ["thread", "token", "timeout"])
def test_cancel_reaches_every_level(state: str, means: str) -> None:
    if means == "timeout":
        store, tree, result = _timed_out_in(state)
    else:
        store = MemoryRunStore()
        tree = Tree(state, store)
        token = CancelToken()
        thread, out = _run_in_thread(lambda: tree.boss.invoke("go", cancel=token))
        assert tree.reached.wait(30)
        cancelled_at = time.perf_counter()
        if means == "thread":
            assert tree.boss.cancel("stop") is True
        else:
            assert token.cancel("client left") is True
        result = _finish(thread, out, cancelled_at)
    reason = {"thread": "stop", "token": "client left", "timeout": "timeout"}[means]
    assert result.stop_reason == "cancelled" and result.cancel_reason == reason
    tree.check_after_cancel(store, reason)


def _timed_out_in(state: str) -> tuple[MemoryRunStore, Tree, Any]:
    """A tree whose ``invoke(timeout=...)`` ran out once the level under test (``state``)
    had started. A timeout is a duration from the call, not an event: it starts short and
    is doubled, on a fresh tree, until it ran out after that level started (a busy machine
    takes longer to get there; no speed is assumed)."""
    timeout = 0.05
    while True:
        store = MemoryRunStore()
        tree = Tree(state, store)
        thread, out = _run_in_thread(partial(tree.boss.invoke, "go", timeout=timeout))
        result = _finish(thread, out, time.perf_counter())
        if tree.reached.is_set():
            return store, tree, result
        assert timeout < HANG_BOUND, f"the tree never reached {state} within {timeout} s"
        timeout *= 2


@pytest.mark.parametrize("state", STATES)
def test_closing_the_stream_cancels_the_tree(state: str) -> None:
    store = MemoryRunStore()
    tree = Tree(state, store)
    stream = tree.boss.stream("go")
    closed = threading.Event()

    def close_when_reached() -> None:
        tree.reached.wait(30)
        stream.close()  # from another thread, while the lead's thread is inside next()
        closed.set()

    threading.Thread(target=close_when_reached, daemon=True).start()
    started = time.perf_counter()
    seen = list(stream)
    assert closed.wait(30) and time.perf_counter() - started < GRACE / 4
    assert not any(isinstance(e, Done) for e in seen)
    tree.check_after_cancel(store, "stream closed")


@pytest.mark.parametrize("state", STATES)
def test_cancel_without_a_store(state: str) -> None:
    tree = Tree(state)
    thread, out = _run_in_thread(lambda: tree.boss.invoke("go"))
    assert tree.reached.wait(30)
    cancelled_at = time.perf_counter()
    assert tree.boss.cancel("stop") is True
    result = _finish(thread, out, cancelled_at)
    assert result.stop_reason == "cancelled"
    tree.check_after_cancel(None, "stop")


def test_after_turn_lets_the_children_finish_their_turn() -> None:
    go_on = threading.Event()

    @tool
    def slow(context: ToolContext) -> str:
        """Work until told to go on (a cancel after the turn does not stop it)."""
        asked.set()
        go_on.wait(60)
        return "slow work done"

    asked = threading.Event()
    researcher_model = Flagged([{"tool_calls": [{"name": "slow", "input": {}}]}, "found"])
    researcher = Agent(researcher_model, tools=[slow])
    boss_model = Flagged([RESEARCH, "never asked"])
    boss = Agent(boss_model, tools=[researcher.as_tool(name="research", description="R")])
    thread, out = _run_in_thread(lambda: boss.invoke("go"))
    assert asked.wait(30)
    assert boss.cancel("enough", mode="after_turn") is True
    go_on.set()
    result = _finish(thread, out, time.perf_counter())
    assert result.stop_reason == "cancelled" and result.cancel_reason == "enough"
    # the child's turn (its tool) finished; it stopped before its next model call, so its
    # call is answered "Cancelled by user"; the lead made no further model call
    assert len(boss_model.run_ids) == 1 and len(researcher_model.run_ids) == 1
    answer = boss.messages[2]["content"][0]["toolResult"]
    assert answer["content"] == [{"text": CANCELLED_TEXT}]
    assert validate_history(boss.messages) == []


def test_after_turn_keeps_a_child_answer_that_ends_its_turn() -> None:
    streaming = threading.Event()
    release = threading.Event()

    class Slow(Flagged):
        def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
            streaming.set()
            release.wait(60)
            yield from super().stream(request, cancel=cancel)

    researcher = Agent(Slow(["the answer"]))
    boss_model = Flagged([RESEARCH, "never asked"])
    boss = Agent(boss_model, tools=[researcher.as_tool(name="research", description="R")])
    thread, out = _run_in_thread(lambda: boss.invoke("go"))
    assert streaming.wait(30)
    boss.cancel("enough", mode="after_turn")
    release.set()
    result = _finish(thread, out, time.perf_counter())
    assert result.stop_reason == "cancelled" and len(boss_model.run_ids) == 1
    answer = boss.messages[2]["content"][0]["toolResult"]
    assert answer["status"] == "success" and answer["content"] == [{"text": "the answer"}]


# -- stores: parent_run_id, cancel from another process --


def test_child_runs_are_stored_with_their_parent() -> None:
    store = MemoryRunStore()
    digger = Agent(Flagged(["dug"]))
    researcher_model = Flagged([DEEP, "found"])
    researcher = Agent(researcher_model, tools=[digger.as_tool(name="deep", description="Dig")])
    boss = Agent(
        Flagged([RESEARCH, "done"]),
        tools=[researcher.as_tool(name="research", description="Research")],
        store=store,
        conversation_id="lead",
    )
    result = boss.invoke("go")
    assert store.get(result.run_id).parent_run_id is None  # type: ignore[union-attr]
    (child,) = set(researcher_model.run_ids)
    assert child is not None
    snapshot = store.get(child)
    assert snapshot is not None and snapshot.parent_run_id == result.run_id
    assert snapshot.status == "done" and snapshot.conversation_id is not None
    grandchild = digger.model.run_ids[0]  # type: ignore[attr-defined]
    assert store.get(grandchild).parent_run_id == child  # type: ignore[union-attr]
    # the child's conversation is in the store, valid, and not the lead's
    logged = list(store.load(snapshot.conversation_id).messages)
    assert validate_history(logged) == [] and texts(logged[-1]) == ["found"]
    assert digger.messages == [] and researcher.messages == []


def _cancel_in_another_process(spec_: Spec, run_id: str, reason: str, out: Any) -> None:
    out.put(open_store(spec_).cancel(run_id, reason))


@pytest.mark.parametrize("state", STATES)
def test_store_cancel_of_the_lead_from_another_process_cancels_the_tree(
    spec: Spec,  # noqa: F811 - the fixture
    state: str,
) -> None:
    store = open_store(spec)
    tree = Tree(state, store)
    thread, out = _run_in_thread(lambda: tree.boss.invoke("go"))
    assert tree.reached.wait(30)
    lead = tree.boss_model.run_ids[0]
    assert lead is not None
    context = child_context()
    answer = context.Queue()
    process = context.Process(
        target=_cancel_in_another_process, args=(spec, lead, "from afar", answer)
    )
    process.start()
    assert answer.get(timeout=60) is True
    cancelled_at = time.perf_counter()
    process.join(30)
    result = _finish(thread, out, cancelled_at)
    assert result.stop_reason == "cancelled" and result.cancel_reason == "from afar"
    tree.check_after_cancel(store, "from afar")


def _no_retry() -> Any:
    from agent_sync.retry import RetryPolicy

    return RetryPolicy(max_attempts=1)
