"""The handles users hold on a run: views of one run's :class:`RunDriver`.

* :class:`Run`: a view (``agent.active_run``, ``AgentStream.run``): cheap, all equal for the
  same run; ``cancel``/``inject``/``snapshot`` act on that run only, from any thread.
* Owning handles drive their run and end it: ``AgentStream`` (``agent.stream()``: events)
  and the run ``agent.steps()`` returns (a :class:`Run` that yields steps). Closing one
  (explicitly, at the end of a ``with`` block, or when it is garbage-collected) ends the run
  and releases the agent. The agent keeps the driver, not the handle, so dropping an owning
  handle can never leave the agent held.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TypeVar

from .._run_state import RunSnapshot, RunState, RunStatus, Step
from ..errors import UsageError
from ..events import AgentEvent
from ..messages import ContentBlock
from ..result import AgentResult
from ._driver import STREAM_CLOSED, CancelMode, RunDriver

__all__ = ["AgentStream", "Run", "StepsRun"]

_Self = TypeVar("_Self", bound="_Handle")


class _Handle:
    """What every handle offers: the run's id, state and result, cancel and inject."""

    __slots__ = ("_driver",)

    def __init__(self, driver: RunDriver) -> None:
        self._driver = driver

    @property
    def run_id(self) -> str:
        """The run's id (as on its events and result)."""
        return self._driver.run_id

    @property
    def status(self) -> RunStatus:
        """``running``, ``paused``, ``done``, ``cancelled`` or ``failed``."""
        return self._driver.status

    @property
    def result(self) -> AgentResult | None:
        """The result once the run is over (``None`` before, or if it raised)."""
        return self._driver.result

    @property
    def state(self) -> RunState:
        """The run as data (:class:`~agent_sync.run.RunState`): for a store or a debugger."""
        return self._driver.state

    def snapshot(self) -> RunSnapshot:
        """Where the run is now: frozen and cheap (nothing is copied from the history)."""
        return self._driver.snapshot()

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        """Stop this run, from any thread, at any moment; never a later run of the agent.

        Args:
            reason: Reported as ``result.cancel_reason`` (the first reason wins).
            mode: ``"now"``: stop within milliseconds (see ``docs/cancellation.md``).
                ``"after_turn"``: let the model call in flight and the tools it asks for
                finish (their results are kept), then stop before the next model call
                (``stop_reason == "cancelled"``; a run whose turn was its last simply
                ends). A later ``mode="now"`` escalates.

        Returns:
            ``True`` if the run was still going and is now signalled; ``False`` if it is
            over (a late cancel never reaches a later run).

        Raises:
            UsageError: An unknown ``mode``.
        """
        return self._driver.cancel(reason, mode=mode)

    def inject(self, content: str | Sequence[ContentBlock]) -> None:
        """Queue input for this run, from any thread.

        It goes into the next user message the loop sends (after the tool results of the
        current round); if the model ends its turn with input queued, one more model call
        answers it. An ``InputInjected`` event tells when it went out. If the run is
        cancelled first, it is still written to the history (before the closing
        "Cancelled by user"): nothing injected is lost or written twice.

        Args:
            content: Text, or a list of content blocks (``text``, ``image``, ``document``).

        Raises:
            UsageError: Invalid content (nothing is queued), or the run is over.
        """
        self._driver.inject(content)

    def close(self) -> None:
        """End or let go of the run (each handle says which)."""
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Owning(_Handle):
    """A handle that drives its run: closing it (or leaving its ``with`` block, or losing
    it to the garbage collector) ends the run and releases the agent."""

    __slots__ = ()

    def close(self) -> None:
        """Cancel the run if it is still going (valid history) and release the agent.

        Idempotent and safe from any thread; never raises (a failure while ending the run
        is logged). The closing message ("Cancelled by user") is written exactly once. If
        another thread is inside ``next()``, the run is cancelled at once and that thread
        ends it as soon as its ``next()`` returns.
        """
        self._driver.close()

    def __del__(self) -> None:
        driver = getattr(self, "_driver", None)
        if driver is not None and not driver.released:
            driver.close()


class Run(_Handle):
    """A run: the handle of one invocation, usable from any thread.

    ``agent.active_run`` and ``agent.steps()`` give you one (``AgentStream.run`` too).
    ``cancel``, ``inject``, ``snapshot``, ``state``, ``status`` and ``result`` may be used
    from any thread at any moment; they act on this run only, never on a later run of the
    same agent.

    The handle from ``agent.steps()`` is iterated (one thread at a time): each iteration
    makes one model call and runs the tools it asked for, and yields a
    :class:`~agent_sync.run.Step`. Leaving early (``close()``, the end of a ``with``
    block, garbage collection) cancels the run with a valid history.
    """

    __slots__ = ()

    def close(self) -> None:
        """End the run if it is still going (cancelled, valid history) and release the agent.

        On the handle from ``agent.steps()``: idempotent, any thread, never raises. On a
        handle from ``agent.active_run`` (someone else drives the run) it cancels the run
        with reason ``"stream closed"``; the driving thread ends it.
        """
        self._driver.cancel(STREAM_CLOSED)

    def __iter__(self) -> Iterator[Step]:
        return self

    def __next__(self) -> Step:
        raise UsageError(
            "only the run returned by agent.steps() can be iterated; this handle "
            "(from agent.active_run) is driven by its invoke() or stream()"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other._driver is self._driver

    def __hash__(self) -> int:
        return hash(self._driver.run_id)

    def __repr__(self) -> str:
        return f"<Run {self.run_id} {self.status}>"


class StepsRun(_Owning, Run):
    """The :class:`Run` ``agent.steps()`` returns: it drives its run one step at a time."""

    __slots__ = ()

    def __next__(self) -> Step:
        return self._driver.next_step()


class AgentStream(_Owning):
    """The iterator ``Agent.stream()`` returns. Close it (or use ``with``) to stop early.

    Iterate it from one thread at a time; ``close()``, ``cancel()``, ``inject()`` and
    ``snapshot()`` may be called from any thread at any moment and act on this stream's
    own run, never on a later run of the agent (``agent.cancel()`` stops whatever the agent
    runs *now*: a web view that streams one run and cancels on disconnect should use the
    stream's, so a late cancel cannot reach the conversation's next message). If another
    thread is inside ``next()`` when ``close()`` is called, ``close()`` cancels the run and
    returns at once, and that thread ends the run and releases the agent as soon as its
    ``next()`` returns. Either way the run is ended exactly once, with one closing message.
    """

    __slots__ = ()

    @property
    def run(self) -> Run:
        """This stream's run (a :class:`~agent_sync.run.Run` handle; the stream drives it)."""
        return Run(self._driver)

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> AgentEvent:
        return self._driver.next_event()
