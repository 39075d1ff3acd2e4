"""The store rules of event logs (``append_events``, ``read_events``), written once for
every store: an append checked at the edge (:func:`encode_events`), a stored event read
back (:func:`decode_event`), and the refusals (:func:`events_moved_on`,
:func:`events_complete`). :mod:`._rules` re-exports them with the other rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._encodable import loads_stored
from ..errors import RunConflictError, UsageError

__all__ = ["decode_event", "encode_events", "events_complete", "events_moved_on"]


def encode_events(events: Sequence[dict[str, Any]], after: int, keep_s: float | None) -> list[str]:
    """Check an ``append_events`` call at the edge; return each event's JSON text.

    Raises:
        UsageError: An event that is not a JSON object, or a negative ``after``/``keep_s``.
    """
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise UsageError(f"after must be an event number (an int >= 0), got {after!r}")
    if keep_s is not None and (
        isinstance(keep_s, bool) or not isinstance(keep_s, (int, float)) or not keep_s >= 0
    ):
        raise UsageError(f"keep_s must be a number of seconds >= 0 or None, got {keep_s!r}")
    texts = []
    for event in events:
        if not isinstance(event, dict) or not all(isinstance(key, str) for key in event):
            raise UsageError(f"an event is a JSON object (a dict with str keys), got {event!r}")
        try:
            text = json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            if not text.isascii():
                text.encode("utf-8")  # a lone surrogate: refused here, not by the storage
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise UsageError(f"an event is not JSON-serialisable: {exc}") from None
        texts.append(text)
    return texts


def decode_event(text: str | bytes) -> dict[str, Any]:
    """One stored event, made encodable (:func:`~agent_sync._encodable.loads_stored`): a
    record appended before the edge rule (a lone surrogate, a ``NaN``) still replays."""
    event: dict[str, Any] = loads_stored(text)
    return event


def events_moved_on(run_id: str, last: int, after: int) -> RunConflictError:
    """``append_events`` after an event that is no longer the log's last."""
    return RunConflictError(
        f"run {run_id!r}: its event log ends at {last}, not {after} (another writer appended)"
    )


def events_complete(run_id: str) -> RunConflictError:
    """``append_events`` to a log its writer marked complete."""
    return RunConflictError(f"run {run_id!r}: its event log is complete")
