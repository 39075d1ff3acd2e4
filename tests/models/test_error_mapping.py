"""One error-mapping rule per wire, held at every call site (the ``mapped_errors`` blocks).

For each provider, against its local fake: a failure before the response headers (an
error status, a refused connection), in the middle of the stream (an in-stream error, a
reset connection, a corrupt frame) and at its end (a body that closes before the final
event) leaves ``stream()`` as the documented :class:`ModelError`, chained ``from`` the
wire's own exception when there is one, and never shows the credential, even when the
server echoes it back. Once the scope is cancelled, whatever broke is the cancel; closing
the stream early raises nothing and releases the connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

import pytest

from agent_sync.cancel import CancelledError, CancelScope
from agent_sync.errors import (
    AgentSyncError,
    ModelConnectionError,
    ModelError,
    ModelStreamError,
    ModelThrottledError,
)
from agent_sync.messages import Message, StreamEvent
from agent_sync.models import AnthropicModel, BedrockModel, ModelRequest, OpenAIModel
from agent_sync.testing._http_server import ScriptedServer, TurnSpec
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.bedrock_server import BedrockServer
from agent_sync.testing.openai_server import OpenAIServer
from tests.fixtures.bounds import HANG_BOUND

from ._bedrock_fixtures import aws_session

ANTHROPIC_KEY = "sk-ant-mapping-rule-secret-0001"
OPENAI_KEY = "sk-openai-mapping-rule-secret-0002"
AWS_SECRET = "bedrock-mapping-rule-secret-0003"
HELLO: list[Message] = [{"role": "user", "content": [{"text": "hi"}]}]
REQUEST = ModelRequest(messages=HELLO)


class Provider(Protocol):
    """What these tests use of a provider model."""

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Wire:
    """How to reach one provider's fake, and what its wire raises.

    Attributes:
        name: The provider name errors carry.
        secret: The credential that must never show.
        server: The fake's class.
        connect: ``connect(base_url)`` -> a model on that server.
        libraries: Top-level modules whose exceptions are "the wire's own".
    """

    name: str
    secret: str
    server: type[ScriptedServer]
    connect: Callable[[str], Provider]
    libraries: frozenset[str]


def _anthropic(url: str) -> Provider:
    return AnthropicModel("claude-test", client_args={"base_url": url, "api_key": ANTHROPIC_KEY})


def _openai(url: str) -> Provider:
    return OpenAIModel("gpt-test", base_url=f"{url}/v1", api_key=OPENAI_KEY, timeout=(5, 30))


def _bedrock(url: str) -> Provider:
    session = aws_session("AKIDMAPPINGRULE00001", AWS_SECRET)
    return BedrockModel("test.model-v1:0", endpoint_url=url, boto_session=session)


WIRES = {
    "anthropic": Wire(
        "anthropic",
        ANTHROPIC_KEY,
        AnthropicServer,
        _anthropic,
        frozenset({"anthropic", "httpx2", "httpcore2", "json"}),
    ),
    "openai": Wire(
        "openai", OPENAI_KEY, OpenAIServer, _openai, frozenset({"requests", "urllib3", "json"})
    ),
    "bedrock": Wire(
        "bedrock", AWS_SECRET, BedrockServer, _bedrock, frozenset({"botocore", "urllib3"})
    ),
}

WIRE_CAUSE = "wire"  # chained from the wire's own exception
ANY_CAUSE = "any"  # built from the server's answer: a cause is optional

# (provider, call site, turn, expected error, cause); the echo turns carry the secret.
CASES: list[tuple[str, str, TurnSpec, type[ModelError], str]] = [
    ("anthropic", "before headers: 429 echoing the key",
     {"status": 429, "error_message": f"slow down {ANTHROPIC_KEY}"},
     ModelThrottledError, WIRE_CAUSE),
    ("anthropic", "mid-stream: error event echoing the key",
     {"text": "partial answer", "error_event_after": 3,
      "error_message": f"Overloaded {ANTHROPIC_KEY}"},
     ModelThrottledError, WIRE_CAUSE),
    ("anthropic", "mid-stream: connection reset",
     {"text": "hello world", "drop_after": 3}, ModelError, WIRE_CAUSE),
    ("anthropic", "mid-stream: corrupt frame",
     {"text": "hello world", "corrupt_after": 3}, ModelStreamError, WIRE_CAUSE),
    ("anthropic", "at the end: closed before message_stop",
     {"text": "hello world", "truncate_after": 4}, ModelStreamError, ANY_CAUSE),
    ("openai", "before headers: 429 echoing the key",
     {"status": 429, "error_message": f"slow down {OPENAI_KEY}"},
     ModelThrottledError, ANY_CAUSE),
    ("openai", "mid-stream: error object echoing the key",
     {"text": "abcdefgh" * 3, "error_type": "rate_limit_exceeded",
      "error_message": f"slow down {OPENAI_KEY}"},
     ModelThrottledError, ANY_CAUSE),
    ("openai", "mid-stream: connection reset",
     {"text": "abcdefgh" * 3, "drop_after": 2}, ModelError, WIRE_CAUSE),
    ("openai", "mid-stream: corrupt frame",
     {"text": "abcdefgh" * 3, "corrupt_after": 2}, ModelStreamError, WIRE_CAUSE),
    ("openai", "at the end: closed before [DONE]",
     {"text": "abcdefgh" * 3, "truncate_after": 2}, ModelStreamError, ANY_CAUSE),
    ("bedrock", "before headers: 429 echoing the key",
     {"status": 429, "error_type": "ThrottlingException",
      "error_message": f"slow down {AWS_SECRET}"},
     ModelThrottledError, WIRE_CAUSE),
    ("bedrock", "mid-stream: exception echoing the key",
     {"text": "Hello there", "exception_type": "throttlingException", "exception_after": 2,
      "error_message": f"slow down {AWS_SECRET}"},
     ModelThrottledError, WIRE_CAUSE),
    ("bedrock", "mid-stream: connection reset",
     {"text": "Hello there", "drop_after": 2}, ModelConnectionError, WIRE_CAUSE),
    ("bedrock", "mid-stream: corrupt frame",
     {"text": "Hello there", "corrupt_after": 2}, ModelStreamError, WIRE_CAUSE),
    ("bedrock", "at the end: closed before messageStop",
     {"text": "Hello there", "truncate_after": 2}, ModelStreamError, ANY_CAUSE),
]  # fmt: skip


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception it was raised from or during, once each."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        yield current
        pending += [current.__cause__, current.__context__]


def _assert_no_secret(error: BaseException, secret: str) -> None:
    for link in _chain(error):
        for text in (str(link), repr(link), repr(link.args)):
            assert secret not in text, f"{type(link).__name__} shows the credential"


@pytest.fixture(params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Wire:
    return WIRES[request.param]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("provider", "site", "turn", "expected", "cause"),
    CASES,
    ids=[f"{case[0]}-{case[1]}" for case in CASES],
)
def test_every_call_site_maps_by_the_one_rule(
    provider: str, site: str, turn: TurnSpec, expected: type[ModelError], cause: str
) -> None:
    wire = WIRES[provider]
    with wire.server([turn, "the next call works"]) as server:
        model = wire.connect(server.base_url)
        try:
            with pytest.raises(ModelError) as info:
                list(model.stream(REQUEST, cancel=CancelScope()))
            # The connection the failure broke is not reused broken.
            assert list(model.stream(REQUEST, cancel=CancelScope()))
        finally:
            model.close()
    error = info.value
    assert isinstance(error, expected), f"{site}: {type(error).__name__}: {error}"
    assert error.provider == wire.name
    if cause == WIRE_CAUSE:
        assert error.__cause__ is not None, f"{site}: not chained from the wire's exception"
    if error.__cause__ is not None:
        root = type(error.__cause__).__module__.split(".")[0]
        assert not isinstance(error.__cause__, AgentSyncError) and root in wire.libraries
    _assert_no_secret(error, wire.secret)


@pytest.mark.timeout(30)
def test_a_refused_connection_is_a_connection_error(wire: Wire) -> None:
    with wire.server() as gone:
        url = gone.base_url  # a port that is closed once the server is gone
    model = wire.connect(url)
    try:
        with pytest.raises(ModelConnectionError) as info:
            list(model.stream(REQUEST, cancel=CancelScope()))
    finally:
        model.close()
    cause = info.value.__cause__
    assert info.value.retryable and cause is not None
    assert type(cause).__module__.split(".")[0] in wire.libraries
    _assert_no_secret(info.value, wire.secret)


def _cancel_when_stalled(server: ScriptedServer, scope: CancelScope) -> threading.Thread:
    def run() -> None:
        if server.wait_for_stall(1, timeout=HANG_BOUND):
            scope.cancel("test")

    canceller = threading.Thread(target=run, name="test-canceller")
    canceller.start()
    return canceller


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "turn",
    [{"stall_headers": True}, {"text": "never finishes", "stall_after": 3}],
    ids=["before headers", "mid-stream"],
)
def test_once_cancelled_whatever_broke_is_the_cancel(wire: Wire, turn: dict[str, Any]) -> None:
    with wire.server([turn]) as server:
        model = wire.connect(server.base_url)
        scope = CancelScope()
        canceller = _cancel_when_stalled(server, scope)
        try:
            with pytest.raises(CancelledError) as info:
                list(model.stream(REQUEST, cancel=scope))
        finally:
            canceller.join(HANG_BOUND)
            model.close()
    assert not isinstance(info.value, ModelError) and str(info.value) == "test"
    _assert_no_secret(info.value, wire.secret)


@pytest.mark.timeout(30)
def test_closing_the_stream_early_raises_nothing_and_releases_it(wire: Wire) -> None:
    with wire.server(["a long enough answer to stop half way", "next"]) as server:
        model = wire.connect(server.base_url)
        try:
            stream = model.stream(REQUEST, cancel=CancelScope())
            next(iter(stream))
            cast(Generator[StreamEvent, None, None], stream).close()  # generators, all three
            assert server.wait_for_idle(HANG_BOUND)
            assert list(model.stream(REQUEST, cancel=CancelScope()))
        finally:
            model.close()
