"""One stretch of an agent's run, in a worker thread, awaited by an MCP request's task.

The ``mcp`` SDK serves each request in an anyio task; an agent runs blocking code. A
stretch (``agent.stream(prompt)`` or ``agent.resume_stream(decisions)``) runs in a worker
thread of anyio's pool (:func:`anyio.to_thread.run_sync`, not abandoned on cancel: the
request's task waits for the thread, so none is ever left behind). Beside it, a watcher task
holds the call's :class:`~agent_sync.CancelToken`: when the SDK cancels the request's scope
(``notifications/cancelled``), the watcher cancels the token and the run stops within
milliseconds (a token cancelled before the run starts stops it before its first model call:
no race with the thread's start). The text the run streams is handed to the loop without
blocking the thread (:class:`ProgressPump`) and sent as progress notifications, each with
the text streamed since the previous one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable

import anyio

from ..agent import AgentStream
from ..cancel import CancelToken
from ..events import Done, TextDelta
from ..result import AgentResult

__all__ = ["CLIENT_CANCELLED", "ProgressPump", "run_stretch"]

logger = logging.getLogger(__name__)

CLIENT_CANCELLED = "the MCP client cancelled the call"
"""The ``cancel_reason`` of a run whose ``tools/call`` the client cancelled."""

Report = Callable[[float, str], Awaitable[None]]
"""``(progress, message)``: sends one progress notification."""


class ProgressPump:
    """Text streamed in a worker thread, sent from the loop as progress notifications.

    The thread calls :meth:`add` (never blocks on the loop: it appends under a lock and
    wakes the loop at most once per batch); :meth:`pump` sends what has gathered since the
    previous notification, with ``progress`` the count of characters streamed so far (it
    only grows, as the protocol asks).
    """

    def __init__(self, report: Report) -> None:
        self._report = report
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._woken = False
        self._closed = False
        self._sent = 0

    def add(self, text: str) -> None:
        """From the worker thread: ``text`` was streamed."""
        with self._lock:
            self._pending.append(text)
            if self._woken:
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._wake.set)

    def close(self) -> None:
        """From the loop: the stretch ended; :meth:`pump` sends what is left and returns."""
        self._closed = True
        self._wake.set()

    async def pump(self) -> None:
        """Send batches until :meth:`close`."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            with self._lock:
                text = "".join(self._pending)
                self._pending.clear()
                self._woken = False
            if text:
                self._sent += len(text)
                await self._report(float(self._sent), text)
            if self._closed:
                with self._lock:
                    if not self._pending:
                        return


async def run_stretch(
    start: Callable[[CancelToken], AgentStream],
    token: CancelToken,
    progress: ProgressPump | None,
) -> AgentResult:
    """Run ``start(token)``'s stream to its end in a worker thread and return its result.

    Cancelling the calling task cancels ``token`` (the run ends "cancelled" within
    milliseconds), waits for the thread to finish, then lets the cancel through. An error
    of the run is raised here.
    """
    finished = False
    watch_scope = anyio.CancelScope()
    outcome: list[AgentResult | BaseException] = []

    async def watch() -> None:
        with watch_scope:
            try:
                await anyio.sleep_forever()
            finally:
                if not finished:
                    logger.debug("the served call was cancelled: cancelling its run")
                    token.cancel(CLIENT_CANCELLED)

    def work() -> None:
        try:
            with start(token) as stream:
                for event in stream:
                    if isinstance(event, TextDelta) and progress is not None:
                        progress.add(event.text)
                    elif isinstance(event, Done):
                        outcome.append(event.result)
                        logger.debug(
                            "served run %s ended: %s (%s)",
                            event.result.run_id,
                            event.result.stop_reason,
                            event.result.cancel_reason,
                        )
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, raised there
            outcome.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        if progress is not None:
            group.start_soon(progress.pump)
        try:
            await anyio.to_thread.run_sync(work)  # never abandoned: the thread ends first
        finally:
            finished = True
            watch_scope.cancel()
            if progress is not None:
                progress.close()
    if not outcome:  # pragma: no cover - a stream always ends with Done or raises
        raise RuntimeError("the run ended without a result")
    found = outcome[-1]
    if isinstance(found, BaseException):
        raise found
    return found
