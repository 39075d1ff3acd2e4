"""The cancel scope: one per invocation, the single source of truth for "stop now".

Design
------
An :class:`~agent_sync.Agent` creates a fresh :class:`CancelScope` for each invocation and
drops it when the invocation ends. ``Agent.cancel()`` forwards to the running scope, so a
cancel that arrives while the agent is idle cannot leak into the next call, and a tool
thread abandoned by an earlier invocation keeps seeing *its* scope as cancelled forever.

Everything that blocks inside an invocation waits on the scope, one way or another:

* waits (retry back-off, tool grace periods, ``ToolContext.wait``) are ``event.wait``;
* blocked I/O (a silent socket, headers that never come) cannot wait on an event, so the
  code that owns it registers an *abort callback* (for a provider: shut the socket down).
  ``cancel()`` runs the callbacks, outside the lock, in the cancelling thread.

Known races, and why they are harmless
--------------------------------------
* ``register_abort`` after ``cancel()``: the callback runs at once in the registering
  thread, so an abort is never missed.
* ``cancel()`` racing ``close()``: ``close()`` marks the scope finished under the lock;
  a cancel that loses the race returns ``False`` and runs no callbacks.
* A callback that is running while its owner unregisters: the owner must tolerate one late
  call (socket shutdown on a connection already released is a no-op for our providers).

Signal safety
-------------
The scopes' and tokens' events are :class:`agent_sync._signal_safe.Event`: the deadline
thread sets them (``timeout=``) while a run's thread waits on them, and a Ctrl-C landing in
a ``threading.Event.wait`` can leave the event's internal lock held, so that the deadline
thread's ``set()`` would hang, and every later deadline with it. The scopes' and tokens' own
locks are plain locks taken with ``with``, which a signal cannot leave held.

Caller-held tokens
------------------
A :class:`CancelToken` belongs to the caller (a web request, a job) and outlives runs: each
run it is passed to links its own scope to it for as long as the run lives. Cancelling the
token cancels every linked scope, outside the token's lock (a scope's cancel runs abort
callbacks); a token cancelled before a run links to it cancels that run's scope at once.

* ``cancel()`` racing an unlink: the scopes to cancel are taken under the lock, so a scope
  unlinked just after may still be cancelled once. The run driver closes its scope before
  unlinking, and a closed scope ignores ``cancel()``: a finished run is never touched.
* ``cancel()`` racing a link: the link either lands before (and is cancelled by the
  cancelling thread) or sees the token cancelled (and cancels in the linking thread):
  never both, never neither.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Literal

from ._encodable import clean_text
from ._signal_safe import Event
from .errors import AgentSyncError, UsageError

__all__ = ["AbortCallback", "CancelMode", "CancelScope", "CancelToken", "CancelledError"]

CancelMode = Literal["now", "after_turn"]
"""How a run is cancelled: ``"now"``, or ``"after_turn"`` (the turn in flight and its tools
finish first)."""


def check_mode(mode: str) -> CancelMode:
    """A cancel mode, checked at the edge (``run.cancel``, ``agent.cancel``, a store's
    ``cancel``): a bad mode is a :class:`~agent_sync.errors.UsageError`, never ignored."""
    if mode not in ("now", "after_turn"):
        raise UsageError(f'mode must be "now" or "after_turn", got {mode!r}')
    return mode  # type: ignore[return-value]


logger = logging.getLogger(__name__)

AbortCallback = Callable[[], None]


class CancelledError(AgentSyncError):
    """Raised inside an invocation when its scope has been cancelled.

    The loop catches it and returns a result with ``stop_reason == "cancelled"``; user code
    only sees it from :meth:`CancelScope.raise_if_cancelled` (for example in a tool).
    """


class CancelScope:
    """Cancellation state of one invocation. Thread-safe.

    Args:
        run_id: The id of the run this scope belongs to, if any (for logs and reprs).

    Attributes:
        event: Set once the scope is cancelled; pass it to anything that can wait on it.
        run_id: The run's id, or ``None``.
    """

    __slots__ = (
        "_after_turn",
        "_after_turn_reason",
        "_callbacks",
        "_children",
        "_closed",
        "_lock",
        "_next_key",
        "_reason",
        "event",
        "run_id",
    )

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id
        self.event: threading.Event = Event()  # signal-safe: see _signal_safe
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._closed = False
        self._callbacks: dict[int, AbortCallback] = {}
        self._next_key = 0
        self._after_turn = False  # a cancel(mode="after_turn") waits for the turn's end
        self._after_turn_reason: str | None = None
        self._children: dict[int, CancelScope] = {}  # linked child runs' scopes (link())

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel()`` has been called on this scope."""
        return self.event.is_set()

    @property
    def cancel_requested(self) -> bool:
        """Whether a cancel has been asked for, now or after the turn in flight."""
        return self._after_turn or self.event.is_set()

    @property
    def closed(self) -> bool:
        """Whether the invocation has finished (:meth:`close`): its run is over."""
        return self._closed

    @property
    def reason(self) -> str | None:
        """The reason given to the first ``cancel()``, or ``None``."""
        return self._reason

    def cancel(self, reason: str | None = None) -> bool:
        """Signal cancellation and run the abort callbacks.

        Idempotent: the first reason wins; later calls return ``True`` without running the
        callbacks again.

        Returns:
            ``True`` if the scope is live (its invocation has not finished), else ``False``.
        """
        return self._cancel(clean_text(reason) if isinstance(reason, str) else reason)

    def _cancel(self, reason: str | None) -> bool:
        """:meth:`cancel` with a reason already clean.

        The scope's tree (linked children, theirs, ...) is cancelled with the same reason by
        a loop, not by recursion, so a tree of any depth is cancelled whole. A scope's
        children are cancelled (their callbacks run) before its own callbacks: a child
        run's abort frees its parent's tool. Each scope is marked under its own lock and
        its callbacks run outside it, once.
        """
        taken = self._mark(reason)
        if isinstance(taken, bool):
            return taken
        # A stack of (a marked scope's callbacks, its children not yet cancelled).
        stack = [(taken[0], iter(taken[1]))]
        while stack:
            callbacks, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                for callback in callbacks:
                    self._run_callback(callback)
                continue
            taken = child._mark(reason)
            if not isinstance(taken, bool):
                stack.append((taken[0], iter(taken[1])))
        return True

    def _mark(self, reason: str | None) -> tuple[list[AbortCallback], list[CancelScope]] | bool:
        """Mark the scope cancelled and hand over its abort callbacks and linked children;
        a bool (whether it is live) if there is nothing to do: closed, or cancelled before."""
        with self._lock:
            if self._closed:
                return False
            if self.event.is_set():
                return True
            self._reason = reason
            self.event.set()
            callbacks, self._callbacks = self._callbacks, {}
            children, self._children = self._children, {}
        return list(callbacks.values()), list(children.values())

    def cancel_after_turn(self, reason: str | None = None) -> bool:
        """Ask for a cancel at the end of the turn in flight (``mode="after_turn"``): the
        model call and the tools it asked for finish, and :meth:`end_of_turn` (the loop's
        checkpoint before the next model call) cancels. From any thread; the first request's
        reason wins, and a cancel now (:meth:`cancel`) still cuts the turn short.

        Returns:
            ``True`` if the scope is live (its invocation has not finished), else ``False``.
        """
        passed = self._ask_after_turn(reason)
        if passed is None:
            return False
        pending = [passed]
        while pending:  # child runs finish their own turn too (a loop: a tree of any depth)
            reason, children = pending.pop()
            for child in children:
                theirs = child._ask_after_turn(reason)
                if theirs is not None:
                    pending.append(theirs)
        return True

    def _ask_after_turn(self, reason: str | None) -> tuple[str | None, list[CancelScope]] | None:
        """Note an after-turn request (the first one's reason wins); return that reason and
        the linked children to pass it to (``None``: the scope is closed)."""
        with self._lock:
            if self._closed:
                return None
            if not self._after_turn:
                self._after_turn_reason = reason
                self._after_turn = True
            return self._after_turn_reason, list(self._children.values())

    def end_of_turn(self) -> None:
        """The loop's checkpoint between turns: a pending after-turn request cancels now."""
        with self._lock:
            asked, reason = self._after_turn, self._after_turn_reason
        if asked and not self.event.is_set():
            self.cancel(reason)

    def link(self, child: CancelScope) -> Callable[[], None]:
        """Make ``child`` (a sub-agent's run, started by a tool of this run) part of this
        scope's tree until the returned function is called: a cancel of this scope cancels
        it (with this scope's reason), and a ``cancel_after_turn`` asks it to finish its
        turn too. Linking to a scope already cancelled (or asked to stop after its turn)
        passes that on at once, in this thread, as a :class:`CancelToken` link does.

        Returns:
            A function that unlinks ``child`` (safe to call more than once, any thread).
        """
        with self._lock:
            cancelled = self.event.is_set()
            after_turn = self._after_turn
            if not cancelled and not self._closed:
                key = self._next_key
                self._next_key += 1
                self._children[key] = child
                unlink: Callable[[], None] = partial(self._unlink_child, key)
            else:
                unlink = _noop
        if cancelled:
            child.cancel(self._reason)
        elif after_turn:
            child.cancel_after_turn(self._after_turn_reason)
        return unlink

    def _unlink_child(self, key: int) -> None:
        with self._lock:
            self._children.pop(key, None)

    def register_abort(self, callback: AbortCallback) -> Callable[[], None]:
        """Register ``callback`` to run once when the scope is cancelled.

        If the scope is already cancelled, ``callback`` runs immediately in this thread.

        Returns:
            A function that unregisters the callback (safe to call more than once).
        """
        with self._lock:
            if not self.event.is_set():
                key = self._next_key
                self._next_key += 1
                self._callbacks[key] = callback
                return lambda: self._unregister(key)
        self._run_callback(callback)
        return _noop

    def wait(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (``None``: until cancelled).

        Returns:
            ``True`` if the scope was cancelled (the wait was cut short or it already was).
        """
        return self.event.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`CancelledError` if the scope has been cancelled."""
        if self.event.is_set():
            raise CancelledError(self._reason or "cancelled")

    def close(self) -> None:
        """Mark the invocation finished: later ``cancel()`` calls return ``False``."""
        with self._lock:
            self._closed = True
            self._callbacks.clear()
            self._children.clear()

    def _unregister(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    @staticmethod
    def _run_callback(callback: AbortCallback) -> None:
        try:
            callback()
        except Exception:  # an abort must never break cancel() for the other callbacks
            logger.warning("abort callback failed", exc_info=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "cancelled" if self.cancelled else "live"
        return f"<CancelScope run_id={self.run_id!r} {state} reason={self._reason!r}>"


class CancelToken:
    """A caller-held cancel switch for any number of runs. Thread-safe.

    Pass it to ``invoke``/``stream``/``steps`` (``cancel=token``): while a run lives,
    cancelling the token cancels it with the token's reason (``result.stop_reason ==
    "cancelled"``, ``result.cancel_reason == reason``). One token can serve several agents'
    runs, at once or one after another; a token that is already cancelled stops a run it is
    passed to before its first model call. A token never reaches a run it was not passed to,
    nor a run that has finished. Cancelling is final: a token cannot be reset.

    Example: one web request runs two agents in threads; its teardown stops both (a run
    that had not started yet when the token was cancelled stops just the same):

    >>> import threading
    >>> from agent_sync import Agent, CancelToken
    >>> from agent_sync.testing import ScriptedModel
    >>> token = CancelToken()  # one per request
    >>> hangs = {"text": "...", "stall_after": 1}  # answers, then goes silent
    >>> agents = {"researcher": Agent(ScriptedModel([hangs])),
    ...           "writer": Agent(ScriptedModel([hangs]))}
    >>> results = {}
    >>> def work(name, agent):
    ...     results[name] = agent.invoke("draft the report", cancel=token)
    >>> threads = [threading.Thread(target=work, args=item) for item in agents.items()]
    >>> for thread in threads:
    ...     thread.start()
    >>> token.cancel("client disconnected")  # e.g. from the request's teardown
    True
    >>> for thread in threads:
    ...     thread.join(timeout=30)
    >>> {name: result.cancel_reason for name, result in sorted(results.items())}
    {'researcher': 'client disconnected', 'writer': 'client disconnected'}

    Attributes:
        event: Set once the token is cancelled; wait on it, or poll :attr:`cancelled`.
    """

    __slots__ = ("_lock", "_next_key", "_reason", "_scopes", "event")

    def __init__(self) -> None:
        self.event: threading.Event = Event()  # signal-safe: see _signal_safe
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._scopes: dict[int, CancelScope] = {}
        self._next_key = 0

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` has been called."""
        return self.event.is_set()

    @property
    def reason(self) -> str | None:
        """The reason given to the first :meth:`cancel`, or ``None``."""
        return self._reason

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel the token and every run it is linked to. Any thread, any moment.

        The runs' scopes are cancelled in this thread, after the token's lock is released
        (each runs its abort callbacks, e.g. a socket shutdown: quick). A run that has
        already finished is not touched.

        Args:
            reason: Given to the runs as their ``cancel_reason``; the first call's wins.

        Returns:
            ``True`` if this call cancelled the token, ``False`` if it already was.
        """
        with self._lock:
            if self.event.is_set():
                return False
            self._reason = reason
            self.event.set()
            scopes = list(self._scopes.values())
            self._scopes.clear()  # no more use for them: later links cancel at once
        for scope in scopes:
            scope.cancel(reason)
        return True

    def _link(self, scope: CancelScope) -> Callable[[], None]:
        """Cancel ``scope`` when the token is cancelled, until the returned function is called.

        If the token is already cancelled, ``scope`` is cancelled at once, in this thread.

        Returns:
            A function that unlinks the scope (safe to call more than once, from any thread).
        """
        with self._lock:
            if not self.event.is_set():
                key = self._next_key
                self._next_key += 1
                self._scopes[key] = scope
                return partial(self._unlink, key)
        scope.cancel(self._reason)
        return _noop

    def _unlink(self, key: int) -> None:
        with self._lock:
            self._scopes.pop(key, None)

    def __repr__(self) -> str:
        if self.event.is_set():
            return f"<CancelToken cancelled reason={self._reason!r}>"
        return f"<CancelToken live links={len(self._scopes)}>"


def _noop() -> None:
    return None
