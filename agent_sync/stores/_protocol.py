"""The :class:`RunStore` protocol: where conversations and runs live between processes.

A store keeps, per conversation, its **log** (the finished messages) and at most one
**current run** (running or paused), and per run its latest :class:`~agent_sync.RunState`
with a version. Every change is a compare-and-set on that version (or, for ``begin``, on the
conversation having no live run and the expected log length), so two processes racing never
both win: the loser gets :class:`~agent_sync.errors.RunConflictError` (or
``ConcurrentInvocationError`` / ``PendingApprovalError`` for ``begin``) and nothing changed.

Lifecycle of a run, as the agent drives it (``owner`` is an opaque token naming the process
and thread that runs it)::

    begin(conversation_id, state, owner, lease_s, expected_length) -> version 1 (running)
    commit(state, owner, version) -> version + 1      # at step boundaries; renews the lease
    renew(run_id, owner, lease_s)                     # from the owner's watcher, lease_s / 3
    commit(state with status paused) -> owner cleared # the pause is stored before it is told
    claim(run_id, owner, lease_s, version)            # resume: paused -> running, one winner
    commit(state with a final status)                 # writes log[history_start:] = messages
                                                      # and ends the conversation's run

Rules every store follows (:mod:`agent_sync.stores._rules` holds the shared parts, and
:mod:`agent_sync.testing.run_store_contract` tests them):

* **Append, not rewrite.** A final commit writes only ``state.messages`` over the log from
  ``state.history_start`` (the run may have extended the log's last user message), so the
  cost of ending a turn does not grow with the conversation. So the log never shrinks, and
  only its last message is ever rewritten: ``load(since=n)`` lets a reader that holds
  the first ``n + 1`` messages read just the rest.
* **Replaced by the user.** The one exception: ``replace_log`` (``agent.messages = [...]``)
  writes a whole new log while the conversation has no live or paused run, and bumps the
  conversation's ``generation``; a reader that holds messages of an older generation reads
  the log again from the start.
* **Leases.** A running run whose lease expired (its owner died) is *failed* by whoever next
  reads it (``load``, ``get``, ``begin``): its in-flight tool calls are answered with an
  error result saying "worker stopped; effect unknown", the turn is closed, the messages are
  written to the log, and the conversation is usable again.
* **Lost runs.** Unless its state says ``on_owner_lost == "resume"``
  (``Agent(on_owner_lost="resume")``): such a run is *lost*, not failed. Reads leave it
  as it is (``load`` and ``get`` show it running, ``begin`` refuses its conversation with
  ``ConcurrentInvocationError``) until a recoverer takes it: :meth:`RunStore.lost_runs`
  lists it and :meth:`RunStore.claim` at its version takes it over (one winner, whatever
  the number of recoverers), and the new owner goes on from its last committed state with
  the same run id and event log. The inject count restarts at the injects still queued for
  it (the new owner takes those). ``cancel`` of a lost run cancels it at once, as for a
  paused run (its in-flight calls answered "worker stopped; effect unknown").
* **Signals.** ``cancel`` and ``inject`` on a running run are queued for its owner, who takes
  them with ``wait_signals`` (each delivered once to it, in order). ``cancel`` on a paused
  run cancels it at once (pending calls answered "Cancelled by user", turn closed, written).
  The store counts the injects it accepted per run, and a final commit that says its owner
  received fewer is refused (``InputPending``): an accepted inject is answered by the run
  (or written to its history), never dropped; an inject after the final commit is refused.
* **A signal is acknowledged at the commit that consumes it**, not when it is taken: an
  inject when a commit's state holds it (a running commit with ``injects_received=n``
  acknowledges the first ``n`` injects its owner received), a cancel when the run ends;
  a pause consumes every signal its owner took, a final commit all of them. Until then
  it stays queued, and a claim hands every signal still queued to the new owner: an
  inject or a cancel the dying worker had taken but not committed reaches the recoverer
  (each once: an inject its state already holds is never delivered again).
* **Ids.** No id names another key or row: a run or conversation id that is not a
  non-empty, UTF-8-encodable ``str`` names nothing (``get`` -> ``None``, ``cancel`` ->
  ``False``, ``inject`` -> ``UsageError``), never an error from the storage.
* **Event logs.** Beside its state, a run may have an event log: the other role of every
  store of the package, :class:`~agent_sync.stores.RunEventLog` (its rules are in
  :mod:`._event_log`); :meth:`RunStore.prune` drops the logs of the runs it prunes.
* **Values.** Beside its log, a conversation has a few small named values (text under a
  key: :meth:`RunStore.get_value`, :meth:`RunStore.set_value`), each written by
  compare-and-set on the value itself, so two writers racing never both win. They are the
  conversation's, not a run's: ``prune`` and ``replace_log`` leave them (as they leave the
  log), and a value goes only when a ``set_value`` deletes it. Keys starting with
  ``agent_sync.`` are the package's (``agent_sync.context`` keeps each conversation's
  latest summary under one). Keys and values are checked at the edge
  (:mod:`._value_rules`: a key is 1 to 256 characters, a value at most 1 MB of UTF-8).
* **Fail closed.** A store that cannot be reached raises
  :class:`~agent_sync.errors.StoreUnavailableError` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .._run_state import RunSnapshot, RunState
from ..cancel import CancelMode
from ..messages import ContentBlock, Message

__all__ = ["ConversationRecord", "RunSignal", "RunStore", "StoredRun"]


@dataclass(frozen=True, kw_only=True)
class StoredRun:
    """A run as a store holds it."""

    state: RunState
    """The latest committed state."""
    version: int
    """Bumped by every change; the compare-and-set key."""
    owner: str | None
    """Who runs it (``None`` once it is paused or over)."""
    lease_expires_at: float | None
    """Epoch seconds after which a running run counts as abandoned."""
    conversation_id: str
    """The conversation it belongs to."""


@dataclass(frozen=True, kw_only=True)
class ConversationRecord:
    """A conversation as :meth:`RunStore.load` returns it."""

    conversation_id: str
    """The conversation."""
    messages: tuple[Message, ...]
    """The log from position :attr:`start` on: every finished message, in order."""
    run: StoredRun | None
    """The conversation's current run (running or paused), or ``None``."""
    start: int = 0
    """The log position of ``messages[0]`` (the ``since`` asked, at most :attr:`length`)."""
    length: int | None = None
    """The log's whole length (``start + len(messages)``; ``None`` is read as that)."""
    generation: int = 0
    """How many times the log was replaced (:meth:`RunStore.replace_log`): messages read
    under another generation are not a prefix of this log."""

    @property
    def log_length(self) -> int:
        """The log's whole length."""
        return self.length if self.length is not None else self.start + len(self.messages)


@dataclass(frozen=True, kw_only=True)
class RunSignal:
    """Something another process asked of a running run."""

    run_id: str
    """The run."""
    kind: Literal["cancel", "inject"]
    """What is asked."""
    reason: str | None = None
    """For ``cancel``: the reason."""
    mode: CancelMode = "now"
    """For ``cancel``: stop now, or after the turn in flight (``Run.cancel``'s modes)."""
    content: tuple[ContentBlock, ...] = ()
    """For ``inject``: the blocks (already validated)."""


@runtime_checkable
class RunStore(Protocol):
    """Where conversations and runs live; see the module docstring for the rules.

    Every method is thread-safe and may be called from any process sharing the store.
    Every method may raise :class:`~agent_sync.errors.StoreUnavailableError`.
    """

    def load(self, conversation_id: str, *, since: int = 0) -> ConversationRecord:
        """The conversation's log from position ``since`` on, and its current run (an
        unknown id: empty, no run). An agent that holds the log up to some length reads
        only what follows, so a long conversation costs no more to go on than a short one.

        A current run whose lease expired is failed first (see the module rules).
        """
        ...

    def begin(
        self,
        conversation_id: str,
        state: RunState,
        *,
        owner: str,
        lease_s: float,
        expected_length: int,
    ) -> int:
        """Record ``state`` as the conversation's running run; return its version (1).

        Raises:
            ConcurrentInvocationError: The conversation has a running run with a live lease.
            PendingApprovalError: The conversation has a paused run.
            RunConflictError: The log's length is not ``expected_length`` (it moved on since
                it was loaded), or ``state.run_id`` exists already.
        """
        ...

    def replace_log(self, conversation_id: str, messages: Sequence[Message]) -> int:
        """Replace the conversation's whole log with ``messages`` (a history the user
        assigned, already validated) and bump its generation; return the new generation.

        A current run whose lease expired is failed first (see the module rules).

        Raises:
            ConcurrentInvocationError: The conversation has a running run with a live lease.
            PendingApprovalError: The conversation has a paused run.
        """
        ...

    def commit(
        self,
        state: RunState,
        *,
        owner: str,
        version: int,
        injects_received: int | None = None,
    ) -> int:
        """Store ``state`` if the run is at ``version`` and run by ``owner``; return the new
        version. A running commit renews the lease; a paused one clears the owner; a final
        one (``done``/``cancelled``/``failed``) writes the log and ends the run.

        ``injects_received``: how many inputs accepted by :meth:`inject` for this run its
        owner has received since it began or claimed the run, every one of them held by
        ``state`` (``None``: not checked, nothing acknowledged). A running commit
        acknowledges them (see the module rules: they are not handed to a recoverer
        again). A final or paused commit (the run's last look at its input) is refused
        while the store has accepted more, so an inject accepted just before the end or
        the pause is answered by the run (or carried by the paused state), never dropped
        with its queue.

        Raises:
            InputPending: (a ``RunConflictError``) a final or paused commit while accepted
                injects have not reached the owner; nothing changed.
            RunConflictError: Another version, another owner, or the run is over.
        """
        ...

    def claim(self, run_id: str, *, owner: str, lease_s: float, version: int) -> int:
        """Take a paused run (at ``version``) to resume it, or a lost run (running at
        ``version``, its lease expired, ``on_owner_lost == "resume"``) to go on with it:
        it becomes running, owned by ``owner``. Return the new version.

        Raises:
            RunConflictError: It is not paused or lost at ``version`` (someone resumed,
                recovered or cancelled it, or its owner renewed the lease).
        """
        ...

    def lost_runs(self, *, limit: int | None = None) -> list[StoredRun]:
        """The lost runs (see the module rules): running, ``on_owner_lost == "resume"``,
        their lease expired by the store's clock; the longest expired first, at most
        ``limit``. Cheap enough to call every fraction of a second from every process
        (an index on the lease, not a scan of the runs)."""
        ...

    def recover(self, make_agent: Callable[[str], Any], *, limit: int | None = None) -> list[str]:
        """Resume the lost runs now, in this process: one pass over :meth:`lost_runs`,
        each claimed (a run another recoverer took is skipped) and driven to its end in a
        thread of its own, by an agent ``make_agent(conversation_id)`` builds on this store.
        Returns the ids of the runs this call resumed; registers nothing (for a cron job or a
        worker's start; the chat routes and ``agent_sync.celery.configure`` keep recovering
        in the background)."""
        ...

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        """Extend the lease of a run ``owner`` runs; ``False`` if it is not (any more)."""
        ...

    def get(self, run_id: str) -> RunSnapshot | None:
        """The run's snapshot from its last commit (``None``: unknown run)."""
        ...

    def cancel(self, run_id: str, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        """Cancel a running (signal its owner, who applies ``mode`` as ``run.cancel`` does)
        or paused (at once, whatever the mode) run.

        Returns:
            ``True`` if the run was running or paused.
        """
        ...

    def inject(self, run_id: str, content: Sequence[ContentBlock] | str) -> None:
        """Queue input (text or content blocks) for a running run's owner.

        Raises:
            UsageError: Invalid content (checked with ``agent_sync._prompt.content_blocks``,
                the rule of ``run.inject``), or the run is not running.
        """
        ...

    def wait_signals(self, run_ids: Collection[str], timeout: float) -> list[RunSignal]:
        """Take the signals queued for these runs, waiting up to ``timeout`` seconds for
        the first. Each signal is returned once to the run's owner, in the order it was
        queued; it stays queued until the commit that consumes it (see the module rules),
        so after a claim the new owner takes those its predecessor did not commit.

        ``run_ids`` may change while this waits (the watcher passes a live view of the
        runs its process owns): it is read again at every check, so a run added during
        the wait is heard at once, not at the next call."""
        ...

    def get_value(self, conversation_id: str, key: str) -> str | None:
        """The conversation's value under ``key``, or ``None`` if it has none (an unknown
        conversation, or an id no store can hold, has none).

        Raises:
            UsageError: ``key`` is not a key (a non-empty ``str`` of at most 256
                characters, UTF-8 encodable).
        """
        ...

    def set_value(
        self, conversation_id: str, key: str, value: str | None, *, expected: str | None
    ) -> bool:
        """Compare-and-set the conversation's value under ``key``: if it is ``expected``
        now (``None``: it has none), make it ``value`` (``None``: delete it) and return
        ``True``; else change nothing and return ``False`` (another writer got there
        first: read it again and decide). Atomic across threads and processes.

        Raises:
            UsageError: A conversation id no store can hold, a bad key, or a ``value``
                or ``expected`` that is not ``None`` or a ``str`` UTF-8 can encode within
                1 MB; nothing is written.
        """
        ...

    def prune(self, *, older_than: float) -> int:
        """Delete finished runs (and their signals and event logs) that ended more than
        ``older_than`` seconds ago, and complete event logs past their ``keep_s``; return
        how many runs. Conversation logs and values are kept."""
        ...
