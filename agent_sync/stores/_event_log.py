"""The :class:`RunEventLog` protocol: a run's event log, the store's second role.

Beside its state, a run may have an **event log**: JSON objects numbered 1, 2, 3, ... with
no hole, appended with a compare-and-set on the last number (so two writers never both
append after the same event) and read from any number on, waiting for the next append from
any process. The web layer appends a run's stream to it and replays and follows the stream
from it, on any worker; nothing else uses it. A log is kept while its run is (``prune``
drops it with the run), and ``keep_s`` seconds once its writer marks it complete.

Every store of the package is both a :class:`~agent_sync.stores.RunStore` and a
:class:`RunEventLog` (:class:`EventLogStore`, what the web routes take); the agent needs
only the first. :mod:`agent_sync.testing.run_store_contract` tests both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._protocol import RunStore

if TYPE_CHECKING:
    from .._signal_safe import Event

__all__ = ["EventLogStore", "RunEvent", "RunEventLog"]


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    """One entry of a run's event log."""

    seq: int
    """Its number: 1 for the log's first event, then one more for each."""
    data: dict[str, Any]
    """The JSON object appended (read back equal, its keys in the same order)."""


@runtime_checkable
class RunEventLog(Protocol):
    """A run's event log; see the module docstring for the rules.

    Every method is thread-safe and may be called from any process sharing the store.
    Every method may raise :class:`~agent_sync.errors.StoreUnavailableError`.
    """

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        """Append to a run's event log, numbered ``after + 1``, ``after + 2``, ...

        Args:
            run_id: The run (its log exists from its first append; the run itself need
                not be in the store).
            events: JSON objects (``dict`` with ``str`` keys, JSON-serialisable values).
            after: The number of the log's last event (0 for an empty log): a
                compare-and-set, so an append never lands after an event its writer has
                not seen.
            keep_s: The log is complete: keep it this many more seconds, then drop it. A
                complete log takes no more appends.

        Returns:
            The number of the last event appended (``after`` if ``events`` is empty).

        Raises:
            RunConflictError: The log's last event is not ``after``, or the log is
                complete; nothing was appended.
            UsageError: An event is not a JSON object, or ``after``/``keep_s`` is negative.
        """
        ...

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        """The run's events numbered above ``after``, in order, every one.

        When there are none, wait up to ``timeout`` seconds for an append (from any
        process) and return what it added. Empty for an unknown or dropped log.
        """
        ...


class WokenReads(Protocol):
    """An event log whose wait can be cut short (SQLite's, Redis's): what a web follower
    whose client socket is watched waits with (:mod:`agent_sync.web._follow`)."""

    def _read_events_woken(
        self, run_id: str, *, after: int, timeout: float, wake: Event
    ) -> list[RunEvent]:
        """``read_events`` whose wait also ends when someone else sets ``wake`` (a web
        follower whose client left): one wait, then what the log has, maybe nothing.
        ``wake`` is the caller's, new for each call (the log sets it on an append too)."""
        ...


@runtime_checkable
class EventLogStore(RunStore, RunEventLog, Protocol):
    """A run store that keeps its runs' event logs: what the web routes take (every store
    of the package is one)."""
