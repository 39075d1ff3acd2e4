"""Running an ``async def`` tool: a private event loop in the tool's worker thread.

The coroutine a tool returns runs as a task on a new event loop that lives for this one call,
in the worker thread the executor gave the call, so the invoking thread stays free to notice
a cancel, as for every tool. A cancel of the run cancels the task at once: the scope's abort
callback schedules ``task.cancel()`` on the loop (thread-safely), the coroutine gets
``asyncio.CancelledError`` at the ``await`` it is in, and the call is answered "Cancelled by
user". When the call ends, the tasks it left behind are cancelled and awaited, async
generators closed and the loop closed, as ``asyncio.run`` does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..cancel import CancelledError, CancelScope

__all__ = ["run_coroutine"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def run_coroutine(coro: Coroutine[Any, Any, T], scope: CancelScope) -> T:
    """Run ``coro`` to its end on a private loop in this thread; a cancel of ``scope``
    cancels it at once.

    Raises:
        CancelledError: The run was cancelled and the coroutine stopped at its ``await``.
    """
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(coro)
        unregister = scope.register_abort(functools.partial(_cancel_soon, loop, task))
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if scope.cancelled:
                raise CancelledError(scope.reason or "cancelled") from None
            raise
        finally:
            unregister()
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    """The abort callback, in the cancelling thread: cancel the task on its own loop."""
    try:
        loop.call_soon_threadsafe(task.cancel)
    except RuntimeError:  # the loop is closed: the call is over already
        pass


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await the tasks the tool started and left running."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    outcomes = loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
    for task, outcome in zip(left, outcomes, strict=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            logger.debug("task=<%s> | a task the tool left behind failed", task.get_name())
