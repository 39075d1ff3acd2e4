"""The SSE parser and the chunk translator on wire shapes the fake server does not produce."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent_sync.messages import StreamEvent
from agent_sync.models._openai_stream import ChunkTranslator
from agent_sync.models._sse import SSEEvent, iter_sse
from agent_sync.run._assemble import MessageAssembler

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b"event: ping\ndata: first line\ndata: second line\n\n"
    b"data:no-space\r\n\r\n"
    b"id: 7\nretry: 100\n\n"  # no data: not dispatched
    b'data: {"emoji": "\xc3\xa9\xe2\x82\xac"}\n\n'
    b"data: [DONE]\n\n"
    b"data: cut off at the end"
)

EXPECTED = [
    SSEEvent('{"a": 1}'),
    SSEEvent("first line\nsecond line", "ping"),
    SSEEvent("no-space"),
    SSEEvent('{"emoji": "é€"}'),
    SSEEvent("[DONE]"),
]


def test_sse_rules() -> None:
    assert list(iter_sse([STREAM])) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_sse_does_not_depend_on_where_chunks_split(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert list(iter_sse(pieces)) == EXPECTED


def test_sse_carriage_returns_only() -> None:
    assert list(iter_sse([b"data: x\r", b"\rdata: y\r\r"])) == [SSEEvent("x"), SSEEvent("y")]


def _translate(chunks: list[dict[str, Any]]) -> list[StreamEvent]:
    translator = ChunkTranslator()
    events: list[StreamEvent] = []
    for chunk in chunks:
        events.extend(translator.add(chunk))
    events.extend(translator.finish())
    return events


def _message(events: list[StreamEvent]) -> Any:
    assembler = MessageAssembler()
    for event in events:
        assembler.add(event)
    return assembler.finish()


def _choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_ollama_style_whole_tool_calls_without_index_and_stop_reason() -> None:
    events = _translate(
        [
            _choice({"role": "assistant", "content": ""}),
            _choice(
                {
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "a", "arguments": '{"x": 1}'}},
                        {"id": "c2", "function": {"name": "b", "arguments": {"y": 2}}},
                    ]
                }
            ),
            _choice({}, "stop"),  # Ollama says "stop" even when it called tools
        ]
    )
    assembled = _message(events)
    assert assembled.stop_reason == "tool_use"
    assert [block["toolUse"] for block in assembled.message["content"]] == [
        {"toolUseId": "c1", "name": "a", "input": {"x": 1}},
        {"toolUseId": "c2", "name": "b", "input": {"y": 2}},
    ]


def test_tool_call_without_id_gets_one() -> None:
    events = _translate(
        [
            _choice({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}),
            _choice({}, "tool_calls"),
        ]
    )
    tool_use = _message(events).message["content"][0]["toolUse"]
    assert tool_use["toolUseId"].startswith("call_")
    assert tool_use["name"] == "f"


def test_usage_repeated_in_every_chunk_is_reported_once_last_value() -> None:
    events = _translate(
        [
            {**_choice({"content": "a"}), "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
            {
                **_choice({"content": "b"}, "stop"),
                "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            },
        ]
    )
    metadata = [e["metadata"] for e in events if "metadata" in e]
    assert metadata == [{"usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}}]
    assert "messageStop" in events[-2]


def test_text_after_tool_calls_and_other_choices_are_ignored() -> None:
    events = _translate(
        [
            {"choices": [{"index": 1, "delta": {"content": "other choice"}}]},
            _choice({"content": "only this"}),
            _choice({}, "stop"),
        ]
    )
    assert _message(events).message["content"] == [{"text": "only this"}]


def test_empty_stream_still_yields_a_complete_message() -> None:
    assembled = _message(_translate([]))
    assert assembled.stop_reason == "end_turn"
