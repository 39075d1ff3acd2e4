"""Decoder of the AWS event-stream wire format (``application/vnd.amazon.eventstream``).

A body is a sequence of binary messages::

    prelude:  total length (uint32) | headers length (uint32) | prelude CRC32 (uint32)
    headers:  name length (uint8) | name (UTF-8) | value type (uint8) | value ...
    payload:  total length - headers length - 16 bytes
    message CRC32 (uint32) of everything before it

all integers big-endian. :class:`EventStreamDecoder` takes the body in chunks of any size
(split anywhere, even inside a prelude) and returns each message once its last byte has
arrived, with both CRCs, the lengths and every header checked. A message that breaks the
format raises botocore's own ``ParserError`` (``ChecksumMismatch``, ``InvalidHeadersLength``,
``InvalidPayloadLength``, ``DuplicateHeader``, or ``ParserError`` itself, each saying what is
wrong), as botocore's decoder would: it is the wire's exception, and
:func:`._bedrock_errors.map_error` turns it into a :class:`~agent_sync.errors.ModelStreamError`
(not retryable: the server sent bytes that are not an event stream), chained from it. It is
raised as soon as the broken part has arrived: a prelude is checked before the decoder waits
for the rest of its message, so a corrupt length never makes it wait for gigabytes.

Header values decode as botocore decodes them (boolean, int8/16/32/64, bytes, str,
timestamp as int milliseconds, UUID as 16 bytes), so its response parser reads them
unchanged. Not thread-safe: one decoder per stream.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from botocore.eventstream import (
    ChecksumMismatch,
    DuplicateHeader,
    InvalidHeadersLength,
    InvalidPayloadLength,
    ParserError,
)

__all__ = ["HeaderValue", "Message", "EventStreamDecoder"]

HeaderValue = bool | int | bytes | str

_PRELUDE = struct.Struct(">III")
_UINT32 = struct.Struct(">I")
_UINT16 = struct.Struct(">H")
_PRELUDE_LENGTH = 12
_OVERHEAD = _PRELUDE_LENGTH + 4  # prelude + message CRC
# botocore's limits (a real service stays far below them)
MAX_HEADERS_LENGTH = 128 * 1024
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024
# fixed-size header value types -> how their value is packed
_FIXED: dict[int, struct.Struct] = {
    2: struct.Struct(">b"),  # byte
    3: struct.Struct(">h"),  # short
    4: struct.Struct(">i"),  # integer
    5: struct.Struct(">q"),  # long
    8: struct.Struct(">q"),  # timestamp (milliseconds since the epoch)
}
_TRUE, _FALSE, _BYTES, _STRING, _UUID = 0, 1, 6, 7, 9
_HEADER_CACHE_SIZE = 64


class Message(NamedTuple):
    """One decoded event-stream message."""

    headers: dict[str, HeaderValue]
    payload: bytes


class EventStreamDecoder:
    """Incremental decoder: :meth:`feed` chunks, get whole, checked messages back."""

    __slots__ = ("_buffer", "_header_cache", "_need")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._need = _PRELUDE_LENGTH  # bytes the buffer needs before parsing is worth it
        # A stream repeats the same few header blocks (one per event type): parse each once.
        self._header_cache: dict[bytes, dict[str, HeaderValue]] = {}

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Message]:
        """Add ``data`` (the next bytes of the body) and return the messages it completed.

        Args:
            data: Any number of bytes, split anywhere.

        Returns:
            The whole messages now available, in order (often none or one).

        Raises:
            botocore.eventstream.ParserError: A CRC does not match, a length is impossible
                or over the limits, or a header is malformed. The decoder is then unusable.
        """
        if self._buffer:
            self._buffer += data
            if len(self._buffer) < self._need:
                return []
            data = bytes(self._buffer)
            self._buffer.clear()
        elif len(data) < self._need:
            self._buffer += data
            return []
        messages: list[Message] = []
        offset = self._split(data, messages)
        if offset < len(data):
            self._buffer += memoryview(data)[offset:]
        return messages

    def _split(self, data: bytes, messages: list[Message]) -> int:
        """Decode the whole messages at the start of ``data``; return where the rest starts."""
        offset = 0
        size = len(data)
        while size - offset >= _PRELUDE_LENGTH:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(data, offset)
            computed = zlib.crc32(data[offset : offset + 8])
            if computed != prelude_crc:
                raise _checksum_error("prelude", prelude_crc, computed)
            self._check_lengths(total, headers_length)
            end = offset + total
            if end > size:
                self._need = total
                return offset
            (message_crc,) = _UINT32.unpack_from(data, end - 4)
            computed = zlib.crc32(memoryview(data)[offset + 8 : end - 4], prelude_crc)
            if computed != message_crc:
                raise _checksum_error(f"message of {total} bytes", message_crc, computed)
            headers_end = offset + _PRELUDE_LENGTH + headers_length
            messages.append(
                Message(
                    self._headers(data[offset + _PRELUDE_LENGTH : headers_end]),
                    data[headers_end : end - 4],
                )
            )
            offset = end
        self._need = _PRELUDE_LENGTH
        return offset

    def _check_lengths(self, total: int, headers_length: int) -> None:
        if headers_length > MAX_HEADERS_LENGTH:
            raise InvalidHeadersLength(headers_length)
        payload_length = total - headers_length - _OVERHEAD
        if payload_length < 0:
            raise ParserError(
                f"total length {total} too short for {headers_length} bytes of headers"
            )
        if payload_length > MAX_PAYLOAD_LENGTH:
            raise InvalidPayloadLength(payload_length)

    def _headers(self, block: bytes) -> dict[str, HeaderValue]:
        cached = self._header_cache.get(block)
        if cached is None:
            cached = self._parse_headers(block)
            if len(self._header_cache) >= _HEADER_CACHE_SIZE:
                self._header_cache.clear()
            self._header_cache[block] = cached
        return dict(cached)  # the caller may keep or change it: never the cached one

    def _parse_headers(self, block: bytes) -> dict[str, HeaderValue]:
        headers: dict[str, HeaderValue] = {}
        position, end = 0, len(block)
        while position < end:
            name_end = position + 1 + block[position]
            if name_end >= end:  # the type byte must follow the name
                raise ParserError("header name runs past the headers")
            name = self._text(block[position + 1 : name_end], "header name")
            kind = block[name_end]
            position = name_end + 1
            value: HeaderValue
            if kind == _STRING or kind == _BYTES:
                if position + 2 > end:
                    raise ParserError(f"header {name!r}: value length runs past the headers")
                (length,) = _UINT16.unpack_from(block, position)
                position += 2 + length
                raw = block[position - length : position]
                value = raw if kind == _BYTES else self._text(raw, f"header {name!r}")
            elif kind == _TRUE or kind == _FALSE:
                value = kind == _TRUE
            elif kind == _UUID:
                position += 16
                value = block[position - 16 : position]
            elif kind in _FIXED:
                fixed = _FIXED[kind]
                position += fixed.size
                if position > end:
                    raise ParserError(f"header {name!r}: value runs past the headers")
                (value,) = fixed.unpack_from(block, position - fixed.size)
            else:
                raise ParserError(f"header {name!r}: unknown value type {kind}")
            if position > end:
                raise ParserError(f"header {name!r}: value runs past the headers")
            if name in headers:
                raise DuplicateHeader(name)
            headers[name] = value
        return headers

    def _text(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ParserError(f"{what} is not UTF-8") from None


def _checksum_error(where: str, expected: int, computed: int) -> ChecksumMismatch:
    error = ChecksumMismatch(expected, computed)
    error.args = (f"{where}: {error}",)  # say which of the two CRCs
    return error
