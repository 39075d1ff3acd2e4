"""The stream's end event, with what the wire said about its response.

Every wire maps its own stop reason to a Converse ``stopReason``; tracing wants the wire's
own spelling too (``gen_ai.response.finish_reasons``), and the response's id and model.
:func:`message_stop` is the one place a wire's ``messageStop`` is built with them, so each
optional field is present only when the wire sent a non-empty string.
"""

from __future__ import annotations

from typing import Any

from ..messages import MessageStopEvent, StreamEvent

__all__ = ["message_stop"]


def message_stop(
    stop_reason: str,
    *,
    provider_reason: Any = None,
    response_id: Any = None,
    response_model: Any = None,
) -> StreamEvent:
    """``{"messageStop": {"stopReason", ...}}`` with ``providerStopReason``, ``responseId``
    and ``responseModel`` when given as non-empty strings (anything else is left out: a
    proxy's odd value never breaks the stream)."""
    stop: MessageStopEvent = {"stopReason": stop_reason}
    if isinstance(provider_reason, str) and provider_reason:
        stop["providerStopReason"] = provider_reason
    if isinstance(response_id, str) and response_id:
        stop["responseId"] = response_id
    if isinstance(response_model, str) and response_model:
        stop["responseModel"] = response_model
    return {"messageStop": stop}
