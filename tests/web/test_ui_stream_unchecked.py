"""Input a run handed back (its input guardrails never passed it: DESIGN 13) reaches every
protocol's end, from the one summary of the run's end (its ``done`` record): the native
``done`` frame, the AI SDK's ``finish`` (``messageMetadata.agent_sync``, which the real
``ai`` client keeps as the message's metadata) and AG-UI's ``RUN_FINISHED``
(``metadata.agent_sync``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent_sync import Agent, UsageLimits
from agent_sync._run_log._records import run_record
from agent_sync.events import AgentEvent
from agent_sync.guardrails import Guardrail, GuardView
from agent_sync.testing import ScriptedModel
from agent_sync.web._agui_stream import AGUIEncoder
from tests.aisdk._node import ChatClient, aisdk_client

from ._agui import check_order
from .test_agui_stream import _frames
from .test_ui_stream import RUN, Record, by_type, encode, parts_of, read, record

__all__ = ["aisdk_client"]  # the fixture

QUESTION = "a question asked meanwhile"
EXPECTED = {
    "stop_reason": "usage_limit",
    "usage_limit": "requests",
    "unchecked_input": [{"text": QUESTION}],
}


def _passes(view: GuardView) -> None:
    return None


def _handed_back() -> list[Record]:
    """A guarded run that takes an inject after its tool round, then stops at its request
    limit before the next model call: the inject, never checked, is handed back."""
    agent = Agent(
        ScriptedModel([{"tool_calls": [{"id": "t1", "name": "read", "input": {"path": "a"}}]}]),
        tools=[read],
        guardrails=[Guardrail(_passes, stage="input")],
        usage_limits=UsageLimits(requests=1),
    )

    def events() -> Iterator[AgentEvent]:
        with agent.stream("read a") as stream:
            for event in stream:
                yield event
                if event.type == "message" and event.message["role"] == "user":
                    stream.inject(QUESTION)
        assert stream.result is not None and stream.result.unchecked_input

    records = [run_record(RUN, "c1"), *record(events())]
    assert records[-1]["unchecked_input"] == [{"text": QUESTION}]  # the done record has it
    return records


def test_the_ai_sdk_finish_carries_the_handed_back_input() -> None:
    (finish,) = by_type(parts_of(_handed_back()), "finish")
    assert finish == {
        "type": "finish",
        "finishReason": "other",
        "messageMetadata": {"agent_sync": EXPECTED},
    }


def test_the_ai_sdk_client_keeps_it_as_the_messages_metadata(aisdk_client: ChatClient) -> None:
    canned = [encode(_handed_back()).decode()]
    (end,) = aisdk_client.run(
        {"chat_id": "c1", "canned": canned, "actions": [{"do": "send", "text": "read a"}]}
    )
    assert end["status"] == "ready" and end["errors"] == []
    message: dict[str, Any] = end["messages"][-1]
    assert message["role"] == "assistant" and message["id"] == RUN
    assert message["metadata"] == {"agent_sync": EXPECTED}


def test_ag_ui_run_finished_carries_it_in_its_metadata() -> None:
    encoder = AGUIEncoder(RUN, "c1")
    records = _handed_back()
    data = encoder.opening() + b"".join(encoder.encode(i, r) for i, r in enumerate(records, 1))
    frames = _frames(data + encoder.closing())
    check_order(frames)
    finished = frames[-1].event
    assert finished.type.value == "RUN_FINISHED" and finished.outcome.type == "success"
    assert finished.metadata == {"agent_sync": EXPECTED}
