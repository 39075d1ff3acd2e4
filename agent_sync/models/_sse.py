"""A small incremental Server-Sent Events parser (the WHATWG ``text/event-stream`` rules).

Fed raw byte chunks as they come off the socket, it yields one :class:`SSEEvent` per
dispatched event: lines are split on ``\\n``, ``\\r\\n`` or ``\\r``; ``data:`` lines of one
event are joined with ``\\n``; lines starting with ``:`` are comments (keep-alives); an
empty line dispatches the event; an event without ``data`` is not dispatched; an event cut
off by the end of the stream is discarded (the caller decides whether that is truncation).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["SSEEvent", "iter_sse"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    Attributes:
        data: The ``data`` lines joined with ``\\n``.
        event: The ``event`` field, ``"message"`` by default.
    """

    data: str
    event: str = "message"


def iter_sse(chunks: Iterable[bytes]) -> Iterator[SSEEvent]:
    """Parse an event stream incrementally.

    Args:
        chunks: Byte chunks in arrival order, split anywhere (even inside a UTF-8 sequence).

    Yields:
        Each complete event, as soon as its terminating empty line has arrived.
    """
    buffer = b""
    data: list[str] = []
    event = ""
    pending_cr = False  # a chunk ended with "\r": a following "\n" belongs to it
    for chunk in chunks:
        if not chunk:
            continue
        if pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        pending_cr = chunk.endswith(b"\r")
        buffer += chunk
        if b"\r" in buffer:
            # Rare in practice (servers send "\n"); normalise so one split handles all.
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            if not raw:
                if data:
                    yield SSEEvent("\n".join(data), event or "message")
                data = []
                event = ""
                continue
            line = raw.decode("utf-8", errors="replace")
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
            # "id" and "retry" only matter to reconnecting clients; a model stream is
            # never resumed, so they are ignored.
