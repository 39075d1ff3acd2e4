"""A guardrail check on a worker thread of its own (DESIGN 13: input checks, and any check
that may block).

A check that ignores its ``cancel_token`` cannot be stopped: when the run stops waiting for
it (a cancel, its ``timeout``, another check's trip) it is *abandoned* by the one rule for
that (:class:`agent_sync.tools._abandoned.Abandonable`): it counts against the process-wide
cap of abandoned tool threads until it returns, its late verdict dropped (logged), and it
never delays the run's return.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .._guardrails._checks import Guardrail, GuardView, Redact, Trip
from ..tools._abandoned import Abandonable

__all__ = ["CheckWorker"]

logger = logging.getLogger(__name__)


class CheckWorker:
    """``check.judge(view)`` on a daemon thread; ``on_done(self)`` is called in that thread
    once the verdict is known (unless the check was abandoned first).

    Attributes:
        check: The guardrail.
        verdict: The check's verdict, once :attr:`finished`.
    """

    __slots__ = ("_ended", "_job", "_on_done", "_view", "check", "verdict")

    def __init__(
        self,
        check: Guardrail,
        view: GuardView,
        on_done: Callable[[CheckWorker], None],
    ) -> None:
        self.check = check
        self.verdict: Trip | Redact | None = None
        self._view = view
        self._on_done = on_done
        self._ended = threading.Event()  # set as the check returns, its verdict set
        self._job = Abandonable()

    def start(self) -> None:
        thread = threading.Thread(
            target=self._run, name=f"guardrail-{self.check.name}", daemon=True
        )
        thread.start()

    @property
    def finished(self) -> bool:
        """Whether the check has returned (its :attr:`verdict` is set)."""
        return self._ended.is_set()

    def _run(self) -> None:
        self.verdict = self.check.judge(self._view)  # never raises (fail closed, or pass)
        self._ended.set()
        if self._job.end():
            name = self.check.name
            logger.debug("guardrail=<%s> | discarding the verdict of an abandoned check", name)
            return
        self._on_done(self)

    def abandon(self) -> None:
        """The run stops waiting for this check: given up if it still runs (counted against
        the cap until it returns; never waited for). Idempotent."""
        self._job.abandon()
