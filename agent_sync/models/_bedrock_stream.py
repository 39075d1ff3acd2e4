"""Reading a ``ConverseStream`` body: botocore's events, without botocore's generic decoders.

botocore returns the stream as an ``EventStream`` that has not read a byte yet. Iterating it
runs each message through its generic event-stream buffer and shape parser, which cost
more than everything else an agent does with the event. :func:`stream_events` reads the
same urllib3 response (``EventStream._raw_stream``, iterated exactly as botocore iterates
it, so the socket abort, timeouts and connection release behave the same) and decodes the
messages with :mod:`._eventstream`. Each message then becomes the very event botocore
would have produced:

* a ``contentBlockDelta`` carrying text, tool input or reasoning (nearly every message of
  an answer) is built directly: :func:`fast_delta` returns botocore's result for the
  payloads it accepts and ``None`` for anything else (tests compare the two on random
  payloads);
* every other message, exceptions and errors included, goes through botocore's own parser
  for that stream (``EventStream._parser``), and an ``exception``/``error`` message raises
  botocore's ``EventStreamError``, which :mod:`._bedrock_errors` maps as before.

A message that breaks the wire format raises botocore's ``ParserError`` (see
:mod:`._eventstream`), mapped as before. Nothing in the client is hooked or patched (a
user's ``client=`` is shared with other code): the ``EventStream`` is lazy, so leaving it
unread is all it takes to skip botocore's decoding. If it lacks the attributes used here
(another botocore version), it is iterated as is; if the service model's delta shapes
differ from what :func:`fast_delta` assumes, every message goes through botocore's parser.
Either way only speed is lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.exceptions import EventStreamError

from ..messages import StreamEvent
from ._bedrock_format import normalize_event
from ._eventstream import EventStreamDecoder, HeaderValue

__all__ = ["fast_delta", "normalized_events", "stream_events"]

logger = logging.getLogger(__name__)

_DELTA = "contentBlockDelta"
# the delta shapes fast_delta builds: union member -> (string members, is a union); no
# members: the member is a string itself
_FAST_MEMBERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "text": ((), False),
    "toolUse": (("input",), False),
    "reasoningContent": (("text", "signature"), True),
}
# serialization traits that would make botocore read a member differently
_TRAITS = frozenset({"name", "eventheader", "eventpayload", "jsonvalue", "location"})


def stream_events(response_stream: Any) -> Iterator[dict[str, Any]]:
    """The events of a ``converse_stream`` response, as botocore's iteration yields them.

    Args:
        response_stream: ``response["stream"]``, a botocore ``EventStream``.

    Yields:
        One parsed event per message (``{"contentBlockDelta": {...}}``...).

    Raises:
        botocore.exceptions.EventStreamError: The stream carried an exception or error.
        botocore.eventstream.ParserError: A message broke the wire format.
    """
    raw: Any = getattr(response_stream, "_raw_stream", None)
    parser = getattr(response_stream, "_parser", None)
    shape = getattr(response_stream, "_output_shape", None)
    operation = getattr(response_stream, "_operation_name", None)
    if shape is None or not callable(getattr(raw, "stream", None)) or not hasattr(parser, "parse"):
        logger.debug("stream=<%s> | unknown botocore event stream", type(response_stream).__name__)
        yield from response_stream
        return
    fast = _fast_path_fits(shape)
    decoder = EventStreamDecoder()
    for chunk in raw.stream():
        for headers, payload in decoder.feed(chunk):
            event = fast_delta(headers, payload) if fast else None
            if event is None:
                event = _botocore_event(parser, shape, operation, headers, payload)
            if event:
                yield event
    if decoder.pending:  # botocore ignores a cut-off last message too; the caller decides
        logger.debug("bytes=<%d> | event stream ended inside a message", decoder.pending)


def normalized_events(response_stream: Any) -> Iterator[StreamEvent]:
    """:func:`stream_events` in the agent's shapes (:func:`._bedrock_format.normalize_event`)."""
    for raw in stream_events(response_stream):
        event = normalize_event(raw)
        if event is not None:
            yield event


def _botocore_event(
    parser: Any, shape: Any, operation: Any, headers: dict[str, HeaderValue], payload: bytes
) -> Any:
    """What ``EventStream._parse_event`` makes of a message (it may raise, just the same)."""
    message_type = headers.get(":message-type")
    status = 400 if message_type == "error" or message_type == "exception" else 200
    parsed = parser.parse({"status_code": status, "headers": headers, "body": payload}, shape)
    if status != 200:
        raise EventStreamError(parsed, operation)
    return parsed


def fast_delta(headers: Mapping[str, HeaderValue], payload: bytes) -> dict[str, Any] | None:
    """botocore's parse of a plain text / tool input / reasoning delta; ``None`` otherwise.

    Accepts only an ``event`` message of type ``contentBlockDelta`` whose JSON payload has an
    int ``contentBlockIndex`` and a ``delta`` with exactly one member: ``text`` (a string),
    ``toolUse`` with a string ``input``, or ``reasoningContent`` with exactly one string
    ``text`` or ``signature``. Other members (the service's ``p`` padding) are dropped, as
    botocore drops members its model does not name.
    """
    if headers.get(":event-type") != _DELTA or headers.get(":message-type") != "event":
        return None
    try:
        body = json.loads(payload.decode("utf-8"))
    except ValueError:  # botocore has its own fallback for a payload that is not JSON
        return None
    if type(body) is not dict:
        return None
    delta, index = body.get("delta"), body.get("contentBlockIndex")
    if type(delta) is not dict or type(index) is not int or len(delta) != 1:
        return None
    ((kind, value),) = delta.items()
    if kind == "text":
        if type(value) is not str:
            return None
        parsed: dict[str, Any] = {"text": value}
    elif kind == "toolUse":
        if type(value) is not dict or type(value.get("input")) is not str:
            return None
        parsed = {"toolUse": {"input": value["input"]}}
    elif kind == "reasoningContent":
        if type(value) is not dict or len(value) != 1:
            return None
        ((member, text),) = value.items()
        if member not in ("text", "signature") or type(text) is not str:
            return None
        parsed = {"reasoningContent": {member: text}}
    else:
        return None
    return {_DELTA: {"delta": parsed, "contentBlockIndex": index}}


def _fast_path_fits(stream_shape: Any) -> bool:
    """Whether the service model describes the deltas as :func:`fast_delta` builds them."""
    try:
        event = stream_shape.members[_DELTA]
        if list(event.members) != ["delta", "contentBlockIndex"]:
            return False
        delta, index = event.members["delta"], event.members["contentBlockIndex"]
        if index.type_name != "integer" or not delta.is_tagged_union:
            return False
        shapes = [event, delta, index]
        for kind, (members, union) in _FAST_MEMBERS.items():
            shape = delta.members[kind]
            shapes.append(shape)
            if not members:
                if shape.type_name != "string":
                    return False
                continue
            if shape.type_name != "structure" or shape.is_tagged_union is not union:
                return False
            # a union's other members only ever come alone (fast_delta leaves them to
            # botocore); a structure's would come along, so it must have no others
            named = set(shape.members)
            if not (named >= set(members) if union else named == set(members)):
                return False
            for name in members:
                shapes.append(shape.members[name])
                if shapes[-1].type_name != "string":
                    return False
        # no renamed members, no members bound to headers or the payload, no JSON strings
        return not any(_TRAITS & set(s.serialization or {}) for s in shapes)
    except (AttributeError, KeyError, TypeError):
        return False
