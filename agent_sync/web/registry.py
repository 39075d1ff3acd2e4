"""A per-process registry of conversations, one agent each, for threaded web servers.

A chat web app keeps one :class:`~agent_sync.Agent` per conversation: the agent holds the
history, and its invocation lock refuses a second message while one is being answered
(the view answers 409 instead of corrupting the history). A second request (``POST
/cancel``) finds the same agent here and cancels it.

Design: one lock guards an ordered dict (least recently used first). The factory runs
outside the lock, so a slow factory (loading a saved history) does not stall other
conversations; when two requests create the same conversation at once, the first one to
finish wins and the other's agent is dropped unused. Eviction (by ``max_conversations``
and ``idle_ttl``) only ever removes agents that are not running, least recently used
first. Known race: an agent handed out by :meth:`ConversationRegistry.get` but not yet
started can be evicted if ``max_conversations`` other conversations are created in
between; its next message then starts from the factory again.

The registry lives in one process: with several worker processes, route a conversation
to the same process (sticky sessions) or keep only threads (gunicorn ``gthread``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..errors import AgentSyncError, UsageError
from ._sse import StreamingAgent

__all__ = ["ConversationRegistry", "RegistryFullError"]

logger = logging.getLogger(__name__)

AgentT = TypeVar("AgentT", bound=StreamingAgent)


class RegistryFullError(AgentSyncError):
    """Every slot holds a running conversation; a new one cannot be created now.

    Answer 503 and let the client retry later.
    """


@dataclass
class _Entry(Generic[AgentT]):
    agent: AgentT
    last_used: float


class ConversationRegistry(Generic[AgentT]):
    """Get-or-create one agent per conversation id. Thread-safe.

    Example::

        registry = ConversationRegistry(lambda cid: Agent(model, tools=[...]))

        @app.post("/chat")
        def chat():
            agent = registry.get(request.json["conversation_id"])
            return sse_response(agent, request.json["message"])   # 409 if busy

        @app.post("/cancel")
        def cancel():
            return {"cancelled": registry.cancel(request.json["conversation_id"])}

    Args:
        factory: Builds the agent of a new conversation from its id (for example with
            its saved history as ``messages=``). Called without the registry's lock.
        max_conversations: At most this many agents are kept; creating one more evicts
            the least recently used idle one.
        idle_ttl: Seconds after its last use that an idle conversation is evicted
            (checked when a conversation is created); ``None`` keeps them until
            ``max_conversations`` forces eviction.
        on_evict: Called with ``(conversation_id, agent)`` after an agent was evicted or
            discarded (outside the lock), for example to save its history.
        clock: Monotonic clock in seconds (tests inject a fake one).

    Raises:
        agent_sync.errors.UsageError: ``max_conversations`` is below 1 or ``idle_ttl``
            is not positive.
    """

    def __init__(
        self,
        factory: Callable[[str], AgentT],
        *,
        max_conversations: int = 1000,
        idle_ttl: float | None = 3600.0,
        on_evict: Callable[[str, AgentT], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_conversations < 1:
            raise UsageError("max_conversations must be at least 1")
        if idle_ttl is not None and idle_ttl <= 0:
            raise UsageError("idle_ttl must be positive, or None")
        self._factory = factory
        self._max = max_conversations
        self._ttl = idle_ttl
        self._on_evict = on_evict
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry[AgentT]] = OrderedDict()

    def get(self, conversation_id: str) -> AgentT:
        """Return the conversation's agent, creating it with the factory if needed.

        Marks the conversation as just used.

        Args:
            conversation_id: The conversation's id (validate it in the view: the
                registry only requires a non-empty string).

        Returns:
            The agent (the same object for every call with that id until it is evicted).

        Raises:
            RegistryFullError: The registry is full of running conversations.
            agent_sync.errors.UsageError: ``conversation_id`` is not a non-empty string.
        """
        if not isinstance(conversation_id, str) or not conversation_id:
            raise UsageError("conversation_id must be a non-empty string")
        with self._lock:
            found = self._touch(conversation_id)
        if found is not None:
            return found
        created = self._factory(conversation_id)
        with self._lock:
            found = self._touch(conversation_id)
            if found is not None:
                return found  # another request created it while the factory ran
            evicted = self._make_room()
            full = len(self._entries) >= self._max
            if not full:
                self._entries[conversation_id] = _Entry(created, self._clock())
        self._notify(evicted)
        if full:
            raise RegistryFullError(f"all {self._max} conversations are running; try later")
        logger.debug("conversations=<%d> | conversation created", len(self))
        return created

    def peek(self, conversation_id: str) -> AgentT | None:
        """Return the conversation's agent if it exists, without creating or touching it."""
        with self._lock:
            entry = self._entries.get(conversation_id)
            return None if entry is None else entry.agent

    def cancel(self, conversation_id: str, reason: str | None = "cancelled by user") -> bool:
        """Cancel the conversation's running invocation, from any thread.

        Args:
            conversation_id: The conversation to stop.
            reason: The ``cancel_reason`` its result will carry.

        Returns:
            ``True`` if a running invocation was signalled; ``False`` if the conversation
            is unknown or idle (a harmless no-op: nothing carries over to its next run).
        """
        agent = self.peek(conversation_id)
        return False if agent is None else agent.cancel(reason)

    def discard(self, conversation_id: str, reason: str | None = "conversation discarded") -> bool:
        """Forget a conversation, cancelling it first if it is running.

        Args:
            conversation_id: The conversation to remove.
            reason: The cancel reason, if it was running.

        Returns:
            ``True`` if it existed.
        """
        with self._lock:
            entry = self._entries.pop(conversation_id, None)
        if entry is None:
            return False
        entry.agent.cancel(reason)
        self._notify([(conversation_id, entry.agent)])
        return True

    def cancel_all(self, reason: str | None = "server shutting down") -> int:
        """Cancel every running conversation (for a graceful shutdown).

        Returns:
            How many running invocations were signalled.
        """
        with self._lock:
            agents = [entry.agent for entry in self._entries.values()]
        return sum(1 for agent in agents if agent.cancel(reason))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, conversation_id: object) -> bool:
        with self._lock:
            return conversation_id in self._entries

    def _touch(self, conversation_id: str) -> AgentT | None:
        entry = self._entries.get(conversation_id)
        if entry is None:
            return None
        entry.last_used = self._clock()
        self._entries.move_to_end(conversation_id)
        return entry.agent

    def _make_room(self) -> list[tuple[str, AgentT]]:
        """Evict expired idle entries, then LRU idle ones until one slot is free."""
        evicted: list[tuple[str, AgentT]] = []
        if self._ttl is not None:
            horizon = self._clock() - self._ttl
            for cid, entry in list(self._entries.items()):
                if entry.last_used > horizon:
                    break  # ordered by last use: every later entry is fresher
                if not entry.agent.is_running:
                    del self._entries[cid]
                    evicted.append((cid, entry.agent))
        for cid, entry in list(self._entries.items()):
            if len(self._entries) < self._max:
                break
            if not entry.agent.is_running:
                del self._entries[cid]
                evicted.append((cid, entry.agent))
        return evicted

    def _notify(self, evicted: list[tuple[str, AgentT]]) -> None:
        if not evicted:
            return
        logger.debug("evicted=<%d> | conversations evicted", len(evicted))
        if self._on_evict is None:
            return
        for cid, agent in evicted:
            try:
                self._on_evict(cid, agent)
            except Exception:
                logger.exception("on_evict callback failed")
