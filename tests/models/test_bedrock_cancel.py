"""cancel() reaches blocked botocore I/O, aborts only its own request, and leaves the pool healthy.

Every test blocks the real boto3 client somewhere a plain ``response.close()`` cannot
reach (a silent stream, headers that never come, a connect that hangs), cancels from
another thread once the server says the client is blocked, and checks the call returns
promptly (generous bound: timing figures live in bench/bench_bedrock.py).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import boto3
import pytest
from botocore.config import Config

from agent_sync.cancel import CancelledError, CancelScope
from agent_sync.messages import Message, StreamEvent
from agent_sync.models import BedrockModel, ModelRequest
from agent_sync.testing.bedrock_server import BedrockServer
from tests.fixtures.bounds import HANG_BOUND

from ._bedrock_fixtures import aws_session, server

__all__ = ["server"]  # fixture, imported for pytest

HELLO: list[Message] = [{"role": "user", "content": [{"text": "hi"}]}]
REQUEST = ModelRequest(messages=HELLO)


@pytest.fixture
def session() -> boto3.Session:
    return aws_session("AKIDCANCELTEST", "cancel-secret")


def make_model(server_url: str, session: boto3.Session, **kwargs: Any) -> BedrockModel:
    return BedrockModel("m", endpoint_url=server_url, boto_session=session, **kwargs)


def cancel_when(ready: Callable[[], bool], scope: CancelScope) -> threading.Thread:
    """Cancel ``scope`` from another thread once ``ready()`` returns true."""

    def run() -> None:
        if ready():
            scope.cancel("test")

    thread = threading.Thread(target=run, name="test-canceller")
    thread.start()
    return thread


def run_until_cancelled(
    model: BedrockModel, scope: CancelScope, got_text: threading.Event | None = None
) -> tuple[list[StreamEvent], float]:
    events: list[StreamEvent] = []
    start = time.monotonic()
    with pytest.raises(CancelledError):
        for event in model.stream(REQUEST, cancel=scope):
            events.append(event)
            if got_text is not None and text_of(events):
                got_text.set()
    return events, time.monotonic() - start


def text_of(events: list[StreamEvent]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


@pytest.mark.parametrize("streaming", [True, False])
def test_cancel_before_response_headers(
    server: BedrockServer, session: boto3.Session, streaming: bool
) -> None:
    server.add_turns({"stall_headers": True}, "fine again")
    model = make_model(server.base_url, session, streaming=streaming, read_timeout=60)
    scope = CancelScope()
    canceller = cancel_when(server.wait_for_stall, scope)

    events, elapsed = run_until_cancelled(model, scope)

    canceller.join(HANG_BOUND)
    assert events == []
    assert elapsed < HANG_BOUND
    assert server.wait_for_idle()  # the aborted socket was closed, not leaked
    assert text_of(list(model.stream(REQUEST, cancel=CancelScope()))) == "fine again"


def test_cancel_while_stream_is_silent(server: BedrockServer, session: boto3.Session) -> None:
    server.add_turns({"text": "Hello there", "stall_after": 2}, "fine again")
    model = make_model(server.base_url, session, read_timeout=60)
    scope = CancelScope()
    got_text = threading.Event()
    canceller = cancel_when(lambda: server.wait_for_stall() and got_text.wait(HANG_BOUND), scope)

    events, elapsed = run_until_cancelled(model, scope, got_text)

    canceller.join(HANG_BOUND)
    assert text_of(events) == "Hello th"  # what arrived before the silence was delivered
    assert elapsed < HANG_BOUND
    assert server.wait_for_idle()
    assert text_of(list(model.stream(REQUEST, cancel=CancelScope()))) == "fine again"


def test_pool_stays_healthy_after_many_aborts(
    server: BedrockServer, session: boto3.Session
) -> None:
    model = make_model(server.base_url, session, read_timeout=60)
    for round_number in range(1, 4):
        server.add_turns({"text": "abc", "stall_after": 1}, f"answer {round_number}")
        scope = CancelScope()
        canceller = cancel_when(partial(server.wait_for_stall, round_number), scope)
        run_until_cancelled(model, scope)
        canceller.join(HANG_BOUND)
        events = list(model.stream(REQUEST, cancel=CancelScope()))
        assert text_of(events) == f"answer {round_number}"
    model.close()
    assert server.wait_for_idle()


def test_late_cancel_does_not_touch_the_pooled_connection(
    server: BedrockServer, session: boto3.Session
) -> None:
    server.add_turns("first", "second")
    model = make_model(server.base_url, session)
    scope = CancelScope()

    assert text_of(list(model.stream(REQUEST, cancel=scope))) == "first"
    scope.cancel("too late")  # the connection is back in the pool by now

    assert text_of(list(model.stream(REQUEST, cancel=CancelScope()))) == "second"
    assert server.open_connections == 1  # reused, not replaced


def test_cancel_aborts_only_its_own_request(server: BedrockServer, session: boto3.Session) -> None:
    model = make_model(server.base_url, session, read_timeout=60)
    server.add_turns(
        {"text": "stalls", "stall_after": 1},
        {"text": "x" * 80, "chunk_size": 4, "chunk_delay": 0.005},
    )
    stalled_scope = CancelScope()
    results: dict[str, Any] = {}
    other_started = threading.Event()

    def stalled() -> None:
        try:
            list(model.stream(REQUEST, cancel=stalled_scope))
        except CancelledError as exc:
            results["stalled"] = exc

    def other() -> None:
        events = []
        for event in model.stream(REQUEST, cancel=CancelScope()):
            events.append(event)
            other_started.set()
        results["other"] = text_of(events)

    first = threading.Thread(target=stalled, name="test-stalled")
    first.start()
    assert server.wait_for_stall()
    second = threading.Thread(target=other, name="test-other")
    second.start()
    assert other_started.wait(HANG_BOUND)
    stalled_scope.cancel("only this one")
    first.join(HANG_BOUND)
    second.join(HANG_BOUND)

    assert isinstance(results["stalled"], CancelledError)
    assert results["other"] == "x" * 80  # the shared client's other request was untouched


def test_already_cancelled_scope_sends_nothing(
    server: BedrockServer, session: boto3.Session
) -> None:
    model = make_model(server.base_url, session)
    scope = CancelScope()
    scope.cancel()

    with pytest.raises(CancelledError):
        list(model.stream(REQUEST, cancel=scope))

    assert server.requests == []


def test_closing_the_stream_early_releases_the_connection(
    server: BedrockServer, session: boto3.Session
) -> None:
    server.add_turns({"text": "a long answer", "stall_after": 3}, "next")
    model = make_model(server.base_url, session, read_timeout=60)
    stream = model.stream(REQUEST, cancel=CancelScope())
    assert isinstance(stream, Generator)

    next(stream), next(stream)
    stream.close()  # e.g. a consumer that broke out of its loop

    assert server.wait_for_idle()
    assert text_of(list(model.stream(REQUEST, cancel=CancelScope()))) == "next"


def _syn_sent_to(port: int) -> bool:
    """Whether some socket of this machine is in SYN_SENT towards 127.0.0.1:``port``."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return any(row[2].endswith(f":{port:04X}") and row[3] == "02" for row in rows)


def _wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    # Polls kernel state: there is no event to wait on for "a connect() is in flight".
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if condition():
            return True
        pause.wait(0.002)
    return False


@pytest.mark.skipif(
    not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp to see SYN_SENT"
)
def test_cancel_while_connecting(session: boto3.Session) -> None:
    # A listener whose accept queue is full drops new SYNs: connect() hangs in SYN_SENT.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)
    model = make_model(f"http://127.0.0.1:{port}", session, connect_timeout=30)
    scope = CancelScope()
    try:
        canceller = cancel_when(lambda: _wait_until(lambda: _syn_sent_to(port), HANG_BOUND), scope)
        _, elapsed = run_until_cancelled(model, scope)
        canceller.join(HANG_BOUND)
    finally:
        filler.close()
        listener.close()
        model.close()

    assert elapsed < HANG_BOUND  # connect_timeout is 30 s: only the abort explains this


def test_no_threads_left_behind(
    server: BedrockServer, session: boto3.Session, thread_baseline: set[threading.Thread]
) -> None:
    server.add_turns({"text": "abc", "stall_after": 1})
    model = make_model(server.base_url, session, read_timeout=60)
    scope = CancelScope()
    canceller = cancel_when(server.wait_for_stall, scope)
    run_until_cancelled(model, scope)
    canceller.join(HANG_BOUND)

    assert server.wait_for_idle()
    ours = {
        t for t in set(threading.enumerate()) - thread_baseline if "process_request" not in t.name
    }
    assert ours == set()  # the fake server's own handler threads aside


@pytest.mark.parametrize("fault", [{"stall_headers": True}, {"text": "abc", "stall_after": 1}])
def test_a_client_used_before_becomes_abortable(
    server: BedrockServer, session: boto3.Session, fault: dict[str, Any]
) -> None:
    config = Config(retries={"total_max_attempts": 1}, read_timeout=60)
    client = session.client("bedrock-runtime", endpoint_url=server.base_url, config=config)
    server.add_turns("warm-up", fault, "after", "still usable")
    warm = client.converse_stream(
        modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}]
    )
    assert sum(1 for _ in warm["stream"]) > 0  # the client now has a plain urllib3 pool
    model = BedrockModel("m", client=client)
    scope = CancelScope()
    canceller = cancel_when(lambda: server.wait_for_stall(), scope)

    _, elapsed = run_until_cancelled(model, scope)

    canceller.join(HANG_BOUND)
    assert elapsed < HANG_BOUND
    assert text_of(list(model.stream(REQUEST, cancel=CancelScope()))) == "after"
    model.close()  # not ours: the client stays usable
    again = client.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert again["output"]["message"]["content"] == [{"text": "still usable"}]
    client.close()
