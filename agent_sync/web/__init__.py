"""Web integration: agents served to browsers as Server-Sent Events, from WSGI views.

- :func:`agent_sync.web.flask.chat_blueprint` and :func:`agent_sync.web.django.chat_urls`:
  the chat routes (see ``docs/web.md``) over a run store, served by any worker: streams
  whose frames are stored before they are sent (a reconnect to any worker with
  ``Last-Event-ID`` gets exactly what it missed), stop, approvals and inject by run id,
  and the AI SDK's ``useChat`` as a client.

Framework-neutral parts live here; the framework glue is in :mod:`agent_sync.web.flask`
and :mod:`agent_sync.web.django`, imported only when you use them (Flask and Django are
optional extras: importing this package imports neither). For one agent's stream in one
process:

- :func:`sse_events`: run an agent in a worker thread and yield SSE frames, with
  keep-alives; closing the iterator (the WSGI server does on disconnect) cancels the run.
- :func:`socket_from_environ`: the client socket, when the server exposes it, so that a
  disconnect is noticed at once even while the model is silent.
- :class:`ConversationRegistry`: one agent per conversation id, thread-safe and bounded,
  with ``cancel(conversation_id)`` for a ``POST /cancel`` endpoint.

See ``docs/web.md``.
"""

from __future__ import annotations

from .._run_log._stream import DISCONNECT_REASON
from ._disconnect import socket_from_environ
from ._sse import (
    SSE_HEADERS,
    SSEStream,
    StreamingAgent,
    encode_event,
    encode_frame,
    sse_events,
)
from .registry import ConversationRegistry, RegistryFullError

__all__ = [
    "DISCONNECT_REASON",
    "SSE_HEADERS",
    "ConversationRegistry",
    "RegistryFullError",
    "SSEStream",
    "StreamingAgent",
    "encode_event",
    "encode_frame",
    "socket_from_environ",
    "sse_events",
]
