"""What the output checks see across a message's blocks (DESIGN 13), on the three wires: the
answer's text blocks are one text (a secret split across two of them, with reasoning or a
toolUse between, is caught), the reasoning is one text (checked and held back as the answer
is), and the output tool's input JSON is the answer (structured output). For every split
of the secret at every chunk boundary: no byte of it, nor of what follows, reaches an event,
the history, the store or the SSE body; the history replays through the server, which
refuses what the real API refuses, and the next invoke works.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agent_sync import Agent, validate_history
from agent_sync.events import AgentEvent, Done, ReasoningDelta, TextDelta
from agent_sync.guardrails import (
    STOPPED_TEXT,
    Guardrail,
    GuardView,
    PatternGuard,
    Redact,
    guardrail,
)
from agent_sync.messages import Message
from agent_sync.stores import SQLiteRunStore
from agent_sync.testing import ScriptedModel
from tests.guardrails._chat import chat, chat_server
from tests.guardrails._wires import GUARD, SECRET, Wire, lookup
from tests.web._client import request_json

TAIL = " TAILMARK"  # what follows the secret: never released either
BEFORE = "Hello. "


class Note(pydantic.BaseModel):
    """A note on a city."""

    city: str
    note: str


def _stored(tmp_path: Path) -> bytes:
    """Every byte the store wrote (the database and its journals)."""
    return b"".join(path.read_bytes() for path in sorted(tmp_path.glob("runs.db*")))


def _shown(events: list[AgentEvent], kind: type[TextDelta | ReasoningDelta]) -> str:
    return "".join(event.text for event in events if type(event) is kind)


def _assert_nothing_tripped_left(events: list[AgentEvent], messages: list[Message]) -> None:
    done = events[-1]
    assert isinstance(done, Done) and done.result.stop_reason == "guardrail"
    shown = repr(events) + repr(messages)
    assert "sk-" not in shown and "TAILMARK" not in shown
    assert messages[-1]["content"][-1] == {"text": STOPPED_TEXT}
    assert validate_history(messages) == []


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """What the run logged, every level, the model clients' own lines too (the wire
    server's are left out: it sends the secret)."""
    return "\n".join(
        f"{record.getMessage()} {record.exc_text or ''}"
        for record in caplog.records
        if not record.name.startswith("agent_sync.testing")
    )


def _replay(server: Any, agent: Agent, tmp_path: Path) -> None:
    """The whole history, trips and all, goes through the provider's rules; nothing tripped
    was stored."""
    server.add_turns("all good")
    result = agent.invoke("replay")
    assert result.stop_reason == "end_turn" and result.text == "all good"
    assert "sk-" not in repr(server.requests[-1].body)
    stored = _stored(tmp_path)
    assert b"sk-" not in stored and b"TAILMARK" not in stored


@pytest.mark.parametrize(
    ("kind", "between"),
    [("text", "reasoning"), ("text", "tool"), ("reasoning", "tool")],
)
def test_a_secret_split_across_two_blocks_never_leaves(
    wire: Wire,
    store: SQLiteRunStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    between: str,
) -> None:
    """Two blocks of one text (the answer's, or the reasoning's) with another block between
    them: the secret split at each of its characters, streamed in chunks of 1 and 5."""
    caplog.set_level(logging.DEBUG)
    server, model = wire
    agent = Agent(model, tools=[lookup], guardrails=[GUARD], store=store, conversation_id="c")
    middle: tuple[str, Any] = ("tool", 0) if between == "tool" else (between, "Let me see.")
    shown_as = TextDelta if kind == "text" else ReasoningDelta
    for chunk_size in (1, 5):
        for split in range(1, len(SECRET)):
            blocks = [(kind, BEFORE + SECRET[:split]), middle, (kind, SECRET[split:] + TAIL)]
            server.add_turns(
                {
                    "blocks": blocks,
                    "tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}],
                    "chunk_size": chunk_size,
                }
            )
            events = list(agent.stream("go"))
            assert BEFORE.startswith(_shown(events, shown_as)), (chunk_size, split)
            _assert_nothing_tripped_left(events, agent.messages)
            # what streamed after the tripped text is never shown, in either text
            assert "Let me see" not in repr(events) + repr(agent.messages)
    _replay(server, agent, tmp_path)
    assert "sk-" not in _logged(caplog)


def test_a_secret_in_the_reasoning_never_leaves(
    wire: Wire, store: SQLiteRunStore, tmp_path: Path
) -> None:
    """Reasoning is output text: held back and checked as the answer is."""
    server, model = wire
    agent = Agent(model, guardrails=[GUARD], store=store, conversation_id="c")
    for chunk_size in (1, 4, 7, 25):
        for offset in (0, 3, 10):
            before = "a" * offset
            reasoning = ("reasoning", before + SECRET + TAIL)
            server.add_turns(
                {"blocks": [reasoning, ("text", "The answer.")], "chunk_size": chunk_size}
            )
            events = list(agent.stream("go"))
            assert before.startswith(_shown(events, ReasoningDelta)), (chunk_size, offset)
            assert _shown(events, TextDelta) == ""  # the answer after it never leaves either
            _assert_nothing_tripped_left(events, agent.messages)
    _replay(server, agent, tmp_path)


def test_a_secret_in_the_output_tools_input_never_leaves(
    wire: Wire, store: SQLiteRunStore, tmp_path: Path
) -> None:
    """The output tool's input JSON is the answer: checked before it is released (in the
    message, the result's output) or committed."""
    server, model = wire
    agent = Agent(model, output_type=Note, guardrails=[GUARD], store=store, conversation_id="c")
    for chunk_size in (1, 4, 7, 25):
        for offset in (0, 3, 10):
            note = "a" * offset + SECRET + TAIL
            call = {"name": "final_result", "input": {"city": "Oslo", "note": note}}
            server.add_turns(
                {"blocks": [("tool", 0)], "tool_calls": [call], "chunk_size": chunk_size}
            )
            events = list(agent.stream("go"))
            done = events[-1]
            assert isinstance(done, Done) and done.result.output is None, (chunk_size, offset)
            _assert_nothing_tripped_left(events, agent.messages)
    # a clean answer still comes through the tool
    server.add_turns(
        {"tool_calls": [{"name": "final_result", "input": {"city": "Oslo", "note": "ok"}}]}
    )
    assert agent.invoke("again").output == Note(city="Oslo", note="ok")
    server.add_turns("all good")
    assert agent.invoke("replay", output_type=None).text == "all good"
    assert "sk-" not in repr(server.requests[-1].body)
    assert b"sk-" not in _stored(tmp_path)


def test_a_redaction_across_two_blocks_goes_to_the_block_it_starts_in(wire: Wire) -> None:
    """What is released is exactly the history's text, block by block: a match that spans
    two text blocks is replaced in the first, the second keeps what follows it; redacted
    reasoning keeps its place without its signature (no provider is sent it back)."""
    server, model = wire
    redact = PatternGuard(r"sk-[A-Za-z0-9]{20,}", action="redact", max_match=40)
    agent = Agent(model, guardrails=[redact])
    split = 9
    server.add_turns(
        {
            "blocks": [
                ("reasoning", "I hold " + SECRET + "."),
                ("text", BEFORE + SECRET[:split]),
                ("reasoning", "More."),
                ("text", SECRET[split:] + " bye"),
            ],
            "chunk_size": 3,
        }
    )
    events = list(agent.stream("go"))
    assert _shown(events, TextDelta) == BEFORE + "[redacted] bye"
    assert _shown(events, ReasoningDelta) == "I hold [redacted].More."
    message = agent.messages[-1]
    texts = [block["text"] for block in message["content"] if "text" in block]
    assert texts == [BEFORE + "[redacted]", " bye"]
    reasoning = [
        block["reasoningContent"] for block in message["content"] if "reasoningContent" in block
    ]
    assert reasoning[0]["reasoningText"] == {"text": "I hold [redacted]."}  # unsigned now
    assert "sk-" not in repr(events) + repr(agent.messages)
    server.add_turns("all good")
    assert agent.invoke("replay").text == "all good"
    assert "sk-" not in repr(server.requests[-1].body)


def test_the_sse_body_and_the_store_hold_nothing_tripped(
    wire: Wire, store: SQLiteRunStore, tmp_path: Path
) -> None:
    server, model = wire

    def make_agent(cid: str) -> Agent:
        return Agent(model, store=store, conversation_id=cid, guardrails=[GUARD])

    turns = [
        {"blocks": [("text", BEFORE + "sk-Z9"), ("reasoning", "Hm."), ("text", SECRET[5:] + TAIL)]},
        {"blocks": [("reasoning", "I see " + SECRET + TAIL), ("text", "The answer.")]},
    ]
    with chat_server(make_agent, store) as port:
        for turn in turns:
            server.add_turns({**turn, "chunk_size": 2})
            frames = chat(port, "c1", "hi")
            raw = b"".join(frame.raw for frame in frames)
            assert b"sk-" not in raw and b"TAILMARK" not in raw
            assert frames[-1].data["stop_reason"] == "guardrail"
        status, history = request_json(port, "GET", "/api/history?conversation_id=c1")
        assert status == 200 and validate_history(history["messages"]) == []
        assert "sk-" not in json.dumps(history)
    stored = _stored(tmp_path)
    assert b"sk-" not in stored and b"TAILMARK" not in stored


def test_a_judges_checkpoint_spans_two_blocks_of_the_answer(wire: Wire) -> None:
    """A judge's checkpoints count the answer's text across its blocks: one covers the end
    of the first text block and the start of the second (the reasoning between is its own
    text), and its replacement goes to the block the segment starts in."""
    server, model = wire
    pendings: list[str] = []

    @guardrail(stage="output", every=4)
    def no_x(view: GuardView) -> Redact | None:
        pendings.append(view.pending)
        return Redact("[r]") if "X" in view.pending else None

    agent = Agent(model, guardrails=[no_x])
    blocks = [("text", "abcdeX"), ("reasoning", "think"), ("text", "ghijkl")]
    server.add_turns({"blocks": blocks, "chunk_size": 2})
    events = list(agent.stream("go"))
    assert "eXgh" in pendings  # the checkpoint across the two text blocks
    assert _shown(events, TextDelta) == "abcd[r]ijkl"
    assert _shown(events, ReasoningDelta) == "think"
    content = agent.messages[-1]["content"]
    assert [block["text"] for block in content if "text" in block] == ["abcd[r]", "ijkl"]
    assert validate_history(agent.messages) == []
    server.add_turns("all good")
    assert agent.invoke("replay").text == "all good"


def test_reasoning_is_held_back_as_the_answer_is_and_shown_in_order() -> None:
    """The reasoning's hold-back is released when the answer starts, in the same step as
    the answer's first released text: both are shown, in the order they streamed, also
    while a race-mode input check holds the events."""

    @guardrail(stage="input")  # mode="race": the call's events are held until it passed
    def fine(view: GuardView) -> None:
        return None

    turn = {"reasoning": "r" * 60, "text": "t" * 60, "chunk_size": 50}
    model = ScriptedModel([turn], repeat=True)
    setups: list[list[Guardrail | PatternGuard]] = [[GUARD], [GUARD, fine]]
    for guardrails in setups:
        events = list(Agent(model, guardrails=guardrails).stream("go"))
        shown = [
            (type(event).__name__, event.text)
            for event in events
            if isinstance(event, (TextDelta, ReasoningDelta))
        ]
        # the hold-back is 39 characters (max_match 40)
        assert shown == [
            ("ReasoningDelta", "r" * 11),
            ("ReasoningDelta", "r" * 10),
            ("ReasoningDelta", "r" * 39),
            ("TextDelta", "t" * 11),
            ("TextDelta", "t" * 10),
            ("TextDelta", "t" * 39),
        ]
