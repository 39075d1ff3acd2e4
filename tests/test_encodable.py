"""Issue 22 item 1 (and items 7 and 23): what goes into the history, the store and a frame is
made encodable at the edge where it enters (agent_sync/_encodable.py).

The rule is tested as a matrix: every bad value (a lone surrogate from ``os.fsdecode``,
``NaN``, infinities, ``1e400``, a ``datetime``, a ``Decimal``, a ``set``, a ``UUID``,
``bytes``, an object whose ``__str__`` raises) is pushed through every edge (the prompt, a
tool's return value, ``agent.inject``, ``store.inject``, a human's and a hook's ``Deny``
reason, the model's tool input through each provider's local wire server and through
``ScriptedModel``) on the memory, SQLite and Redis stores. Whatever the edge did (accept a
cleaned copy, answer with an error result, refuse with ``UsageError``), the history must
pass ``validate_history`` and strict JSON encoded as UTF-8, the store must load it back
equal, and every frame of the run must be storable and encodable. On the old code the
surrogate reached the store and the frames, and ``NaN`` the history and the store.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from agent_sync import (
    Agent,
    Deny,
    ToolContext,
    UsageError,
    repair_history,
    tool,
    validate_history,
)
from agent_sync._run_log._records import done_record, error_record, native_frame, records_of
from agent_sync._run_state import json_ready as _encode
from agent_sync.errors import ModelError
from agent_sync.events import AgentEvent, Done
from agent_sync.hooks import BeforeToolCall
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel
from agent_sync.models.base import Model
from agent_sync.stores import MemoryRunStore, RedisRunStore, RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.openai_server import OpenAIServer
from agent_sync.testing.redis_server import RedisServer
from tests.models._bedrock_fixtures import aws_session

CONVERSATION = "c-encodable"
FILE_NAME = os.fsdecode(b"report-\xff.txt")  # 'report-\udcff.txt': a lone surrogate


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


@dataclass(frozen=True)
class Bad:
    """A bad value: the Python value, its JSON text on a wire (``None``: JSON has no
    form for it), and whether a tool returning it gets a success (encoded) result."""

    value: Any
    wire: str | None
    tool_ok: bool


BAD: dict[str, Bad] = {
    "lone surrogate": Bad(FILE_NAME, '"report-\\udcff.txt"', True),
    "NaN": Bad(math.nan, "NaN", False),
    "inf": Bad(math.inf, "Infinity", False),
    "-inf": Bad(-math.inf, "-Infinity", False),
    "1e400": Bad(json.loads("1e400"), "1e400", False),
    "datetime": Bad(datetime.datetime(2026, 11, 26, 18, 0), None, True),
    "Decimal": Bad(decimal.Decimal("12.50"), None, True),
    "set": Bad({"b", "a"}, None, True),
    "UUID": Bad(uuid.UUID(int=7), None, True),
    "bytes": Bad(b"\x89PNG", None, False),
    "unprintable": Bad(_Unprintable(), None, False),
}

# -- stores --


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[RunStore]:
    if request.param == "memory":
        yield MemoryRunStore()
    elif request.param == "sqlite":
        sqlite_store = SQLiteRunStore(tmp_path / "runs.db")
        yield sqlite_store
        sqlite_store.close()
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        client = redis.Redis(port=server.port)
        yield RedisRunStore(client, prefix=f"enc{uuid.uuid4().hex[:10]}:")
        client.close()


# -- what every case asserts --


def _strict_utf8(value: Any) -> bytes:
    """What a store and a frame need: strict JSON (bytes as the stores write them), UTF-8."""
    return json.dumps(_encode(value), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _check(agent: Agent, store: RunStore, events: list[AgentEvent]) -> list[Any]:
    history = agent.messages
    assert validate_history(history) == []
    _strict_utf8(history)
    assert list(store.load(CONVERSATION).messages) == history  # the store round trip
    records = [record for event in events for record in records_of(event, cycle=1)]
    records += [done_record(event) for event in events if isinstance(event, Done)]
    frames_of = f"frames-{uuid.uuid4().hex}"
    if records:
        store.append_events(frames_of, records, after=0)
    for event in store.read_events(frames_of):
        native_frame(frames_of, event.seq, event.data)  # the SSE bytes: UTF-8
    assert not agent.is_running
    return history


def _surrogate_replaced(bad: Bad, history: list[Any]) -> None:
    if bad.value is FILE_NAME:
        text = json.dumps(_encode(history), ensure_ascii=False)
        assert "report-\ufffd.txt" in text


def _stream(agent: Agent, prompt: Any = None) -> list[AgentEvent]:
    with agent.stream(prompt) as events:
        return list(events)


def _content(value: Any) -> Any:
    """``value`` as content: a str as it is, anything else in a block's field."""
    if isinstance(value, str):
        return value
    document = {"format": "txt", "name": "notes", "source": {"bytes": b"hi"}, "context": value}
    return [{"text": "see the notes"}, {"document": document}]


def _agent(store: RunStore, model: Model, **kw: Any) -> Agent:
    return Agent(model, store=store, conversation_id=CONVERSATION, **kw)


# -- the edges --


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_prompt(name: str, store: RunStore) -> None:
    bad = BAD[name]
    agent = _agent(store, ScriptedModel(["noted"]))
    try:
        events = _stream(agent, _content(bad.value))
    except UsageError:
        events = []
        assert agent.messages == [] and bad.value is not FILE_NAME  # refused, nothing kept
    history = _check(agent, store, events)
    _surrogate_replaced(bad, history)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_tool_return_value(name: str, store: RunStore) -> None:
    bad = BAD[name]

    @tool
    def fetch() -> Any:
        """Fetch the thing."""
        return bad.value

    model = ScriptedModel([{"tool_calls": [{"name": "fetch", "input": {}}]}, "done"])
    agent = _agent(store, model, tools=[fetch])
    events = _stream(agent, "go")
    history = _check(agent, store, events)
    result = history[2]["content"][0]["toolResult"]
    assert result["status"] == ("success" if bad.tool_ok else "error")
    shown = json.dumps(result, ensure_ascii=False)
    assert "object at 0x" not in shown and "Decimal(" not in shown and "b'" not in shown
    _surrogate_replaced(bad, history)


def _injecting_tool(inject: Callable[[ToolContext, Any], None], value: Any) -> Any:
    @tool
    def note(context: ToolContext) -> str:
        """Take a note."""
        try:
            inject(context, _content(value))
        except UsageError as exc:
            return f"refused: {exc}"
        return "noted"

    return note


@pytest.mark.parametrize("name", sorted(BAD))
def test_agent_inject(name: str, store: RunStore) -> None:
    bad = BAD[name]
    note = _injecting_tool(lambda context, content: context.agent.inject(content), bad.value)
    model = ScriptedModel([{"tool_calls": [{"name": "note", "input": {}}]}, "done"])
    agent = _agent(store, model, tools=[note])
    history = _check(agent, store, _stream(agent, "go"))
    _surrogate_replaced(bad, history)


@pytest.mark.parametrize("name", sorted(BAD))
def test_store_inject(name: str, store: RunStore) -> None:
    bad = BAD[name]
    holder: dict[str, Agent] = {}

    def inject(context: ToolContext, content: Any) -> None:
        assert context.run_id is not None
        store.inject(context.run_id, content)  # raises UsageError at the edge if refused
        run = holder["agent"].active_run
        assert run is not None
        while not run.snapshot().queued_inputs:  # the owner's watcher delivers it
            assert not context.wait(0.005)

    note = _injecting_tool(inject, bad.value)
    model = ScriptedModel([{"tool_calls": [{"name": "note", "input": {}}]}, "done"])
    agent = holder["agent"] = _agent(store, model, tools=[note])
    history = _check(agent, store, _stream(agent, "go"))
    _surrogate_replaced(bad, history)


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return f"wiped {path}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_humans_deny_reason(name: str, store: RunStore) -> None:
    bad = BAD[name]
    asks = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}
    agent = _agent(store, ScriptedModel([asks, "ok"]), tools=[wipe])
    events = _stream(agent, "wipe it")
    (request,) = agent.pending_approvals
    try:
        with agent.resume_stream({request.id: Deny(bad.value)}) as resumed:
            events += list(resumed)
    except UsageError:
        assert not isinstance(bad.value, str)  # a reason is a str: anything else refused
        with agent.resume_stream({request.id: Deny("no")}) as resumed:
            events += list(resumed)
    history = _check(agent, store, events)
    _surrogate_replaced(bad, history)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_hooks_deny_reason(name: str, store: RunStore) -> None:
    bad = BAD[name]

    class Refuse:
        def before_tool_call(self, event: BeforeToolCall) -> Deny:
            return Deny(bad.value)

    @tool
    def delete(path: str) -> str:
        """Delete a path.

        Args:
            path: The path.
        """
        return "deleted"

    asks = {"tool_calls": [{"name": "delete", "input": {"path": "/data"}}]}
    agent = _agent(store, ScriptedModel([asks, "ok"]), tools=[delete], hooks=[Refuse()])
    history = _check(agent, store, _stream(agent, "delete it"))
    assert history[2]["content"][0]["toolResult"]["status"] == "error"
    _surrogate_replaced(bad, history)


# -- the model's tool input (and text), through each provider's parser --

WIRE = sorted(name for name, bad in BAD.items() if bad.wire is not None)


@tool
def look(value: str) -> str:
    """Look at a value.

    Args:
        value: The value.
    """
    return f"looked at {value}"


def _turns(bad: Bad) -> list[dict[str, Any]]:
    assert bad.wire is not None
    ask = {"tool_calls": [{"name": "look", "input": {}}], "raw": '{"value": ' + bad.wire + "}"}
    return [ask, {"text": f"done with {FILE_NAME}"}]


def _wire_model(kind: str, specs: list[Any], closers: list[Callable[[], None]]) -> Model:
    """A model of ``kind`` on its local wire server, playing ``specs``."""
    model: Any
    if kind == "anthropic":
        server: Any = AnthropicServer(specs)
        server.__enter__()
        model = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": "k-enc"}
        )
    elif kind == "openai":
        server = OpenAIServer(specs)
        server.__enter__()
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="k-enc")
    else:
        server = BedrockServer(specs)
        server.__enter__()
        model = BedrockModel(
            "test-model",
            endpoint_url=server.base_url,
            boto_session=aws_session("AKIAENCODABLE", "secret-enc"),
        )
    closers.append(lambda: server.__exit__(None, None, None))
    closers.append(model.close)
    return model  # type: ignore[no-any-return]


@pytest.fixture
def closers() -> Iterator[list[Callable[[], None]]]:
    to_close: list[Callable[[], None]] = []
    yield to_close
    for close in reversed(to_close):
        close()


@pytest.fixture(params=["anthropic", "openai", "bedrock", "scripted"])
def provider(
    request: pytest.FixtureRequest, closers: list[Callable[[], None]]
) -> Callable[[list[dict[str, Any]]], Model]:
    """Builds a model that plays the turns through the provider's real parser."""

    def build(turns: list[dict[str, Any]]) -> Model:
        if request.param == "scripted":
            return ScriptedModel(
                [
                    {"tool_calls": [{"name": "look", "raw_input": t["raw"]}]} if "raw" in t else t
                    for t in turns
                ]
            )
        specs = [
            {"tool_calls": t["tool_calls"], "raw_tool_input": {0: t["raw"]}} if "raw" in t else t
            for t in turns
        ]
        return _wire_model(request.param, specs, closers)

    return build


@pytest.mark.parametrize("name", WIRE)
def test_the_models_tool_input(name: str, store: RunStore, provider: Any) -> None:
    bad = BAD[name]
    agent = _agent(store, provider(_turns(bad)), tools=[look])
    events = _stream(agent, "look")
    history = _check(agent, store, events)
    use = history[1]["content"][-1]["toolUse"]
    result = history[2]["content"][0]["toolResult"]
    if isinstance(bad.value, str):  # the text is cleaned and the call runs
        assert use["input"] == {"value": "report-\ufffd.txt"} and result["status"] == "success"
    else:  # a non-finite number: invalid input, answered with an error the model can act on
        assert use["input"] == {} and result["status"] == "error"
        assert "JSON has no NaN or infinities" in result["content"][0]["text"]
    assert history[-1]["content"][-1]["text"] == "done with report-\ufffd.txt"


# -- a store written before the rule: it must still load, and load encodable --


def _fresh_redis_store(request: pytest.FixtureRequest) -> tuple[Any, str, RunStore]:
    """A client of the session's redis-server, a fresh key prefix and a store on both."""
    server: RedisServer = request.getfixturevalue("redis_server")
    client = redis.Redis(port=server.port)
    prefix = f"old{uuid.uuid4().hex[:10]}:"
    return client, prefix, RedisRunStore(client, prefix=prefix)


def _old_writes(text: bytes) -> bytes:
    """What an earlier version stored: a lone surrogate escaped, NaN written as such."""
    return text.replace(b"PLACEHOLDER", b"report-\\udcff.txt").replace(b"12345", b"NaN")


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_store_holding_a_lone_surrogate_and_nan_still_loads(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    @tool
    def count(n: int) -> str:
        """Count.

        Args:
            n: How many.
        """
        return "counted"

    turns: list[Any] = [{"tool_calls": [{"name": "count", "input": {"n": 12345}}]}, "PLACEHOLDER"]
    if kind == "sqlite":
        path = tmp_path / "old.db"
        store: RunStore = SQLiteRunStore(path)
        _agent(store, ScriptedModel(turns), tools=[count]).invoke("PLACEHOLDER")
        store.close()  # type: ignore[attr-defined]
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT rowid, message FROM log").fetchall()
            for rowid, message in rows:
                old = _old_writes(message.encode()).decode()
                db.execute("UPDATE log SET message = ? WHERE rowid = ?", (old, rowid))
        store = SQLiteRunStore(path)
    else:
        client, prefix, store = _fresh_redis_store(request)
        _agent(store, ScriptedModel(turns), tools=[count]).invoke("PLACEHOLDER")
        lists = [key for key in client.keys(prefix + "*") if client.type(key) == b"list"]
        for key in lists:
            items: list[bytes] = client.lrange(key, 0, -1)
            for position, item in enumerate(items):
                client.lset(key, position, _old_writes(item))
    stored = list(store.load(CONVERSATION).messages)
    assert validate_history(stored) == []
    _strict_utf8(stored)  # the old code loaded the surrogate: every writer of it failed
    assert stored[0]["content"] == [{"text": "report-\ufffd.txt"}]
    assert stored[1]["content"][0]["toolUse"]["input"] == {"n": None}  # NaN read as null
    agent = _agent(store, ScriptedModel(["going on"]), tools=[count])
    assert agent.invoke("and now?").text == "going on"  # the conversation goes on
    _strict_utf8(list(store.load(CONVERSATION).messages))
    if kind == "redis":
        client.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_an_event_log_holding_a_lone_surrogate_and_nan_still_replays(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """A run's event log appended before the edge rule (a lone surrogate escaped, NaN as
    such) replays: each record reads back encodable and its native frame encodes."""
    record = {"type": "text", "text": "PLACEHOLDER", "n": 12345}
    if kind == "sqlite":
        path = tmp_path / "old.db"
        store: RunStore = SQLiteRunStore(path)
        store.append_events("run_old", [record], after=0)
        store.close()  # type: ignore[attr-defined]
        with sqlite3.connect(path) as db:
            (data,) = db.execute("SELECT data FROM events WHERE run_id = 'run_old'").fetchone()
            old = _old_writes(data.encode()).decode()
            db.execute("UPDATE events SET data = ? WHERE run_id = 'run_old'", (old,))
        store = SQLiteRunStore(path)
    else:
        client, prefix, store = _fresh_redis_store(request)
        store.append_events("run_old", [record], after=0)
        (key,) = [k for k in client.keys(prefix + "*") if client.type(k) == b"stream"]
        ((entry_id, fields),) = client.xrange(key)
        client.delete(key)
        client.xadd(key, {b"d": _old_writes(fields[b"d"])}, id=entry_id)
    (event,) = store.read_events("run_old")
    assert event.data == {"type": "text", "text": "report-\ufffd.txt", "n": None}
    assert native_frame("run_old", event.seq, event.data).decode("utf-8")
    if kind == "redis":
        client.close()


@pytest.mark.parametrize("kind", ["anthropic", "openai", "bedrock"])
def test_a_providers_error_message_reaches_the_error_frame(
    kind: str, store: RunStore, closers: list[Callable[[], None]]
) -> None:
    """The provider's error body is text from outside: its message goes into the error frame."""
    model = _wire_model(kind, [{"status": 400, "error_message": f"bad {FILE_NAME}"}], closers)
    agent = _agent(store, model)
    with pytest.raises(ModelError) as caught:
        _stream(agent, "go")
    _check(agent, store, [])
    record = error_record(caught.value)
    assert (
        record["message"].endswith("report-\ufffd.txt") or "report-\ufffd.txt" in record["message"]
    )
    store.append_events("failed-run", [record], after=0)
    (stored,) = store.read_events("failed-run")
    native_frame("failed-run", stored.seq, stored.data)


# -- a caller's history (Agent(messages=...), agent.messages = ...) and repair_history --


def _with_surrogate() -> list[Any]:
    return [
        {"role": "user", "content": [{"text": f"open {FILE_NAME}"}]},
        {"role": "assistant", "content": [{"text": "opened"}]},
    ]


def test_validate_history_reports_what_no_store_can_encode() -> None:
    problems = validate_history(_with_surrogate())
    assert problems == [
        'message 0 block 0: $["text"] holds a lone surrogate (not encodable as UTF-8)'
    ]
    repaired = repair_history(_with_surrogate())
    assert validate_history(repaired) == [] and repaired[0]["content"] == [
        {"text": "open report-\ufffd.txt"}
    ]


# -- a cancel reason is caller text too: it reaches the store's state and the done frame --


@pytest.mark.parametrize("how", ["context.cancel", "agent.cancel after_turn", "store.cancel"])
def test_a_cancel_reason(how: str, store: RunStore) -> None:
    holder: dict[str, Agent] = {}

    @tool
    def stop(context: ToolContext) -> str:
        """Stop the run."""
        if how == "context.cancel":
            context.cancel(FILE_NAME)
        elif how == "agent.cancel after_turn":
            holder["agent"].cancel(FILE_NAME, mode="after_turn")
        else:
            assert context.run_id is not None and store.cancel(context.run_id, FILE_NAME)
            while not context.cancelled:  # the owner's watcher delivers it
                assert not context.wait(0.005)
        return "stopping"

    model = ScriptedModel([{"tool_calls": [{"name": "stop", "input": {}}]}, "never"])
    agent = holder["agent"] = _agent(store, model, tools=[stop])
    events = _stream(agent, "go")
    _check(agent, store, events)
    done = events[-1]
    assert isinstance(done, Done) and done.result.stop_reason == "cancelled"
    assert done.result.cancel_reason == "report-\ufffd.txt"
    run = store.get(done.run_id)
    assert run is not None and run.cancel_reason == "report-\ufffd.txt"


def test_a_paused_run_cancelled_through_the_store_keeps_an_encodable_reason(
    store: RunStore,
) -> None:
    asks = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}
    agent = _agent(store, ScriptedModel([asks]), tools=[wipe])
    paused = agent.invoke("wipe it")
    assert store.cancel(paused.run_id, FILE_NAME) is True
    run = store.get(paused.run_id)
    assert run is not None and run.cancel_reason == "report-\ufffd.txt"
    _strict_utf8(list(store.load(CONVERSATION).messages))


def test_a_callers_history_is_copied_encodable_or_refused() -> None:
    agent = Agent(ScriptedModel(["ok"]), messages=_with_surrogate())
    assert agent.messages[0]["content"] == [{"text": "open report-\ufffd.txt"}]
    agent.messages = _with_surrogate()
    assert agent.messages[0]["content"] == [{"text": "open report-\ufffd.txt"}]
    agent.invoke("go on")
    _strict_utf8(agent.messages)
    with_nan = [
        {"role": "user", "content": [{"text": "count"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "n", "input": {"n": math.nan}}}],
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}]}}],
        },
    ]
    with pytest.raises(UsageError, match="NaN"):
        Agent(ScriptedModel(["ok"]), messages=with_nan)
