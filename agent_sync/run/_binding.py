"""An agent's conversation in a store: :class:`ConversationBinding`.

An agent built with a ``store`` is bound to one conversation there: the store, the
conversation's id, the lease its runs hold, and what happens to a run whose owner dies
(``on_owner_lost``). ``Agent.__init__`` checks the arguments and makes the binding once; it
goes down whole to the runs (their :class:`~agent_sync.run._durable.StoreLink`), to a
sub-agent's children (:meth:`ConversationBinding.for_conversation`: the same store and lease,
another conversation) and to recovery, the web routes and Celery, which ask it for the
store rather than unpacking values. An agent without a store has no binding (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .._run_state import OwnerLostPolicy
from ..cancel import CancelMode
from ..messages import Message
from ..stores._protocol import ConversationRecord, RunStore, StoredRun
from ._durable import StoreLink, load_log

__all__ = ["ConversationBinding"]

_NO_MESSAGES = 2**62  # load(since=...): only the conversation's current run is needed


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationBinding:
    """One conversation in one store, as an agent's runs use it (immutable)."""

    store: RunStore
    """Where the conversation's history and runs live."""
    conversation_id: str
    """The conversation's name in the store."""
    lease_s: float
    """Seconds a run stays claimed without a sign of life from its process."""
    on_owner_lost: OwnerLostPolicy = "fail"
    """What the store does with a top-level run whose owner died (``Agent(on_owner_lost=)``)."""

    def link(self) -> StoreLink:
        """A new run's link to the store (begin or claim, commits, the watcher)."""
        return StoreLink(self.store, self.conversation_id, self.lease_s)

    def for_conversation(self, conversation_id: str) -> ConversationBinding:
        """Another conversation in the same store, with the same lease and policy (a
        sub-agent's child run is stored beside its caller's)."""
        return replace(self, conversation_id=conversation_id)

    def holds(self, store: object) -> bool:
        """Whether this conversation lives in ``store`` (the very object)."""
        return self.store is store

    def read_log(
        self, known: list[Message], synced: int, generation: int
    ) -> tuple[ConversationRecord, list[Message], int]:
        """The conversation's record, its whole log and how many of the log's messages an
        agent mirrors (see :func:`~agent_sync.run._durable.load_log`)."""
        return load_log(self.store, self.conversation_id, known, synced, generation)

    def replace_log(self, messages: list[Message]) -> int:
        """Write ``messages`` as the conversation's whole history (refused by the store
        while a run of it is live or paused); return the log's new generation."""
        return self.store.replace_log(self.conversation_id, messages)

    def current_run(self) -> StoredRun | None:
        """The conversation's current run (live or paused), read without its messages."""
        return self.store.load(self.conversation_id, since=_NO_MESSAGES).run

    def cancel_run(self, run_id: str, reason: str | None, mode: CancelMode = "now") -> bool:
        """Cancel the run ``run_id`` of this store wherever it runs or waits."""
        return self.store.cancel(run_id, reason, mode=mode)
