"""cancel() reaches blocked I/O inside the Anthropic SDK, aborts only its own request, and
leaves the connection pool healthy.

Each test blocks the real SDK somewhere ``response.close()`` from another thread cannot
reach (a silent stream, headers that never come, a connect that hangs), cancels once the
server says the client is blocked, and checks the call returns promptly (a generous bound
that only catches hangs; latency figures live in bench/bench_anthropic.py).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from agent_sync.cancel import CancelledError, CancelScope
from agent_sync.messages import Message, StreamEvent
from agent_sync.models import AnthropicModel, ModelRequest
from agent_sync.models.anthropic import abortable_http_client
from agent_sync.testing.anthropic_server import AnthropicServer
from tests.fixtures.bounds import HANG_BOUND

from ._anthropic_fixtures import anthropic_fixtures

API_KEY = "sk-ant-cancel-test"
HELLO: list[Message] = [{"role": "user", "content": [{"text": "hi"}]}]
REQUEST = ModelRequest(messages=HELLO)


server, model = anthropic_fixtures(API_KEY)


class Consumer:
    """Runs ``model.stream`` in a named thread and records what happened."""

    def __init__(self, model: AnthropicModel, scope: CancelScope) -> None:
        self.events: list[StreamEvent] = []
        self.error: BaseException | None = None
        self.finished_at = 0.0
        self.first_event = threading.Event()
        self._model = model
        self._scope = scope
        self.thread = threading.Thread(target=self._run, name="anthropic-consumer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self._model.stream(REQUEST, cancel=self._scope):
                self.events.append(event)
                self.first_event.set()
        except BaseException as exc:  # recorded for the test to assert on
            self.error = exc
        finally:
            self.finished_at = time.monotonic()

    def assert_returned(self) -> None:
        self.thread.join(HANG_BOUND)
        assert not self.thread.is_alive(), "stream() did not return after cancel()"


def cancel_after(ready: Callable[[], bool], model: AnthropicModel) -> tuple[Consumer, float]:
    """Start a consumer, wait until ``ready()``, cancel; return it and the cancel time."""
    scope = CancelScope()
    consumer = Consumer(model, scope)
    assert ready(), "the client never reached the blocking state"
    cancelled_at = time.monotonic()
    assert scope.cancel("test") is True
    consumer.assert_returned()
    return consumer, cancelled_at


def test_cancel_while_the_stream_is_silent(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"text": "Hello there, this stalls", "stall_after": 4}, "after")
    consumer, cancelled_at = cancel_after(server.wait_for_stall, model)
    assert isinstance(consumer.error, CancelledError)
    assert consumer.finished_at - cancelled_at < HANG_BOUND
    assert consumer.events[0] == {"messageStart": {"role": "assistant"}}
    assert server.wait_for_idle(), "the aborted socket was leaked"
    # The model (and its pool) works again after the abort.
    events = list(model.stream(REQUEST, cancel=CancelScope()))
    assert any(e.get("messageStop", {}).get("stopReason") == "end_turn" for e in events)


def test_cancel_before_response_headers(server: AnthropicServer, model: AnthropicModel) -> None:
    server.add_turns({"stall_headers": True}, "after")
    consumer, _ = cancel_after(server.wait_for_stall, model)
    assert isinstance(consumer.error, CancelledError)
    assert consumer.events == []
    assert server.wait_for_idle()
    assert any("contentBlockDelta" in e for e in model.stream(REQUEST, cancel=CancelScope()))


def test_cancel_on_a_reused_keepalive_connection(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("warm the pool", {"stall_headers": True}, "after")
    list(model.stream(REQUEST, cancel=CancelScope()))  # leaves an idle pooled connection
    consumer, _ = cancel_after(server.wait_for_stall, model)
    assert isinstance(consumer.error, CancelledError)
    assert server.wait_for_idle()
    assert len(list(model.stream(REQUEST, cancel=CancelScope()))) > 3


def test_cancel_while_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    # A listener with a full accept backlog drops SYNs, so connect() blocks (Linux).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    filler = socket.create_connection(address, timeout=2)
    connecting = threading.Event()
    guarded_connect_ex = socket.socket.connect_ex

    def observed_connect_ex(sock: socket.socket, target: Any) -> int:
        code = guarded_connect_ex(sock, target)
        if target == address:
            connecting.set()  # the SYN is out: the socket is in SYN_SENT
        return code

    # Observe (not alter) the connect: the abortable connect starts it with connect_ex.
    monkeypatch.setattr(socket.socket, "connect_ex", observed_connect_ex)
    model = AnthropicModel(
        "claude-test",
        client_args={"base_url": f"http://127.0.0.1:{address[1]}", "api_key": API_KEY},
    )
    try:
        consumer, cancelled_at = cancel_after(lambda: connecting.wait(HANG_BOUND), model)
        assert isinstance(consumer.error, CancelledError)
        assert consumer.finished_at - cancelled_at < HANG_BOUND
    finally:
        model.close()
        filler.close()
        listener.close()


def test_cancel_before_the_call_sends_nothing(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    scope = CancelScope()
    scope.cancel()
    with pytest.raises(CancelledError):
        list(model.stream(REQUEST, cancel=scope))
    assert server.requests == []


def test_cancel_between_events_stops_the_stream(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    # the server stalls after 50 events: the response cannot be whole before the cancel (a
    # whole one leaves its connection in the pool, however fast the client was)
    server.add_turns({"text": "x" * 400, "chunk_size": 4, "stall_after": 50}, "after")
    scope = CancelScope()
    stream = model.stream(REQUEST, cancel=scope)
    first = next(stream)
    assert first == {"messageStart": {"role": "assistant"}}
    scope.cancel()
    with pytest.raises(CancelledError):
        for _ in stream:
            pass
    assert server.wait_for_idle()


def test_closing_the_generator_early_releases_the_connection(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns({"text": "y" * 400, "chunk_size": 4, "stall_after": 50})
    stream = model.stream(REQUEST, cancel=CancelScope())
    next(stream)
    stream.close()
    assert server.wait_for_idle()


def test_cancel_aborts_only_its_own_request_on_a_shared_model(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    # Two agents sharing one model: A stalls and is cancelled, B streams slowly meanwhile.
    server.add_turns({"text": "A stalls here", "stall_after": 3})
    scope_a = CancelScope()
    consumer_a = Consumer(model, scope_a)
    assert server.wait_for_stall()
    server.add_turns({"text": "B" * 40, "chunk_size": 2, "chunk_delay": 0.002})
    scope_b = CancelScope()
    consumer_b = Consumer(model, scope_b)
    assert consumer_b.first_event.wait(HANG_BOUND)
    scope_a.cancel()
    consumer_a.assert_returned()
    consumer_b.assert_returned()
    assert isinstance(consumer_a.error, CancelledError)
    assert consumer_b.error is None
    text = "".join(
        e["contentBlockDelta"]["delta"].get("text", "")
        for e in consumer_b.events
        if "contentBlockDelta" in e
    )
    assert text == "B" * 40
    model.close()  # B's connection was pooled; closing the pool must leave nothing open
    assert server.wait_for_idle()


def test_late_cancel_after_the_stream_ended_touches_nothing(
    server: AnthropicServer, model: AnthropicModel
) -> None:
    server.add_turns("one", "two")
    scope = CancelScope()
    assert len(list(model.stream(REQUEST, cancel=scope))) > 0
    scope.cancel()  # the request is over: its pooled connection must survive
    assert len(list(model.stream(REQUEST, cancel=CancelScope()))) > 0
    assert len(server.requests) == 2


def test_own_client_without_abortable_transport_still_aborts_a_silent_stream(
    server: AnthropicServer,
) -> None:
    server.add_turns({"text": "stall after headers", "stall_after": 3})
    client = anthropic.Anthropic(base_url=server.base_url, api_key=API_KEY)
    model = AnthropicModel("claude-test", client=client)
    consumer, _ = cancel_after(server.wait_for_stall, model)
    assert isinstance(consumer.error, CancelledError)
    assert server.wait_for_idle()
    client.close()


def test_own_client_built_with_abortable_http_client_aborts_before_headers(
    server: AnthropicServer,
) -> None:
    server.add_turns({"stall_headers": True})
    client = anthropic.Anthropic(
        base_url=server.base_url, api_key=API_KEY, http_client=abortable_http_client()
    )
    model = AnthropicModel("claude-test", client=client)
    consumer, _ = cancel_after(server.wait_for_stall, model)
    assert isinstance(consumer.error, CancelledError)
    assert server.wait_for_idle()
    client.close()
