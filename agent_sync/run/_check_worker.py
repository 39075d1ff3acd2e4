"""A guardrail check on a worker thread of its own (DESIGN 13: input checks, and any check
that may block), and the rule for giving up on one.

A check that ignores its ``cancel_token`` cannot be stopped: when the run stops waiting for
it (a cancel, its ``timeout``, another check's trip) it is *abandoned*, and an abandoned check
counts against the same process-wide cap as abandoned tool threads
(:mod:`agent_sync.tools._abandoned`): :meth:`CheckWorker.abandon` takes a slot, and the
check's thread gives it back when the check finally returns (its late verdict is dropped,
logged). Past the cap the run waits for the check, as it waits for its tools, so stuck checks
cannot grow threads without bound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .._guardrails._checks import Guardrail, GuardView, Redact, Trip
from ..tools import _abandoned

__all__ = ["CheckWorker"]

logger = logging.getLogger(__name__)


class CheckWorker:
    """``check.judge(view)`` on a daemon thread; ``on_done(self)`` is called in that thread
    once the verdict is known (unless the check was abandoned first).

    Attributes:
        check: The guardrail.
        verdict: The check's verdict, once :attr:`finished`.
    """

    __slots__ = ("_abandoned", "_ended", "_lock", "_on_done", "_view", "check", "verdict")

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
        self._lock = threading.Lock()
        self._ended = threading.Event()  # set as the check returns
        self._abandoned = False

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
        verdict = self.check.judge(self._view)  # never raises (fail closed, or pass)
        with self._lock:
            self.verdict = verdict
            self._ended.set()
            abandoned = self._abandoned
        if abandoned:
            _abandoned.release()
            name = self.check.name
            logger.debug("guardrail=<%s> | discarding the verdict of an abandoned check", name)
            return
        self._on_done(self)

    def abandon(self) -> None:
        """The run stops waiting for this check: if it is still running, it takes a slot of
        the abandoned-thread cap (given back when it returns); past the cap, wait for it.
        Idempotent (one thread gives a check up: the loop's)."""
        if self._ended.is_set() or self._abandoned:
            return
        if not _abandoned.reserve(1):
            self._ended.wait()  # past the cap: as a batch waits for its stuck tools
            return
        with self._lock:
            if not self._ended.is_set():
                self._abandoned = True
                return
        _abandoned.release()  # it returned meanwhile: nothing abandoned
