"""The event-stream decoder and the ConverseStream reader that replace botocore's decoding.

Three properties, each against the real thing:

* the decoder gives back any messages encoded here (every header type), however the bytes
  are split, exactly as botocore's own ``EventStreamBuffer`` reads them; a broken prelude,
  CRC, length or header raises botocore's ``ParserError`` saying what is wrong, which
  ``BedrockModel`` reports as a ``ModelStreamError`` chained from it;
* ``fast_delta`` returns what botocore's parser returns for the payloads it accepts;
* through a real boto3 client and a wire server sending random Bedrock messages split at
  random points, ``stream_events`` yields the events (or raises the exception) that
  iterating botocore's ``EventStream`` yields.
"""

from __future__ import annotations

import base64
import functools
import json
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from botocore.config import Config
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer, ParserError
from botocore.parsers import EventStreamJSONParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sync.cancel import CancelScope
from agent_sync.errors import ModelStreamError
from agent_sync.messages import StreamEvent
from agent_sync.models import BedrockModel, ModelRequest
from agent_sync.models._bedrock_errors import map_error
from agent_sync.models._bedrock_stream import fast_delta, stream_events
from agent_sync.models._eventstream import EventStreamDecoder, HeaderValue
from agent_sync.testing._http_server import ServerTurn
from agent_sync.testing.bedrock_server import BedrockServer

from ._bedrock_fixtures import aws_session

HELLO: Any = [{"role": "user", "content": [{"text": "hi"}]}]

# header value type -> struct format of a fixed-size value
_FIXED = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}
_RANGES = {2: 2**7, 3: 2**15, 4: 2**31, 5: 2**63, 8: 2**63}

Header = tuple[str, int, HeaderValue]


def encode(headers: Sequence[Header], payload: bytes) -> bytes:
    """One message: (name, value type, value) headers, both CRCs right."""
    block = b""
    for name, kind, value in headers:
        raw_name = name.encode()
        block += bytes([len(raw_name)]) + raw_name + bytes([kind])
        if kind in _FIXED:
            block += struct.pack(_FIXED[kind], value)
        elif kind in (6, 7):
            raw = value.encode() if isinstance(value, str) else bytes(value)
            block += struct.pack(">H", len(raw)) + raw
        elif kind == 9:
            assert isinstance(value, bytes)
            block += value
    prelude = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


def _value(kind: int) -> st.SearchStrategy[HeaderValue]:
    if kind in _FIXED:
        return st.integers(-_RANGES[kind], _RANGES[kind] - 1)
    if kind == 6:
        return st.binary(max_size=40)
    if kind == 7:
        return st.text(max_size=40)
    if kind == 9:
        return st.binary(min_size=16, max_size=16)
    return st.just(kind == 0)


# A name of at most 30 characters is at most 120 bytes, below the format's 255. One strategy
# per value type (not a flatmap over the type): flatmap draws are slow enough that 100
# examples took 10 s and hit pytest-timeout on a loaded machine.
_name = st.text(min_size=1, max_size=30)
_header = st.one_of(*(st.tuples(_name, st.just(kind), _value(kind)) for kind in range(10)))
_message = st.tuples(
    st.lists(_header, max_size=6, unique_by=lambda h: h[0]), st.binary(max_size=300)
)


def _pieces(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(wire) + 1) for c in cuts})
    return [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]


def _decode(pieces: Sequence[bytes]) -> list[tuple[dict[str, HeaderValue], bytes]]:
    decoder = EventStreamDecoder()
    out = [(dict(m.headers), m.payload) for piece in pieces for m in decoder.feed(piece)]
    assert decoder.pending == 0
    return out


@given(st.lists(_message, max_size=6), st.lists(st.integers(0, 10_000), max_size=20))
def test_messages_decode_back_however_the_bytes_are_split(
    messages: list[tuple[list[Header], bytes]], cuts: list[int]
) -> None:
    wire = b"".join(encode(headers, payload) for headers, payload in messages)
    expected = [({n: v for n, _, v in headers}, payload) for headers, payload in messages]

    assert _decode(_pieces(wire, cuts)) == expected
    botocore = EventStreamBuffer()
    botocore.add_data(wire)
    assert [(m.headers, m.payload) for m in botocore] == expected


def test_a_message_is_returned_only_when_its_last_byte_arrives() -> None:
    wire = encode([(":event-type", 7, "x")], b"{}")
    decoder = EventStreamDecoder()

    assert [decoder.feed(wire[i : i + 1]) for i in range(len(wire) - 1)] == [[]] * (len(wire) - 1)
    assert decoder.pending == len(wire) - 1
    assert decoder.feed(wire[-1:]) == [({":event-type": "x"}, b"{}")]
    assert decoder.pending == 0


def _reframe(block: bytes, payload: bytes, total: int | None = None) -> bytes:
    """A message around a raw header block, CRCs right (``total`` may lie)."""
    size = total if total is not None else 16 + len(block) + len(payload)
    prelude = struct.pack(">II", size, len(block))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


def _flip(wire: bytes, index: int) -> bytes:
    return wire[:index] + bytes([wire[index] ^ 0x01]) + wire[index + 1 :]


_GOOD = encode([(":event-type", 7, "contentBlockDelta")], b'{"delta": {"text": "hi"}}')
_NAME = b"\x02:a"

BROKEN = {
    "ChecksumMismatch: prelude: Checksum mismatch": _flip(_GOOD, 9),
    "ChecksumMismatch: message of 73 bytes: Checksum mismatch": _flip(_GOOD, len(_GOOD) - 1),
    "ParserError: total length 15 too short": _reframe(_NAME + b"\x00", b"", total=15),
    "InvalidHeadersLength: Header length of 131073": struct.pack(">II", 99, 128 * 1024 + 1),
    "InvalidPayloadLength: Payload length of 25165825": struct.pack(">II", 24 * 2**20 + 17, 0),
    "ParserError: header ':a': unknown value type 10": _reframe(_NAME + b"\x0a", b""),
    "ParserError: header ':a': value runs past": _reframe(_NAME + b"\x07\x00\x09abc", b"body"),
    'DuplicateHeader: Duplicate header present: ":a"': _reframe(
        _NAME + b"\x00" + _NAME + b"\x01", b""
    ),
    "ParserError: header name is not UTF-8": _reframe(b"\x01\xff\x00", b""),
    "ParserError: header name runs past": _reframe(b"\x05ab", b""),
}


@pytest.mark.parametrize("detail", BROKEN)
def test_a_broken_message_is_a_clear_stream_error(detail: str) -> None:
    wire = BROKEN[detail]
    if "Length" in detail:  # a prelude alone, its CRC right
        wire += struct.pack(">I", zlib.crc32(wire))

    with pytest.raises(ParserError) as caught:
        EventStreamDecoder().feed(wire)
    error = map_error(caught.value)

    assert isinstance(error, ModelStreamError)
    assert str(error).startswith(f"Bedrock sent a malformed event stream frame ({detail}")
    assert (error.provider, error.retryable) == ("bedrock", False)


@given(st.integers(0, len(_GOOD) * 8 - 1), st.lists(st.integers(0, 1000), max_size=4))
def test_any_flipped_bit_is_caught(bit: int, cuts: list[int]) -> None:
    wire = bytearray(_GOOD)
    wire[bit // 8] ^= 1 << (bit % 8)
    decoder = EventStreamDecoder()

    with pytest.raises(ParserError):
        for piece in _pieces(bytes(wire), cuts):
            decoder.feed(piece)


# -- fast_delta agrees with botocore's parser --


@functools.cache
def _stream_shape() -> Any:
    client = aws_session("AKIDEVENTSTREAM", "eventstream-secret").client("bedrock-runtime")
    operation = client.meta.service_model.operation_model("ConverseStream")
    client.close()
    return operation.output_shape.members["stream"]


_DELTA_HEADERS: dict[str, HeaderValue] = {
    ":event-type": "contentBlockDelta",
    ":content-type": "application/json",
    ":message-type": "event",
}
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=5), inner, max_size=2)
    ),
    max_leaves=4,
)
_reasoning = st.dictionaries(
    st.sampled_from(["text", "signature", "redactedContent", "other"]),
    st.text(max_size=8) | _json,
    max_size=2,
)
_delta_member = st.one_of(
    st.tuples(st.just("text"), st.text(max_size=20) | _json),
    st.tuples(
        st.just("toolUse"),
        st.fixed_dictionaries({}, optional={"input": st.text(max_size=9) | _json, "x": _json}),
    ),
    st.tuples(st.just("reasoningContent"), _reasoning),
    st.tuples(st.sampled_from(["citation", "image", "unknownKind"]), _json),
)
_deltas = st.dictionaries(
    st.sampled_from(["text", "toolUse", "reasoningContent", "citation", "__type"]),
    _json,
    max_size=2,
) | _delta_member.map(lambda kv: {kv[0]: kv[1]})
_good_deltas = st.one_of(
    st.text(max_size=20).map(lambda text: {"text": text}),
    st.fixed_dictionaries({"input": st.text(max_size=9)}, optional={"x": _json}).map(
        lambda use: {"toolUse": use}
    ),
    st.tuples(st.sampled_from(["text", "signature"]), st.text(max_size=8)).map(
        lambda kv: {"reasoningContent": {kv[0]: kv[1]}}
    ),
)
_delta_bodies = st.fixed_dictionaries(
    {
        "delta": _good_deltas | _delta_member.map(lambda kv: {kv[0]: kv[1]}),
        "contentBlockIndex": st.integers(0, 5),
    },
    optional={"p": st.text(max_size=5), "other": _json},
) | st.fixed_dictionaries(
    {},
    optional={
        "delta": _deltas,
        "contentBlockIndex": st.integers(0, 5) | _json,
        "p": st.text(max_size=5),
    },
)


def _botocore_parse(headers: dict[str, HeaderValue], payload: bytes) -> Any:
    response = {"status_code": 200, "headers": headers, "body": payload}
    return EventStreamJSONParser().parse(response, _stream_shape())


@settings(max_examples=300)
@given(_delta_bodies)
def test_fast_delta_is_what_botocore_parses(body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    fast = fast_delta(_DELTA_HEADERS, payload)
    if fast is None:
        return
    expected = _botocore_parse(_DELTA_HEADERS, payload)
    assert fast == expected
    assert json.dumps(fast) == json.dumps(expected)  # the same key order too


@pytest.mark.parametrize(
    "body",
    [
        {"delta": {"text": "Hi"}, "contentBlockIndex": 0, "p": "abc"},
        {"delta": {"toolUse": {"input": '{"a"'}}, "contentBlockIndex": 2},
        {"delta": {"reasoningContent": {"text": "hm"}}, "contentBlockIndex": 0},
        {"delta": {"reasoningContent": {"signature": "sig"}}, "contentBlockIndex": 0},
    ],
)
def test_fast_delta_takes_the_deltas_of_an_answer(body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()

    assert fast_delta(_DELTA_HEADERS, payload) is not None


# -- the reader against botocore's iteration, through a real boto3 client --


class _WireServer(BedrockServer):
    """Answers every ``converse-stream`` with :attr:`chunks`, one HTTP chunk each."""

    chunks: Sequence[bytes] = ()

    def render_frames(self, turn: ServerTurn, request: Any, path: str) -> Sequence[bytes]:
        return self.chunks


def _message_bytes(kind: str, name: str, body: Any) -> bytes:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers: list[Header] = [(":content-type", 7, "application/json")]
    if kind == "event":
        headers += [(":event-type", 7, name), (":message-type", 7, "event")]
    elif kind == "exception":
        headers += [(":exception-type", 7, name), (":message-type", 7, "exception")]
    else:
        headers += [(":error-code", 7, name), (":error-message", 7, "went wrong")]
        headers += [(":message-type", 7, "error")]
    return encode(headers, payload)


_DOC = {"a": [1, None]}
_USE = {"toolUseId": "t1", "name": "f", "extra": 1}
_REDACTED = {"reasoningContent": {"redactedContent": base64.b64encode(b"\x00s").decode()}}
KINDS = [
            ("event", "messageStart", {"role": "assistant", "p": "ab"}),
            ("event", "contentBlockStart", {"contentBlockIndex": 1, "start": {"toolUse": _USE}}),
            ("event", "contentBlockDelta", {"contentBlockIndex": 0, "delta": _REDACTED}),
            ("event", "contentBlockDelta", b"not json"),
            ("event", "contentBlockStop", {"contentBlockIndex": 0}),
            ("event", "messageStop", {"stopReason": "x", "additionalModelResponseFields": _DOC}),
            ("event", "metadata", {"usage": {"inputTokens": 3}, "metrics": {"latencyMs": 9}}),
            ("event", "somethingNew", {"x": 1}),
            ("exception", "throttlingException", {"message": "slow down"}),
            ("exception", "modelStreamErrorException", {"message": "m", "originalStatusCode": 500}),
            ("exception", "brandNewException", {"message": "?"}),
            ("error", "InternalFailure", {}),
]  # fmt: skip
_events = st.one_of(
    st.tuples(st.just("event"), st.just("contentBlockDelta"), _delta_bodies),
    st.sampled_from(KINDS),
)


def _outcome(events: Iterator[Any]) -> tuple[list[Any], Any]:
    seen: list[Any] = []
    try:
        for event in events:
            seen.append(event)
    except Exception as exc:
        return seen, (type(exc), getattr(exc, "response", None), str(exc))
    return seen, None


@pytest.fixture(scope="module")
def wire() -> Iterator[tuple[_WireServer, Any]]:
    with _WireServer() as server:
        session = aws_session("AKIDEVENTSTREAM", "eventstream-secret")
        config = Config(retries={"total_max_attempts": 1})
        client = session.client("bedrock-runtime", endpoint_url=server.base_url, config=config)
        yield server, client
        client.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(_events, min_size=1, max_size=6),
    st.lists(st.integers(0, 10_000), max_size=8),
)
def test_the_reader_yields_what_botocore_yields(
    wire: tuple[_WireServer, Any], messages: list[tuple[str, str, Any]], cuts: list[int]
) -> None:
    ours, theirs = _both(wire, messages, cuts)

    assert ours == theirs


@pytest.mark.parametrize("message", KINDS, ids=[m[1] for m in KINDS])
def test_each_kind_of_message_reads_as_botocore_reads_it(
    wire: tuple[_WireServer, Any], message: tuple[str, str, Any]
) -> None:
    text = ("event", "contentBlockDelta", {"delta": {"text": "a"}, "contentBlockIndex": 0})
    ours, theirs = _both(wire, [text, message, text], [])

    assert ours == theirs
    assert ours[0][0] == {"contentBlockDelta": {"delta": {"text": "a"}, "contentBlockIndex": 0}}


def _both(
    wire: tuple[_WireServer, Any], messages: list[tuple[str, str, Any]], cuts: list[int]
) -> tuple[Any, Any]:
    """What ``stream_events`` and botocore's own iteration make of ``messages``."""
    server, client = wire
    body = b"".join(_message_bytes(*m) for m in messages)
    server.chunks = [p for p in _pieces(body, cuts) if p]
    request = {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    server.add_turns({}, {})
    ours_stream = client.converse_stream(**request)["stream"]
    ours = _outcome(stream_events(ours_stream))
    ours_stream.close()  # an exception leaves the rest unread (BedrockModel closes too)
    theirs_stream = client.converse_stream(**request)["stream"]
    theirs = _outcome(iter(theirs_stream))
    theirs_stream.close()
    return ours, theirs


def test_bedrock_model_reads_the_body_with_this_decoder(wire: tuple[_WireServer, Any]) -> None:
    server, _ = wire
    delta = {"delta": {"text": "hi"}, "contentBlockIndex": 0}
    good = _message_bytes("event", "contentBlockDelta", delta)
    broken = _flip(good, len(good) - 1)
    server.chunks = [good[:7], good[7:] + broken[:30], broken[30:]]
    server.add_turns({})
    session = aws_session("AKIDEVENTSTREAM", "eventstream-secret")
    model = BedrockModel("m", endpoint_url=server.base_url, boto_session=session)
    seen: list[StreamEvent] = []

    with pytest.raises(
        ModelStreamError, match=r"\(ChecksumMismatch: message of \d+ bytes"
    ) as caught:
        for event in model.stream(ModelRequest(messages=HELLO), cancel=CancelScope()):
            seen.append(event)
    model.close()

    assert seen == [{"contentBlockDelta": delta}]
    assert isinstance(caught.value.__cause__, ChecksumMismatch)  # the wire's own exception


def test_a_stream_botocore_did_not_build_is_iterated_as_is() -> None:
    events = [{"messageStart": {"role": "assistant"}}, {"messageStop": {"stopReason": "x"}}]

    assert list(stream_events(events)) == events
