"""Summaries are stored with the conversation (memory, SQLite, Redis): another worker reuses
them instead of summarizing again; a summary of another log is never used; the summary call
is cancelled with the run, leaving a valid history with the prompt kept."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, validate_history
from agent_sync.context import SUMMARY_HEADING, Summarizing
from agent_sync.messages import CANCELLED_TEXT, Message
from agent_sync.result import AgentResult
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer
from tests.fixtures.doubles import texts
from tests.fixtures.processes import child_context

pytestmark = pytest.mark.timeout(60)


def _long_history(pairs: int) -> list[Message]:
    history: list[Message] = []
    for i in range(pairs):
        history += [
            {"role": "user", "content": [{"text": f"question {i} " + "q" * 400}]},
            {"role": "assistant", "content": [{"text": f"answer {i} " + "a" * 400}]},
        ]
    return history


def _transcripts(summarizer: ScriptedModel) -> str:
    """Everything the summarizer was sent, its calls joined."""
    return "\n".join(call.messages[0]["content"][0]["text"] for call in summarizer.calls)


def _policy(summarizer: ScriptedModel) -> Summarizing:
    return Summarizing(summarizer, keep_last=4, trigger_tokens=1000)


def test_a_summary_written_by_one_worker_is_reused_by_another(
    make_store: Callable[[], RunStore],
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    Agent(
        ScriptedModel([]), store=make_store(), conversation_id=conversation
    ).messages = _long_history(20)
    summarizer_a = ScriptedModel(["SUMMARY-A: the user asked twenty questions"], repeat=True)
    worker_a = Agent(
        ScriptedModel(["short answer"]),
        store=make_store(),
        conversation_id=conversation,
        context=_policy(summarizer_a),
    )
    worker_a.invoke("question 20")
    # the summarizer read the whole older part (not the kept messages), in pieces
    transcript = _transcripts(summarizer_a)
    assert "question 19" not in transcript and "answer 17" in transcript
    assert "question 0 " in transcript

    summarizer_b = ScriptedModel([])  # would fail if it were asked
    main_b = ScriptedModel(["another answer"])
    worker_b = Agent(
        main_b, store=make_store(), conversation_id=conversation, context=_policy(summarizer_b)
    )
    result = worker_b.invoke("question 21")

    assert result.text == "another answer" and summarizer_b.calls == []
    view = list(main_b.calls[0].messages)
    assert view[0]["content"][0]["text"] == (
        f"{SUMMARY_HEADING}\nSUMMARY-A: the user asked twenty questions"
    )
    assert validate_history(view) == []
    assert view[-1]["content"][-1]["text"] == "question 21"
    assert len(worker_b.messages) == 44  # the store's log keeps everything
    assert validate_history(worker_b.messages) == []


def test_a_summary_of_a_replaced_log_is_not_used(make_store: Callable[[], RunStore]) -> None:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    owner = Agent(ScriptedModel([]), store=make_store(), conversation_id=conversation)
    owner.messages = _long_history(20)
    worker = Agent(
        ScriptedModel(["one", "two"]),
        store=make_store(),
        conversation_id=conversation,
        context=_policy(ScriptedModel(["OLD SUMMARY"], repeat=True)),
    )
    worker.invoke("question 20")
    replaced = _long_history(20)
    replaced[-3]["content"] = [{"text": "another question entirely " + "x" * 400}]
    replaced[-4]["content"] = [{"text": "another answer entirely " + "y" * 400}]
    owner.messages = replaced  # the user rewrote the history

    main = ScriptedModel(["three"])
    summarizer = ScriptedModel(["NEW SUMMARY"], repeat=True)
    fresh = Agent(
        main, store=make_store(), conversation_id=conversation, context=_policy(summarizer)
    )
    fresh.invoke("question 20 again")

    assert summarizer.calls  # summarized again: the old summary is of another log
    assert main.calls[0].messages[0]["content"][0]["text"].endswith("NEW SUMMARY")


def test_cancel_during_the_summary_call_leaves_a_valid_history_with_the_prompt() -> None:
    # Imported here, not at the top: the worker processes below import this module (their
    # target) and would each spend ~0.8 s importing the Anthropic SDK they never use.
    from agent_sync.models import AnthropicModel

    with AnthropicServer([{"stall_headers": True}] + ["the summary"] * 10) as server:
        summarizer = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": "sk-sum"}
        )
        main = ScriptedModel(["the answer"])
        agent = Agent(main, messages=_long_history(20), context=_policy(summarizer))
        results: list[AgentResult] = []
        thread = threading.Thread(target=lambda: results.append(agent.invoke("question 20")))
        thread.start()
        assert server.wait_for_stall()
        assert agent.cancel("stop") is True
        thread.join(10)
        assert not thread.is_alive()

        (result,) = results
        assert result.stop_reason == "cancelled" and result.cancel_reason == "stop"
        assert main.calls == []  # the model call never started
        assert validate_history(agent.messages) == []
        assert texts(agent.messages[-2])[-1] == "question 20"
        assert texts(agent.messages[-1]) == [CANCELLED_TEXT]
        assert server.wait_for_idle()  # the summary request's socket was closed

        # the agent is reusable: the next call summarizes and answers
        assert agent.invoke("question 21").text == "the answer"
        view = list(main.calls[0].messages)
        assert view[0]["content"][0]["text"] == f"{SUMMARY_HEADING}\nthe summary"
        assert validate_history(view) == []
        summarizer.close()


# -- another process --

Spec = tuple[str, str]  # ("sqlite", path) or ("redis", "port/prefix")


def _open(spec: Spec) -> RunStore:
    kind, where = spec
    if kind == "sqlite":
        return SQLiteRunStore(where)
    import redis

    from agent_sync.stores import RedisRunStore

    port, prefix = where.split("/", 1)
    return RedisRunStore(redis.Redis(port=int(port)), prefix=prefix)


def summarizing_worker(spec: Spec, out: Any) -> None:
    """A worker process: answers the conversation's next question, summarizing it."""
    summarizer = ScriptedModel(["SUMMARY FROM ANOTHER PROCESS"], repeat=True)
    agent = Agent(
        ScriptedModel(["short answer"]),
        store=_open(spec),
        conversation_id="c1",
        context=_policy(summarizer),
    )
    agent.invoke("question 20")
    out.put(len(summarizer.calls))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_summary_written_in_another_process_is_reused(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if kind == "sqlite":
        spec: Spec = ("sqlite", str(tmp_path / "store.db"))
    else:
        server = request.getfixturevalue("redis_server")
        spec = ("redis", f"{server.port}/p{uuid.uuid4().hex[:12]}:")
    Agent(ScriptedModel([]), store=_open(spec), conversation_id="c1").messages = _long_history(20)
    context = child_context()
    out = context.Queue()
    child = context.Process(target=summarizing_worker, args=(spec, out))
    child.start()
    assert out.get(timeout=60) >= 1  # the other process wrote a summary
    child.join(30)
    assert child.exitcode == 0

    unused = ScriptedModel([])
    main = ScriptedModel(["answer 21"])
    agent = Agent(main, store=_open(spec), conversation_id="c1", context=_policy(unused))
    agent.invoke("question 21")

    assert unused.calls == []
    first = main.calls[0].messages[0]["content"][0]["text"]
    assert first == f"{SUMMARY_HEADING}\nSUMMARY FROM ANOTHER PROCESS"
