"""A summary holds exactly the messages it replaces (issue 29), on memory, SQLite and Redis:
made in pieces that each fit the model's window (each piece's summary the next one's
``previous``), never from nothing; an empty or failed answer leaves the view unsummarized
and nothing stored; a stored summary is used only while the log holds the very messages
it covers (a prefix digest of every covered message), and one whose coverage cannot be
proven (an older version's) is ignored and replaced."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, validate_history
from agent_sync.context import SUMMARY_HEADING, Summarizing
from agent_sync.context._coverage import PrefixDigests
from agent_sync.errors import ModelStreamError
from agent_sync.messages import Message
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel

pytestmark = pytest.mark.timeout(60)

_PREVIOUS = "Summary of the conversation before this part:\n"
_CONVERSATION = "The conversation:\n"


def _history(pairs: int, *, ask: str = "question", answer: str | None = None) -> list[Message]:
    history: list[Message] = []
    for i in range(pairs):
        reply = answer if answer is not None else f"answer {i} " + "a" * 400
        history += [
            {"role": "user", "content": [{"text": f"{ask} {i} " + "q" * 400}]},
            {"role": "assistant", "content": [{"text": reply}]},
        ]
    return history


def _request_text(call: Any) -> str:
    text = call.messages[0]["content"][0]["text"]
    assert isinstance(text, str)
    return text


def _pieces(summarizer: ScriptedModel) -> list[str]:
    """The transcript each summary call was sent."""
    return [_request_text(call).split(_CONVERSATION, 1)[1] for call in summarizer.calls]


def _calibrated(
    make_store: Callable[[], RunStore], summarizer: ScriptedModel, *, tokens_per_char: int
) -> tuple[Agent, ScriptedModel]:
    """An agent whose first call taught it the provider's tokens per character (the view
    ``[user "hi"]`` and no system prompt or tools: 8 characters as counted), then given a
    history of 20 long question/answer pairs."""
    main = ScriptedModel(
        [{"text": "hello", "usage": {"inputTokens": 8 * tokens_per_char}}, "the answer"]
    )
    agent = Agent(
        main,
        store=make_store(),
        conversation_id=f"c-{uuid.uuid4().hex[:8]}",
        context=Summarizing(summarizer, keep_last=4, trigger_tokens=2_000),
    )
    agent.invoke("hi")
    assert summarizer.calls == []
    agent.messages = _history(20)
    return agent, main


@pytest.mark.parametrize("tokens_per_char", [1, 1_000])
def test_every_replaced_message_is_summarized_once_in_pieces_within_the_window(
    make_store: Callable[[], RunStore], tokens_per_char: int
) -> None:
    summarizer = ScriptedModel([f"S{i}" for i in range(40)])
    agent, main = _calibrated(make_store, summarizer, tokens_per_char=tokens_per_char)

    assert agent.invoke("question 20").text == "the answer"

    pieces = _pieces(summarizer)
    assert pieces and all(piece.strip() for piece in pieces)  # never from nothing
    told = re.findall(r"(?:question|answer) \d+", "\n".join(pieces))
    expected = [f"{kind} {i}" for i in range(18) for kind in ("question", "answer")]
    expected.append("question 18")  # the view starts at "answer 18" (keep_last=4)
    assert told == expected  # each replaced message exactly once, in order
    for index, call in enumerate(summarizer.calls):
        text = _request_text(call)
        if index > 0:  # each piece continues the summary of the pieces before it
            assert text.count(_PREVIOUS) == 1 and f"{_PREVIOUS}S{index - 1}\n" in text
        if tokens_per_char == 1:  # the window is 2,000 characters: each call fits it
            assert len(text) + len(call.system_prompt or "") <= 2_000
    if tokens_per_char == 1:
        assert 4 < len(pieces) < 37  # pieces of several messages each
    else:  # the estimate leaves no room: one message per call, none dropped
        assert len(pieces) == 37
    view = list(main.calls[-1].messages)
    assert view[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nS{len(pieces) - 1}"
    assert validate_history(view) == []
    assert view[1]["content"][0]["text"].startswith("answer 18 ")
    assert view[-1]["content"][-1]["text"] == "question 20"


@pytest.mark.parametrize(
    "answer",
    [{"text": ""}, {"error": ModelStreamError("the summarizer broke")}],
    ids=["empty", "failed"],
)
def test_an_empty_or_failed_summary_leaves_the_view_unsummarized_and_nothing_stored(
    make_store: Callable[[], RunStore], answer: dict[str, Any]
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    Agent(ScriptedModel([]), store=make_store(), conversation_id=conversation).messages = _history(
        20
    )
    policy = Summarizing(ScriptedModel([answer]), keep_last=4, trigger_tokens=1_000)
    main = ScriptedModel(["answer 20"])
    worker = Agent(main, store=make_store(), conversation_id=conversation, context=policy)

    assert worker.invoke("question 20").text == "answer 20"  # the run goes on

    view = list(main.calls[0].messages)
    assert view == worker.messages[:-1]  # the whole history, unsummarized
    summarizer = ScriptedModel(["A REAL SUMMARY"], repeat=True)
    main = ScriptedModel(["answer 21"])
    other = Agent(
        main,
        store=make_store(),
        conversation_id=conversation,
        context=Summarizing(summarizer, keep_last=4, trigger_tokens=1_000),
    )
    other.invoke("question 21")
    assert summarizer.calls  # nothing was stored for it to reuse
    assert main.calls[0].messages[0]["content"][0]["text"] == (f"{SUMMARY_HEADING}\nA REAL SUMMARY")


def test_a_replaced_history_whose_last_covered_message_repeats_is_summarized_again(
    make_store: Callable[[], RunStore],
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    owner = Agent(ScriptedModel([]), store=make_store(), conversation_id=conversation)
    owner.messages = _history(20, ask="fact", answer="Noted.")
    # keep_last=5: the summary ends before "fact 18", its last covered message a "Noted."
    policy = Summarizing(ScriptedModel(["FACTS"], repeat=True), keep_last=5, trigger_tokens=1_000)
    Agent(
        ScriptedModel(["ok"]), store=make_store(), conversation_id=conversation, context=policy
    ).invoke("fact 20")
    # another conversation of the same length, every answer the same "Noted."
    owner.messages = _history(20, ask="wish", answer="Noted.")

    summarizer = ScriptedModel(["WISHES"], repeat=True)
    main = ScriptedModel(["ok"])
    Agent(
        main,
        store=make_store(),
        conversation_id=conversation,
        context=Summarizing(summarizer, keep_last=5, trigger_tokens=1_000),
    ).invoke("wish 20")

    assert "wish 0 " in "\n".join(_pieces(summarizer))  # summarized from its first message
    assert main.calls[0].messages[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nWISHES"


def _old_digest(message: Message) -> str:
    """How the previous version fingerprinted the last covered message."""
    text = json.dumps(message, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_stored_summary_of_the_previous_version_is_ignored_and_replaced(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    history = _history(20)
    end = 38  # covers more than the new summary will: only the read value may replace it
    old = json.dumps({"end": end, "digest": _old_digest(history[end - 1]), "text": "OLD"})
    if kind == "sqlite":
        path = tmp_path / "store.db"

        def make_store() -> RunStore:
            return SQLiteRunStore(path)

        Agent(ScriptedModel([]), store=make_store(), conversation_id="c1").messages = history
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS context_summaries (conversation_id TEXT PRIMARY "
                "KEY, end_position INTEGER NOT NULL, summary TEXT NOT NULL)"
            )
            db.execute("INSERT INTO context_summaries VALUES ('c1', ?, ?)", (end, old))
        db.close()
    else:
        import redis

        from agent_sync.stores import RedisRunStore

        server = request.getfixturevalue("redis_server")
        prefix = f"p{uuid.uuid4().hex[:10]}:"

        def make_store() -> RunStore:
            return RedisRunStore(redis.Redis(port=server.port), prefix=prefix)

        Agent(ScriptedModel([]), store=make_store(), conversation_id="c1").messages = history
        redis.Redis(port=server.port).set(f"{prefix}summary:c1", old)

    def answer(prompt: str, summarizer: ScriptedModel) -> str:
        main = ScriptedModel(["ok"])
        policy = Summarizing(summarizer, keep_last=4, trigger_tokens=1_000)
        Agent(main, store=make_store(), conversation_id="c1", context=policy).invoke(prompt)
        text = main.calls[0].messages[0]["content"][0]["text"]
        assert isinstance(text, str)
        return text

    assert answer("question 20", ScriptedModel(["NEW"], repeat=True)) == (f"{SUMMARY_HEADING}\nNEW")
    unused = ScriptedModel([])  # the new summary replaced the old one: it is reused
    assert answer("question 21", unused) == f"{SUMMARY_HEADING}\nNEW"
    assert unused.calls == []


def test_the_prefix_digest_proves_every_covered_message() -> None:
    history = _history(5, answer="Noted.")
    digests = PrefixDigests()
    same = json.loads(json.dumps(history))  # the same messages, other objects
    assert digests.of(history, 10) == PrefixDigests().of(same, 10) == digests.of(same, 10)
    changed = json.loads(json.dumps(history))
    changed[2]["content"][0]["text"] = "another question"
    assert changed[9] == history[9]  # the last covered message repeats ...
    assert digests.of(changed, 10) != PrefixDigests().of(history, 10)  # ... yet it differs
    assert digests.of(changed, 2) == PrefixDigests().of(history, 2)
    assert digests.of(history, 0) == ""


def test_digests_of_many_ends_come_from_one_chain() -> None:
    messages = _history(20)
    digests = PrefixDigests()
    chain = digests.chain(messages, 30)
    assert chain == [PrefixDigests().of(messages, end) for end in range(1, 31)]
    assert digests.chain(messages, 0) == [] and digests.of(messages, 0) == ""


def test_a_summary_in_pieces_walks_the_history_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each piece's summary is kept with the digest of the prefix it covers, looked up in one
    chain: checking the whole prefix again per piece (N / window pieces of a history of N
    messages) made a long history's summary quadratic."""
    summarizer = ScriptedModel(["so far"], repeat=True)
    policy = Summarizing(summarizer, keep_last=4, trigger_tokens=600)
    agent = Agent(ScriptedModel(["ok"]), messages=_history(100), context=policy)
    walks: list[int] = []
    for name in ("of", "chain"):
        real = getattr(PrefixDigests, name, None)
        if real is not None:

            def counting(self: PrefixDigests, history: Any, end: int, real: Any = real) -> Any:
                walks.append(end)
                return real(self, history, end)

            monkeypatch.setattr(PrefixDigests, name, counting)
    agent.invoke("next")
    assert len(summarizer.calls) > 3  # made in pieces
    assert len(walks) == 1, walks  # one chain up to the cut (no summary was stored before)
