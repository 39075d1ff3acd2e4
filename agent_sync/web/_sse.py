"""Server-Sent Events for a running agent, for blocking (WSGI) web servers.

Design
------
``Agent.stream()`` yields events from a blocking ``next()``: while the model is silent, the
response iterator would be stuck inside it and could send nothing, so the server would never
notice that the client went away. So :func:`sse_events` runs the agent's event iterator in a
named worker thread that feeds a queue, and the response iterator (:class:`SSEStream`)
drains that queue with a timeout, writing a keep-alive comment each time it expires.

A WSGI server only learns of a disconnect when a write fails, and then calls ``close()`` on
the response iterable. ``SSEStream.close()`` cancels the agent, waits for the worker to
close the agent's iterator (which leaves the history valid) and joins it. Disconnect
detection is therefore bounded by the keep-alive interval while the model is silent (the
first write after the peer left may still succeed: allow up to two intervals), and by the
event rate otherwise. A client that stops reading without leaving (its socket buffers
full) is closed once it has taken no byte for :data:`WRITE_TIMEOUT_S`, when the server
shows its socket: the events it did not take are not kept for ever, and what its socket
queues in the kernel is capped (:func:`._stall.bound_send_buffer`).

Threads: the worker thread is the only one that iterates and closes the run's event
iterator (a generator cannot be closed from another thread while it runs); other threads
only call the run's own ``cancel()`` (``AgentStream.cancel``), which is thread-safe and
scoped to this run, so a late disconnect can never cancel the conversation's next message.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from .._run_log._records import done_summary
from .._run_log._stream import DISCONNECT_REASON, RunStream
from ..errors import ModelError, ModelHTTPError, UsageError
from ..events import (
    AgentEvent,
    Done,
    ModelRetry,
    PartialOutput,
    ReasoningDelta,
    TextDelta,
    ToolEnd,
    ToolProgress,
    ToolStart,
)
from ._disconnect import DisconnectWatch
from ._stall import StallGuard, bound_send_buffer

if TYPE_CHECKING:
    import socket

__all__ = [
    "SSE_HEADERS",
    "SSEStream",
    "StreamingAgent",
    "encode_event",
    "encode_frame",
    "sse_events",
]

logger = logging.getLogger(__name__)

SSE_HEADERS: Final[dict[str, str]] = {
    "Cache-Control": "no-cache",
    # nginx buffers proxied responses by default, which would hold events back.
    "X-Accel-Buffering": "no",
}
"""Headers every SSE response needs besides ``Content-Type: text/event-stream``."""

_OPEN_FRAME: Final = b": stream open\n\n"
_KEEPALIVE_FRAME: Final = b": keep-alive\n\n"
_JOIN_TIMEOUT_S: Final = 10.0
WRITE_TIMEOUT_S: Final = 60.0
"""Seconds a write may go without the client taking a byte of it (it stopped reading)
before the stream is closed and the run cancelled (with a client socket only; see
:mod:`._stall`)."""
_thread_ids = itertools.count(1)


class StreamingAgent(Protocol):
    """What the web helpers need from an agent (``agent_sync.Agent`` has it)."""

    @property
    def is_running(self) -> bool:
        """Whether an invocation is in progress."""
        ...

    def stream(self, prompt: str, *, timeout: float | None = None) -> RunStream:
        """Start an invocation and return its events."""
        ...

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel the running invocation, if any."""
        ...


def encode_frame(event: str, data: Any) -> bytes:
    """Encode one SSE frame: an ``event:`` line and a one-line JSON ``data:`` line.

    Args:
        event: The event name the browser dispatches on.
        data: Anything JSON-serialisable (values that are not fall back to ``str``).

    Returns:
        The frame as UTF-8 bytes, ending with the blank line that terminates it.
    """
    # json.dumps escapes every control character, so the payload is a single line and
    # cannot inject extra SSE fields.
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {event}\ndata: {payload}\n\n".encode()


def encode_event(event: AgentEvent) -> bytes | None:
    """Encode an agent event as an SSE frame, or ``None`` for events not sent to browsers.

    Sent: ``text`` and ``reasoning`` (``{"text"}``), ``retry`` (``{"attempt", "delay",
    "error"}``), ``partial_output`` (``{"partial"}``: the structured answer so far),
    ``tool_start`` (``{"id", "name", "input"}``), ``tool_progress`` (``{"id", "progress",
    "total", "message"}``), ``tool_end`` (``{"id", "name", "status", "duration_s"}``: not
    the tool's output) and ``done`` (see
    :meth:`agent_sync.events.Done.to_dict`). ``message`` events are not sent: whole
    messages may carry tool output that is not meant for the browser.

    Args:
        event: An event from ``Agent.stream()``.

    Returns:
        The frame bytes, or ``None``.
    """
    if isinstance(event, (TextDelta, ReasoningDelta)):
        return encode_frame(event.type, {"text": event.text})
    if isinstance(event, ToolStart):
        use = event.tool_use
        return encode_frame(
            event.type, {"id": use["toolUseId"], "name": use["name"], "input": use["input"]}
        )
    if isinstance(event, ToolProgress):
        data = {
            "id": event.tool_use_id,
            "progress": event.progress,
            "total": event.total,
            "message": event.message,
        }
        return encode_frame(event.type, data)
    if isinstance(event, ToolEnd):
        use = event.tool_use
        data = {
            "id": use["toolUseId"],
            "name": use["name"],
            "status": event.result.get("status", "success"),
            "duration_s": round(event.duration_s, 3),
        }
        return encode_frame(event.type, data)
    if isinstance(event, ModelRetry):
        data = {"attempt": event.attempt, "delay": event.delay, "error": event.error}
        return encode_frame(event.type, data)
    if isinstance(event, PartialOutput):
        return encode_frame(event.type, {"partial": event.partial})
    if isinstance(event, Done):
        return encode_frame(event.type, done_summary(event))
    return None


def encode_error(exc: BaseException) -> bytes:
    """Encode a failure as an ``error`` frame that is safe to show to the browser.

    Model errors carry the provider's message (built from the error body, never from
    request headers, so no API key). Anything else is reported generically: its text
    could hold anything, so it only goes to the server log.

    Args:
        exc: The exception raised while iterating the agent's events.

    Returns:
        The frame bytes.
    """
    if isinstance(exc, ModelError):
        data: dict[str, Any] = {
            "error": type(exc).__name__,
            "message": exc.message,
            "retryable": exc.retryable,
        }
        if isinstance(exc, ModelHTTPError) and exc.status is not None:
            data["status"] = exc.status
        return encode_frame("error", data)
    return encode_frame("error", {"error": "InternalError", "message": "the agent failed"})


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END: Final = object()
_TIMEOUT: Final = object()
_GONE: Final = object()


class SSEStream:
    """The byte iterator of an SSE response; ``close()`` cancels the agent.

    Created by :func:`sse_events`. Iterate it from one thread (the server's); ``close()``
    may be called from any thread, any number of times.
    """

    def __init__(
        self,
        events: RunStream,
        *,
        keepalive: float | None,
        client_socket: socket.socket | None = None,
        cancel_reason: str = DISCONNECT_REASON,
    ) -> None:
        self._events = events
        self._keepalive = keepalive
        self._cancel_reason = cancel_reason
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stop = threading.Event()
        # Set once the run is over (Done seen) or the worker let go of the agent: from then
        # on, agent.cancel() could hit the conversation's *next* run, so close() must not.
        self._released = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self._opened = False
        self._finished = False
        self._watch = None if client_socket is None else DisconnectWatch(client_socket)
        self._guard = None if client_socket is None else StallGuard(client_socket, WRITE_TIMEOUT_S)
        if client_socket is not None:
            bound_send_buffer(client_socket)  # a client that stops reading pins little
        self._thread = threading.Thread(
            target=self._pump, name=f"agent-sync-sse-{next(_thread_ids)}", daemon=True
        )
        self._thread.start()

    @property
    def worker(self) -> threading.Thread:
        """The thread that runs the agent (for tests and diagnostics)."""
        return self._thread

    def __iter__(self) -> SSEStream:
        return self

    def __next__(self) -> bytes:
        if self._guard is None:
            return self._next_frame()
        return self._guard.next_chunk(self._next_frame)

    def _next_frame(self) -> bytes:
        if not self._opened:
            # Sent at once so the response headers go out (werkzeug and gunicorn send
            # them with the first body chunk) and the browser knows the stream is live.
            self._opened = True
            return _OPEN_FRAME
        while not self._finished:
            item = self._next_item()
            if item is _TIMEOUT:
                return _KEEPALIVE_FRAME
            if item is _GONE:
                logger.debug("thread=<%s> | client went away while silent", self._thread.name)
                self.close()
                break
            if item is _END:
                self._finished = True
                self._thread.join(_JOIN_TIMEOUT_S)
                break
            if isinstance(item, _Failure):
                return encode_error(item.exc)
            frame = encode_event(cast("AgentEvent", item))
            if frame is not None:
                return frame
        raise StopIteration

    def _next_item(self) -> object:
        """The next queued item, or _TIMEOUT after ``keepalive`` s, or _GONE."""
        watch = self._watch
        if watch is None:
            try:
                return self._queue.get(timeout=self._keepalive)
            except queue.Empty:
                return _TIMEOUT
        deadline = None if self._keepalive is None else time.monotonic() + self._keepalive
        while True:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                pass
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return _TIMEOUT
            try:
                outcome = watch.wait(remaining)
            except (OSError, ValueError):  # close() from another thread released the watch
                return _END
            if outcome == "gone":
                return _GONE

    def close(self) -> None:
        """Stop the agent if it is still running, and join the worker thread.

        Called by the WSGI server when the response ends or the client disconnects.
        When it returns, the agent is idle and its history is valid (unless the agent
        did not stop within 10 s, which is logged as a warning).
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._finished = True
        if self._guard is not None:
            self._guard.disarm()
        if not self._released.is_set():
            self._stop.set()
            # This run's own cancel: agent.cancel() would hit whatever the agent runs now,
            # possibly the conversation's next message.
            self._events.cancel(self._cancel_reason)
        self._thread.join(_JOIN_TIMEOUT_S)
        if self._watch is not None:
            self._watch.close()  # a late notify() from a stuck worker is harmless
        if self._thread.is_alive():
            logger.warning(
                "thread=<%s> | agent did not stop after the client left", self._thread.name
            )

    def _pump(self) -> None:
        events = self._events
        done: Done | None = None
        try:
            for event in events:
                if isinstance(event, Done):
                    # Held back until the agent is released (the iteration has ended):
                    # a client that sends its next message as soon as it sees "done"
                    # must not get a 409.
                    self._released.set()
                    done = event
                    continue
                self._put(event)
                if self._stop.is_set():
                    break
        except Exception as exc:
            if not isinstance(exc, ModelError):
                logger.exception("agent stream failed")
            self._put(_Failure(exc))
        finally:
            try:
                events.close()  # cancels a run we left early; the history is valid after it
            except Exception:
                logger.exception("closing the agent stream failed")
            finally:
                self._released.set()
                if done is not None:
                    self._put(done)
                self._put(_END)

    def _put(self, item: object) -> None:
        self._queue.put(item)
        if self._watch is not None:
            self._watch.notify()


def sse_events(
    agent: StreamingAgent,
    prompt: str,
    *,
    timeout: float | None = None,
    keepalive: float | None = 15.0,
    client_socket: socket.socket | None = None,
) -> SSEStream:
    """Run ``agent`` on ``prompt`` and return its events as SSE frames.

    The agent is acquired at once, so a busy agent fails here, before any response is
    sent. It then runs in a worker thread (named ``agent-sync-sse-N``); the returned
    iterator yields ``: stream open``, then one frame per event (see :func:`encode_event`),
    a ``: keep-alive`` comment whenever ``keepalive`` seconds pass without one, and, if
    the run fails, an ``error`` frame. A run that is not abandoned ends with ``done``.

    Closing the iterator (a WSGI server does when the client disconnects) cancels the
    run with reason ``"client disconnected"``, joins the worker and leaves the history
    valid.

    Args:
        agent: The agent to run (``agent_sync.Agent``).
        prompt: The user's message.
        timeout: Seconds before the run is cancelled with reason ``"timeout"`` (it then
            ends normally, with a ``done`` frame whose ``cancel_reason`` is ``"timeout"``).
        keepalive: Seconds of silence before a keep-alive comment; ``None`` disables them
            (then a disconnect is only noticed at the next event).
        client_socket: The client's socket, when the server exposes it (see
            :func:`agent_sync.web.socket_from_environ`): a disconnect is then noticed at
            once even while nothing is written; the stream ends and the run is cancelled.
            The socket is only watched (peeked), never read or closed.

    Returns:
        An iterator of ``bytes`` with a ``close()`` method; use it as a WSGI body.

    Raises:
        agent_sync.errors.ConcurrentInvocationError: The agent is already running.
        agent_sync.errors.UsageError: ``keepalive`` is not positive.
    """
    if keepalive is not None and keepalive <= 0:
        raise UsageError("keepalive must be a positive number of seconds, or None")
    events = agent.stream(prompt, timeout=timeout)
    return SSEStream(events, keepalive=keepalive, client_socket=client_socket)
