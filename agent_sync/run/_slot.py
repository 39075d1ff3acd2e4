"""The :class:`RunSlot`: an agent's history and the one run that may hold it.

Only the slot's own methods touch its state (as only a ``Future``'s methods touch a
future's): the agent and the run's driver ask for what they need with a verb (``take``,
``release``, ``pause``, ``replace_history``, ``apply_record``, ``adopt``, ``mark_synced``,
``drop_paused``), and every refusal (a live run, a paused one) is raised in one place.

Thread rules: ``_lock`` makes "check the slot, then change it" atomic, taken only with
``with`` on the plain lock (Ctrl-C safe, see :mod:`agent_sync._signal_safe`). Freeing the
slot is one attribute store that no call precedes, so a Ctrl-C cannot leave it held. While a
run holds the slot, only that run's driver (one thread at a time) changes the history.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._history import close_cancelled_turn
from ..errors import ConcurrentInvocationError, PendingApprovalError
from ..messages import Message

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._run_state import RunState
    from ..stores._protocol import ConversationRecord
    from ._driver import RunDriver

__all__ = ["RunSlot"]


class RunSlot:
    """An agent's history, its live run's driver (or ``None``) and its paused run (or
    ``None``), and how much of the history mirrors the store's log."""

    __slots__ = (
        "_driver",
        "_generation",
        "_lock",
        "_messages",
        "_paused",
        "_paused_version",
        "_synced",
    )

    def __init__(self, messages: list[Message]) -> None:
        self._lock = threading.Lock()
        self._messages = messages
        self._driver: RunDriver | None = None  # the live run's driver
        self._paused: RunState | None = None  # a run waiting for approval decisions
        self._paused_version = 0  # its version in the store, if there is one
        self._synced = 0  # with a store: messages[:synced] are the stored log's first ones
        self._generation = 0  # ... of the log's generation (bumped when it is replaced)

    # -- reads (any thread: each a single attribute read) --

    @property
    def messages(self) -> list[Message]:
        """The history (the agent's own list; a run appends to it in place)."""
        return self._messages

    @property
    def driver(self) -> RunDriver | None:
        """The live run's driver, or ``None`` (read once: it may change right after)."""
        return self._driver

    @property
    def paused(self) -> RunState | None:
        """The run waiting for approval decisions, or ``None``."""
        return self._paused

    @property
    def paused_version(self) -> int:
        """The paused run's version in the store (0 without a store)."""
        return self._paused_version

    def sync_point(self) -> tuple[list[Message], int, int]:
        """The history, how many of its messages mirror the log, and the log's generation
        they were read under (what :func:`~agent_sync.run._durable.load_log` needs)."""
        with self._lock:
            return self._messages, self._synced, self._generation

    # -- verbs --

    def take(self, driver: RunDriver, *, resuming: RunState | None, stored: bool) -> list[Message]:
        """Give the slot to ``driver`` and return the history it works on.

        ``resuming``: the paused run the driver goes on with (it must still be the paused
        one). ``stored``: the history lives in a store, which says whether a run is paused
        (the driver loads it next), so a paused run known here does not refuse the take.

        Raises:
            ConcurrentInvocationError: Another run holds the slot, or ``resuming`` is no
                longer the paused run.
            PendingApprovalError: A run waits for approval (and this is not its resume).
        """
        with self._lock:
            if self._driver is not None:
                raise _refusal("run", running=True, conversation="")
            if resuming is None and self._paused is not None and not stored:
                raise _refusal("run", running=False, conversation="")
            if resuming is not None and self._paused is not resuming:
                raise ConcurrentInvocationError(
                    "this paused run was resumed or cancelled meanwhile"
                )
            self._paused = None
            self._driver = driver
            return self._messages

    def release(self, driver: RunDriver) -> None:
        """Free the slot if ``driver`` holds it (one store, no call before it)."""
        if self._driver is driver:
            self._driver = None

    def pause(self, state: RunState, version: int) -> None:
        """Record the holder's run as paused (``version``: its version in the store)."""
        self._paused, self._paused_version = state, version

    def replace_history(
        self, messages: list[Message], write: Callable[[list[Message]], int] | None
    ) -> None:
        """Replace the history while idle; ``write`` stores it first and returns the log's
        new generation (held across the write: no run of this agent starts meanwhile).

        Raises:
            ConcurrentInvocationError: A run holds the slot; nothing changed.
            PendingApprovalError: A run waits for approval; nothing changed.
        """
        with self._lock:
            if self._driver is not None or self._paused is not None:
                raise _refusal(
                    "replace the history", running=self._driver is not None, conversation=""
                )
            if write is not None:
                self._generation = write(messages)
                self._synced = len(messages)  # the stored log now
            self._messages = messages

    def apply_record(
        self,
        record: ConversationRecord,
        logged: list[Message],
        mirrored: int,
        *,
        unless_changed_since: tuple[list[Message], int] | None = None,
    ) -> bool:
        """Make the history the stored log ``logged`` (then a paused run's own messages,
        and that run paused here), as read by ``load_log``: the one store sync.

        ``unless_changed_since``: an idle agent's refresh, done only if no run took the
        slot and the history is still the ``(list, synced)`` it was read from (else the
        store was read for nothing and ``False`` is returned).
        """
        with self._lock:
            if unless_changed_since is not None:
                known, synced = unless_changed_since
                if (
                    self._driver is not None
                    or self._messages is not known
                    or self._synced != synced
                ):
                    return False
            self._synced, self._generation = mirrored, record.generation
            stored = record.run
            if stored is not None and stored.state.status == "paused":
                self._paused, self._paused_version = stored.state, stored.version
                del logged[stored.state.history_start :]  # the log, then the paused run's
                logged.extend(stored.state.messages)
            else:
                self._paused, self._paused_version = None, 0
            self._messages[:] = logged
            return True

    def adopt(self, state: RunState, version: int) -> None:
        """Hold a lost run of the conversation (its worker died) as the run to go on with,
        as a paused one is held: the history becomes the log up to the run's start, then
        the run's messages. Only while idle, on a history just refreshed from the store.

        Raises:
            ConcurrentInvocationError: A run holds the slot; nothing changed.
        """
        with self._lock:
            if self._driver is not None:
                raise _refusal("run", running=True, conversation="")
            del self._messages[state.history_start :]
            self._messages.extend(state.messages)
            self._synced = min(self._synced, state.history_start)
            self._paused, self._paused_version = state, version

    def mark_synced(self, length: int) -> None:
        """The holder's run committed its end: the history's first ``length`` messages are
        the stored log."""
        self._synced = length

    def drop_paused(self) -> RunState | None:
        """Cancel a paused run while idle: its pending calls answered "Cancelled by user",
        its queued input written (unless its input checks never passed it:
        :meth:`RunState.queued_on_cancel`) and the turn closed. Returns it, or ``None``."""
        with self._lock:
            paused = self._paused
            if paused is None or self._driver is not None:
                return None
            self._paused = None
            queued, _kept = paused.queued_on_cancel()
            close_cancelled_turn(self._messages, results=paused.round_results, queued=queued)
            return paused


def check_no_stored_run(record: ConversationRecord, conversation: str) -> None:
    """Refuse to start a run while the store has one for the conversation (running in
    another worker, or paused)."""
    stored = record.run
    if stored is not None:
        raise _refusal("run", running=stored.state.status != "paused", conversation=conversation)


def _refusal(action: str, *, running: bool, conversation: str) -> Exception:
    """The one error for "the agent (or its conversation) is busy": a live run, or a run
    waiting for approval."""
    where = f"conversation {conversation!r}" if conversation else "this agent"
    if running:
        if action != "run":
            return ConcurrentInvocationError(f"cannot {action} while the agent is running")
        if conversation:
            return ConcurrentInvocationError(f"{where} is running in another worker")
        return ConcurrentInvocationError(
            "this agent is already running; use one agent per conversation or wait for it"
        )
    if action != "run":
        return PendingApprovalError(f"cannot {action} while a run waits for approval")
    return PendingApprovalError(
        f"{where} has a run waiting for approval: answer it with agent.resume(...) or drop it "
        "with agent.cancel()"
    )
