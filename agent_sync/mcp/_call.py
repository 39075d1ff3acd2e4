"""One ``tools/call`` in flight on a connection's loop, answered exactly once.

A :class:`Call` is started from any thread (:meth:`Connection.start
<agent_sync.mcp._connection.Connection.start>`) with one ``call_soon_threadsafe``: on the
loop, :meth:`Call.begin` makes the SDK's ``call_tool`` a task. Its *answer* (the SDK's
``CallToolResult``, or an error) goes to the caller's ``done(result, error)`` callback once,
whichever comes first:

* the task ends (in the loop thread): its result, the SDK's error, or
  :class:`ConnectionLost` (the transport closed, or the loop ended and cancelled it);
* the run's scope is cancelled (in the cancelling thread, at once): :class:`CancelledError`;
  the task is then cancelled on the loop, and the SDK sends ``notifications/cancelled``;
* ``timeout`` passes (in the loop thread): :class:`CallTimedOut`, the task cancelled alike;
* the loop closed before the call began (the connection's final sweep): ConnectionLost.

There is no ``concurrent.futures.Future`` and no thread of its own: a caller that can wait
for ``done`` (the run's tool batch) is woken once, by the answer itself; :func:`wait` is
the blocking form. "Once" is a one-item list popped by whoever answers first (one C call,
so a Ctrl-C cannot split it and no lock is needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.shared.exceptions import MCPError as SDKError

from .._signal_safe import sliced
from ..cancel import CancelledError, CancelScope

if TYPE_CHECKING:
    from mcp import Client

    from ._connection import Connection

__all__ = ["Call", "CallTimedOut", "ConnectionLost", "Done", "ProgressSink", "wait"]

Done = Callable[[Any, "BaseException | None"], None]
"""``done(result, error)``: the call's answer, exactly one of them ``None``-free."""

ProgressSink = Callable[[float, "float | None", "str | None"], None]


class ConnectionLost(Exception):
    """The transport closed under a call or a listing (the message says why)."""


class CallTimedOut(Exception):
    """A call got no answer within its timeout; its task was cancelled (the server told)."""


class Call:
    """A call in flight (see the module docstring)."""

    __slots__ = ("_connection", "_done", "_once", "_scope", "_task", "_timer", "_unregister")

    def __init__(self, connection: Connection, done: Done) -> None:
        self._connection = connection
        self._done = done
        self._once: list[None] = [None]
        self._scope: CancelScope | None = None
        self._task: asyncio.Task[types.CallToolResult] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._unregister: Callable[[], None] = _noop

    @property
    def answered(self) -> bool:
        return not self._once

    def attach(self, scope: CancelScope | None) -> None:
        """Cancel with ``scope`` (at once if it is cancelled already)."""
        if scope is not None:
            self._scope = scope
            self._unregister = scope.register_abort(self.abort)

    def answer(self, result: Any, error: BaseException | None) -> None:
        """Give the caller its answer, unless it has one already (any thread)."""
        try:
            self._once.pop()
        except IndexError:
            return
        self._connection._calls.discard(self)
        self._unregister()
        self._done(result, error)

    def begin(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        progress: Any,
        timeout: float | None,
    ) -> None:
        """On the loop: the SDK's call as a task (not if the call was answered already:
        cancelled before it began, nothing reaches the server)."""
        if not self._once:
            return
        loop = asyncio.get_running_loop()
        task = loop.create_task(client.call_tool(name, arguments, progress_callback=progress))
        self._task = task
        task.add_done_callback(self._ended)
        if timeout is not None:
            self._timer = loop.call_later(timeout, self._timed_out, timeout)

    def abort(self) -> None:
        """The scope's abort callback (the cancelling thread): answer cancelled now, and
        cancel the task on the loop (the SDK tells the server)."""
        scope = self._scope
        reason = scope.reason if scope is not None else None
        self.answer(None, CancelledError(reason or "cancelled"))
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs
            self._connection._loop.call_soon_threadsafe(self._cancel_task)

    def _cancel_task(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    def _timed_out(self, timeout: float) -> None:
        self.answer(None, CallTimedOut(f"no answer within {timeout:g} s (call_timeout)"))
        self._cancel_task()

    def _ended(self, task: asyncio.Task[types.CallToolResult]) -> None:
        """The task's done callback (the loop thread)."""
        if self._timer is not None:
            self._timer.cancel()
        connection = self._connection
        if task.cancelled():  # not by us (we answered first): the loop is ending
            self.answer(None, ConnectionLost(connection.lost_reason))
            return
        error = task.exception()
        if error is None:
            self.answer(task.result(), None)
        elif isinstance(error, SDKError) and error.code == types.CONNECTION_CLOSED:
            connection._closed_during_call()
            self.answer(None, ConnectionLost(connection.lost_reason))
        else:
            self.answer(None, error)


def wait(start: Callable[..., Call]) -> types.CallToolResult:
    """Start a call with ``start(done=...)`` and block this thread until it is answered.

    An interrupted wait (Ctrl-C) cancels the call (the server is told) and re-raises.

    Raises:
        Whatever the call was answered with.
    """
    answers: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
    call = start(done=functools.partial(_put, answers))
    answer: tuple[Any, BaseException | None] | None = None
    try:
        while answer is None:
            try:
                answer = answers.get(timeout=sliced(None))
            except queue.Empty:  # a main-thread slice ended: a pending Ctrl-C ran
                pass  # not ``continue``: on CPython 3.11 a Ctrl-C raised there skips the except
    except BaseException:
        call.abort()
        raise
    result, error = answer
    if error is not None:
        raise error
    return result  # type: ignore[no-any-return]


def _put(
    answers: queue.SimpleQueue[tuple[Any, BaseException | None]],
    result: Any,
    error: BaseException | None,
) -> None:
    answers.put((result, error))


def _noop() -> None:
    return None
