"""The process-wide cap on abandoned tool threads.

A tool that ignores cancel is abandoned after the grace period: its call is answered
"Cancelled by user" and the run returns, but Python cannot stop the thread, which lives
on until the tool returns. Without a bound, a service that cancels runs of stuck tools
grows threads forever. So abandonment is rationed: a batch *reserves* one slot per thread
it abandons (all or none, atomically), and each abandoned thread gives its slot back when
its tool finally returns. When the slots would run out, the run does not abandon: it waits
for its tools (the grace period no longer applies), and a warning says so, once per
process (until the limit is changed). Guardrail checks on threads of their own count
against the same cap (:class:`Abandonable`), but are never waited for.

The lock is held only for counter arithmetic, never while waiting or logging, and always
with ``with`` around code that calls nothing: the cap is process-wide, and a Ctrl-C in a
run's thread cannot leave the lock held (see ``agent_sync._signal_safe``; tested at every
point where a signal handler can run, tests/test_signal_safety.py).
"""

from __future__ import annotations

import logging
import threading

from ..errors import UsageError

__all__ = [
    "DEFAULT_MAX_ABANDONED_TOOL_THREADS",
    "abandoned_tool_threads",
    "max_abandoned_tool_threads",
    "set_max_abandoned_tool_threads",
]

logger = logging.getLogger("agent_sync.tools.executor")

DEFAULT_MAX_ABANDONED_TOOL_THREADS = 64
"""Abandoned tool threads allowed at once in a process, unless changed."""

_lock = threading.Lock()
_count = 0
_limit = DEFAULT_MAX_ABANDONED_TOOL_THREADS
_warned = False


def abandoned_tool_threads() -> int:
    """How many tool threads are abandoned right now (their tool has not returned yet).

    Thread-safe; a cheap read for metrics and health checks.
    """
    return _count


def max_abandoned_tool_threads() -> int:
    """The process-wide cap on abandoned tool threads (default 64)."""
    return _limit


def set_max_abandoned_tool_threads(limit: int) -> None:
    """Set the process-wide cap on abandoned tool threads.

    Past the cap, a cancelled run waits for its tools instead of abandoning them after
    ``tool_grace_period``. ``0`` never abandons a tool. Lowering the cap below the current
    count abandons nothing more until enough abandoned tools have returned.

    Args:
        limit: Threads allowed at once, ``>= 0``.

    Raises:
        UsageError: ``limit`` is not a non-negative int.
    """
    global _limit, _warned
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UsageError(f"the abandoned tool thread limit is an int >= 0, got {limit!r}")
    with _lock:
        _limit = limit
        _warned = False


def reserve(threads: int) -> bool:
    """Take ``threads`` slots, all or none. ``False`` (and a warning, once): the cap is hit."""
    global _count, _warned
    with _lock:
        if _count + threads <= _limit:
            _count += threads
            return True
        limit, count, warn = _limit, _count, not _warned
        _warned = True
    if warn:
        logger.warning(
            "abandoned=<%d>, limit=<%d>, stuck=<%d> | abandoned tool thread limit reached: "
            "cancelled runs now wait for tools that ignore cancel "
            "(agent_sync.tools.set_max_abandoned_tool_threads)",
            count,
            limit,
            threads,
        )
    else:
        logger.debug("abandoned=<%d>, limit=<%d> | limit reached, waiting for tools", count, limit)
    return False


def release() -> None:
    """Give back one slot: an abandoned tool has returned."""
    global _count
    with _lock:
        _count -= 1


class Abandonable:
    """A worker thread's check that the run may stop waiting for (a guardrail check on a
    thread of its own): the rule for giving one up, in one place (DESIGN 13).

    :meth:`abandon` while it still runs: it takes a slot of the cap until its thread calls
    :meth:`end`. A check never delays the run's return, so past the cap it is given up all
    the same and counted over the cap (a warning says so, once): the count stays true, and
    cancelled runs wait for their stuck tools until enough checks have returned. Thread-safe;
    each method is idempotent.
    """

    __slots__ = ("_ended", "_lock", "abandoned")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = False
        self.abandoned = False
        """Whether it was given up while it ran (what it finds is for nobody)."""

    def abandon(self) -> bool:
        """Give it up if it still runs (it now counts until :meth:`end`): ``True`` if so."""
        with self._lock:
            if self._ended or self.abandoned:
                return False
            self.abandoned = True
            warn = _take_slot_past_cap()  # (before its end() can give it back)
        if warn:
            logger.warning(
                "abandoned=<%d>, limit=<%d> | a guardrail check that ignores its cancel_token "
                "was given up past the abandoned thread limit: cancelled runs now wait for "
                "tools that ignore cancel until enough checks have returned",
                _count,
                _limit,
            )
        return True

    def end(self) -> bool:
        """Its thread is done with it (called once, by that thread): ``True`` if it had been
        given up, whose slot is given back here."""
        with self._lock:
            self._ended = True
            abandoned = self.abandoned
        if abandoned:
            release()
        return abandoned


def _take_slot_past_cap() -> bool:
    """Take one slot even past the cap (see :class:`Abandonable`); ``True``: warn (the cap
    is passed, and nobody was told yet). Arithmetic only, under the lock."""
    global _count, _warned
    with _lock:
        _count += 1
        warn = _count > _limit and not _warned
        _warned = _warned or warn
    return warn
