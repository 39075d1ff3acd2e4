"""Input injected into a running run, from any thread: queued, then taken by the loop once.

The rule that makes injection lossless and never doubled: every hand-over happens under one
lock, and the run's last look at the inbox *closes* it in the same critical section
(:meth:`Inbox.take_or_close`, :meth:`Inbox.close`). So an ``inject`` either lands before
that last look (and is sent, or written to the history on cancel) or fails with
``UsageError`` because the run is over; it is never accepted and then dropped.

A run with input guardrails opens its inbox only once its prompt has passed them
(:meth:`Inbox.open`): a trip withdraws the prompt and ends the run before anything is
sent, so input accepted meanwhile could be neither sent nor kept (it was never checked);
it is refused instead (``UsageError``), as input to a run that is over is. The same holds
while injected input is checked: the loop takes it and holds the inbox in one critical
section (``take(hold=True)``, ``take_or_close(hold=True)``), and opens it once the input
passed; at a trip nothing was accepted meanwhile, so nothing is dropped.
"""

from __future__ import annotations

import threading

from ..errors import UsageError
from ..messages import ContentBlock

__all__ = ["Inbox"]


class Inbox:
    """Queued inputs of one run (each a list of content blocks). Thread-safe."""

    __slots__ = ("_closed", "_held", "_items", "_lock")

    def __init__(
        self, items: list[list[ContentBlock]] | None = None, *, held: bool = False
    ) -> None:
        self._lock = threading.Lock()
        self._items: list[list[ContentBlock]] = list(items or [])
        self._closed = False
        self._held = held  # not open yet: the run's input is being checked

    def put(self, blocks: list[ContentBlock]) -> None:
        """Queue one input.

        Raises:
            UsageError: The run is over (its inbox is closed), or its input is still being
                checked (its inbox is not open yet).
        """
        with self._lock:
            if self._closed:
                raise UsageError("the run is over: nothing more can be injected into it")
            if self._held:
                raise UsageError(
                    "the run's input is being checked by its input guardrails: "
                    "inject once it has passed them"
                )
            self._items.append(blocks)

    def open(self) -> None:
        """Take input from now on (a held inbox: the run's input passed its checks)."""
        with self._lock:
            self._held = False

    def take(self, *, hold: bool = False) -> list[ContentBlock]:
        """Every queued block, oldest first, leaving the inbox empty (and, with ``hold``
        and something taken, held until :meth:`open`: the input taken is being checked)."""
        with self._lock:
            items, self._items = self._items, []
            if hold and items:
                self._held = True
        return [block for blocks in items for block in blocks]

    def take_or_close(self, *, hold: bool = False) -> list[ContentBlock]:
        """Like :meth:`take`, but if nothing is queued, close the inbox (atomically)."""
        with self._lock:
            if not self._items:
                self._closed = True
                return []
            items, self._items = self._items, []
            self._held = hold
        return [block for blocks in items for block in blocks]

    def close(self) -> list[ContentBlock]:
        """Close the inbox and return whatever was still queued."""
        with self._lock:
            self._closed = True
            items, self._items = self._items, []
        return [block for blocks in items for block in blocks]

    def seal(self) -> None:
        """Refuse new input but keep what is queued (a paused run carries it in its state)."""
        with self._lock:
            self._closed = True

    def requeue(self, blocks: list[ContentBlock]) -> None:
        """Queue input that reached the run after :meth:`seal` (the run's own thread, as it
        pauses): the paused state carries it, like input queued before."""
        with self._lock:
            self._items.append(blocks)

    def queued(self) -> tuple[tuple[ContentBlock, ...], ...]:
        """The queued inputs, oldest first (a copy of the queue, not of the blocks)."""
        with self._lock:
            return tuple(tuple(blocks) for blocks in self._items)
