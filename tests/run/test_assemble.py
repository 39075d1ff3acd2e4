"""MessageAssembler: stream events -> assistant message."""

from __future__ import annotations

import pytest

from agent_sync.errors import ModelStreamError
from agent_sync.events import ReasoningDelta, TextDelta
from agent_sync.run._assemble import EMPTY_RESPONSE_TEXT, MessageAssembler


def feed(events: list[dict]) -> MessageAssembler:
    assembler = MessageAssembler()
    for event in events:
        assembler.add(event)  # type: ignore[arg-type]
    return assembler


def delta(index: int, **d: object) -> dict:
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": d}}


TOOL_START = {
    "contentBlockStart": {
        "contentBlockIndex": 1,
        "start": {"toolUse": {"toolUseId": "t1", "name": "f"}},
    }
}


def test_text_and_tool_input_assembled_from_deltas() -> None:
    assembler = feed(
        [
            {"messageStart": {"role": "assistant"}},
            delta(0, text="Hel"),
            delta(0, text="lo"),
            {"contentBlockStop": {"contentBlockIndex": 0}},
            TOOL_START,
            delta(1, toolUse={"input": '{"a": '}),
            delta(1, toolUse={"input": "1}"}),
            {"contentBlockStop": {"contentBlockIndex": 1}},
            {"messageStop": {"stopReason": "tool_use"}},
            {"metadata": {"usage": {"inputTokens": 3, "outputTokens": 4}}},
        ]
    )
    out = assembler.finish()
    assert out.message == {
        "role": "assistant",
        "content": [
            {"text": "Hello"},
            {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}},
        ],
    }
    assert out.stop_reason == "tool_use"
    assert out.usage == {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}
    assert out.invalid_tool_inputs == {}


def test_add_returns_user_facing_deltas_only() -> None:
    assembler = MessageAssembler()
    assert assembler.add({"messageStart": {"role": "assistant"}}) is None
    assert assembler.add(delta(0, text="hi")) == TextDelta(text="hi")  # type: ignore[arg-type]
    assert assembler.add(delta(1, reasoningContent={"text": "hmm"})) == ReasoningDelta(text="hmm")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "problem"), [('{"a": ', "not valid JSON"), ("[1, 2]", "must be a JSON object")]
)
def test_invalid_tool_input_is_recorded_not_raised(raw: str, problem: str) -> None:
    out = feed(
        [
            TOOL_START,
            delta(1, toolUse={"input": raw}),
            {"contentBlockStop": {"contentBlockIndex": 1}},
        ]
    ).finish()
    assert out.message["content"][0]["toolUse"]["input"] == {}
    assert problem in out.invalid_tool_inputs["t1"]


def test_empty_tool_input_is_an_empty_object() -> None:
    out = feed([TOOL_START, {"contentBlockStop": {"contentBlockIndex": 1}}]).finish()
    assert out.message["content"][0]["toolUse"]["input"] == {}
    assert out.invalid_tool_inputs == {}


def test_empty_response_gets_placeholder_text_and_blank_text_is_dropped() -> None:
    assert feed([]).finish().message["content"] == [{"text": EMPTY_RESPONSE_TEXT}]
    assert feed([delta(0, text="  ")]).finish().message["content"] == [
        {"text": EMPTY_RESPONSE_TEXT}
    ]


def test_partial_keeps_text_drops_tools_and_unfinished_reasoning() -> None:
    assembler = feed(
        [
            delta(0, reasoningContent={"text": "done thinking"}),
            delta(0, reasoningContent={"signature": "sig"}),
            {"contentBlockStop": {"contentBlockIndex": 0}},
            delta(1, text="Partial ans"),
            {
                "contentBlockStart": {
                    "contentBlockIndex": 2,
                    "start": {"toolUse": {"toolUseId": "t", "name": "f"}},
                }
            },
            delta(3, reasoningContent={"text": "unfinished"}),
        ]
    )
    assert assembler.partial("Cancelled by user")["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "done thinking", "signature": "sig"}}},
        {"text": "Partial ans"},
        {"text": "Cancelled by user"},
    ]


def test_contradictory_events_raise_stream_error() -> None:
    with pytest.raises(ModelStreamError):
        feed([TOOL_START, delta(1, text="text into a tool block")])
    with pytest.raises(ModelStreamError):
        feed([delta(0, toolUse={"input": "{}"})])


def test_usage_keeps_cache_figures_when_reported() -> None:
    reported = {"inputTokens": 3, "outputTokens": 4, "cacheReadInputTokens": 100}
    assembler = feed(
        [{"messageStop": {"stopReason": "end_turn"}}, {"metadata": {"usage": reported}}]
    )
    assert assembler.finish().usage == {
        "inputTokens": 3,
        "outputTokens": 4,
        "totalTokens": 7,
        "cacheReadInputTokens": 100,
    }
