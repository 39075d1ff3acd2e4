"""The one history a cancel leaves (``_history.close_cancelled_turn``), wherever the run was.

The run (cancelled while running), the slot (a paused run dropped while idle) and the stores
(a paused or lost run cancelled with nobody running it) all close a cancelled turn with it; the
cases below pin the rule itself: every call answered once, known results kept, queued input
in the next user message, one closing assistant message, roles alternating.
"""

from __future__ import annotations

import itertools

import pytest

from agent_sync._history import close_cancelled_turn
from agent_sync.messages import CANCELLED_TEXT, ContentBlock, Message, ToolResult, validate_history
from agent_sync.stores import _rules

WORKER_STOPPED = _rules.WORKER_STOPPED_TEXT


def _calls(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": [{"toolUse": {"toolUseId": i, "name": "t", "input": {}}} for i in ids],
    }


def _result(tool_use_id: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": "ran"}]}


ENDINGS: dict[str, list[Message]] = {
    "prompt not answered": [{"role": "user", "content": [{"text": "hi"}]}],
    "calls pending": [{"role": "user", "content": [{"text": "hi"}]}, _calls("a", "b")],
    "results given": [
        {"role": "user", "content": [{"text": "hi"}]},
        _calls("a"),
        {"role": "user", "content": [{"toolResult": _result("a")}]},
    ],
}


@pytest.mark.parametrize(
    ("ending", "known", "queued", "unanswered"),
    list(
        itertools.product(
            ENDINGS,
            [(), (_result("b"),)],
            [(), ({"text": "also this"},)],
            [CANCELLED_TEXT, WORKER_STOPPED],
        )
    ),
)
def test_a_cancelled_turn_is_closed_one_way(
    ending: str,
    known: tuple[ToolResult, ...],
    queued: tuple[ContentBlock, ...],
    unanswered: str,
) -> None:
    messages = [dict(m, content=list(m["content"])) for m in ENDINGS[ending]]
    before = len(messages)
    close_cancelled_turn(messages, results=known, queued=queued, unanswered_text=unanswered)  # type: ignore[arg-type]

    assert validate_history(messages) == []
    assert messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    added = messages[before - 1 :]
    results = {
        b["toolResult"]["toolUseId"]: b["toolResult"]
        for m in added
        for b in m["content"]
        if "toolResult" in b
    }
    if ending == "calls pending":
        assert set(results) == {"a", "b"}
        assert results["a"]["status"] == "error"
        assert unanswered in results["a"]["content"][0]["text"]
        assert results["b"] == (known[0] if known else results["b"])
        if not known:
            assert results["b"]["status"] == "error"
    user_texts = [b for m in messages[before - 1 :] if m["role"] == "user" for b in m["content"]]
    assert all(q in user_texts for q in queued)
    # one closing message, never a second one
    assert sum(1 for m in messages if m["content"] == [{"text": CANCELLED_TEXT}]) == 1
