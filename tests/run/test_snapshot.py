"""run.snapshot(): frozen, cheap, from any thread, while the run moves."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from agent_sync import Agent, RetryPolicy, RunSnapshot
from agent_sync.errors import ModelThrottledError
from agent_sync.testing import ScriptedModel
from tests.fixtures.doubles import BackgroundInvoke
from tests.run._gates import Gate, PausingModel, gate_call


def test_snapshot_follows_the_run_through_its_phases() -> None:
    gate = Gate()
    model = PausingModel(
        ScriptedModel([{"text": "calling", "tool_calls": [gate_call(), gate_call()]}, "done"])
    )
    agent = Agent(model, tools=[gate.tool], tool_executor="sequential")
    call = BackgroundInvoke(agent)
    assert model.paused.wait(10)
    run = agent.active_run
    assert run is not None
    during_model = run.snapshot()
    assert (during_model.status, during_model.phase, during_model.cycle) == ("running", "model", 1)
    assert during_model.pending_tool_ids == ()
    model.resume.set()
    assert gate.entered.wait(10)
    agent.inject("queued")
    during_tools = run.snapshot()
    assert (during_tools.phase, during_tools.cycle) == ("tools", 1)
    assert len(during_tools.pending_tool_ids) == 2
    tool_ids = [b["toolUse"]["toolUseId"] for b in agent.messages[1]["content"] if "toolUse" in b]
    assert list(during_tools.pending_tool_ids) == tool_ids
    assert during_tools.queued_inputs == (({"text": "queued"},),)
    gate.opened.set()
    result = call.result()
    after = run.snapshot()
    assert (after.status, after.phase, after.cycle) == ("done", "idle", 2)
    assert after.pending_tool_ids == () and after.queued_inputs == ()
    assert after.usage == result.usage
    assert after.elapsed_s == pytest.approx(result.metrics.duration_s, abs=0.5)
    assert run.snapshot().elapsed_s == after.elapsed_s  # frozen once the run is over


def test_snapshot_is_frozen() -> None:
    agent = Agent(ScriptedModel(["hi"]))
    with agent.stream("go") as stream:
        snap = stream.snapshot()
        list(stream)
    assert isinstance(snap, RunSnapshot)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.status = "done"  # type: ignore[misc]


def test_snapshot_shows_retry_wait_during_back_off() -> None:
    model = ScriptedModel([{"error": ModelThrottledError("slow down", status=429)}, "ok"])
    agent = Agent(model, retry=RetryPolicy(initial_delay=60, jitter=0, max_delay=60))
    with agent.stream("go") as stream:
        for event in stream:
            if event.type == "retry":
                assert stream.snapshot().phase == "retry_wait"
                stream.cancel("no time")
    assert stream.result is not None and stream.result.stop_reason == "cancelled"


def test_snapshots_from_many_threads_while_runs_go_on() -> None:
    gate = Gate()
    gate.opened.set()
    script = [{"text": "x", "tool_calls": [gate_call()]}, "y"] * 30
    agent = Agent(ScriptedModel(script), tools=[gate.tool])
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = 0

    def watch() -> None:
        nonlocal seen
        while not stop.is_set():
            run = agent.active_run
            if run is None:
                continue
            try:
                snap = run.snapshot()
                assert snap.run_id == run.run_id and snap.cycle >= 0
                seen += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

    watchers = [threading.Thread(target=watch) for _ in range(3)]
    for thread in watchers:
        thread.start()
    try:
        for _ in range(30):
            assert agent.invoke("go").stop_reason == "end_turn"
    finally:
        stop.set()
        for thread in watchers:
            thread.join(10)
    assert errors == []
