"""How a run's stored records become response bytes: one encoder per wire protocol.

A response that follows a run's event log (:mod:`._follow`) asks its encoder for the bytes
to send first, for each record, for a keep-alive, and for the end. The native encoder
writes each record as its SSE frame (:func:`._records.native_frame`); the AI SDK encoder
(:mod:`._ui_stream`) writes UI message stream parts and ends its response at a pause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from .._run_log._records import native_frame

__all__ = ["KEEPALIVE_FRAME", "OPEN_FRAME", "NativeEncoder", "StreamEncoder", "end_metadata"]

OPEN_FRAME: Final = b": stream open\n\n"
"""Sent first, so the response headers go out (werkzeug and gunicorn send them with the
first body chunk) and the client knows the stream is live."""

KEEPALIVE_FRAME: Final = b": keep-alive\n\n"
"""An SSE comment: every parser skips it; a failed write reveals a client that left."""


def end_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a protocol's end tells a client of the run's end, from its ``done`` record (the
    one summary of a run's end, whoever wrote it: ``done_record``, ``closing_record``):
    ``stop_reason``; ``cancel_reason`` if it was cancelled; ``usage_limit`` or
    ``guardrail`` when one stopped it; ``unchecked_input`` when it handed injected input
    back (its input guardrails never passed it: the client sends it again). AG-UI's
    ``RUN_FINISHED`` carries it as ``metadata.agent_sync``, the AI SDK's ``finish`` as
    ``messageMetadata.agent_sync`` (the native ``done`` frame is the record itself)."""
    stop_reason = record.get("stop_reason")
    about: dict[str, Any] = {"stop_reason": stop_reason}
    if stop_reason == "cancelled":
        about["cancel_reason"] = record.get("cancel_reason")
    for key in ("usage_limit", "guardrail", "unchecked_input"):
        if record.get(key) is not None:
            about[key] = record[key]
    return about


class StreamEncoder(Protocol):
    """Turns one run's records into a response's bytes (used from one thread)."""

    stops_at_pause: bool
    """End the response once the run is paused (the AI SDK does; native streams wait)."""

    def opening(self) -> bytes:
        """The bytes sent before any record."""
        ...

    def encode(self, seq: int, record: Mapping[str, Any]) -> bytes:
        """The bytes of one record (may be empty)."""
        ...

    def keepalive(self) -> bytes:
        """The bytes sent after ``keepalive`` seconds without a record."""
        ...

    def paused(self) -> bytes:
        """The last bytes of a response that ends at a pause (``stops_at_pause``)."""
        ...

    def closing(self) -> bytes:
        """The last bytes, after the log's terminal record."""
        ...


class NativeEncoder:
    """The native SSE protocol: one frame per record, ``id: <run_id>:<seq>``."""

    stops_at_pause = False

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id

    def opening(self) -> bytes:
        return OPEN_FRAME

    def encode(self, seq: int, record: Mapping[str, Any]) -> bytes:
        return native_frame(self._run_id, seq, record)

    def keepalive(self) -> bytes:
        return KEEPALIVE_FRAME

    def paused(self) -> bytes:
        return b""

    def closing(self) -> bytes:
        return b""
