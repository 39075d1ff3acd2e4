"""Publishing a recovered run: a run whose worker died goes on in this one, and its event
log goes on after the last record the dead worker appended.

Followers (on any worker) read one log: no hole, no duplicate. Before the resumed run's own
records come the ones its committed state implies and the log lacks (a resumable run
commits a model call's message and each tool result before they are published, so the dead
worker may have committed one it did not publish): the ``step`` record of a committed model
call, then ``resumed``, then a ``tool_end`` for each call the state answers that the log
never ended (a result committed in time, or "worker stopped; effect unknown"). A call the
log shows started and the resumed run runs again is not announced twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._run_state import RunState
from ..errors import UsageError
from ..events import ToolEnd
from ..messages import ToolUse
from ..run._handle import AgentStream
from ..stores._event_log import EventLogStore, RunEvent, RunEventLog
from ..stores._recovery import LiveSlot
from ._publish import REPLAY_TTL_S, Publisher
from ._records import records_of, resumed_record

if TYPE_CHECKING:
    from ..run._binding import ConversationBinding
    from ..stores._protocol import RunStore, StoredRun

__all__ = ["go_on_recovered", "publish_recovered"]

logger = logging.getLogger(__name__)


def go_on_recovered(
    store: RunStore,
    lost: StoredRun,
    binding: ConversationBinding | None,
    recover: Callable[[], AgentStream],
    *,
    replay_ttl: float | None,
    slot: LiveSlot | None,
) -> Callable[[], None]:
    """Take ``lost`` over for an agent of ``binding`` (``recover``: claim it and stream it
    on) and return the rest of the work, to run in a thread of its own; it gives ``slot``
    back when the run ends (see ``stores._recovery.RecoveringAgent._go_on``). Until it
    returns, ``slot`` is the caller's: whatever raises here leaves it to the caller, and a
    run claimed but not handed to its publisher is ended first (cancelled, stored).

    Raises:
        UsageError: ``binding`` is not a conversation of ``store``.
        RunConflictError, ConcurrentInvocationError, PendingApprovalError: From ``recover``.
        Exception: The run's log could not go on (the store's, or a record it cannot read).
    """
    run_id = lost.state.run_id
    if binding is None or not binding.holds(store):
        raise UsageError(
            "make_agent must build agents on the recovering store "
            "(Agent(..., store=store, conversation_id=conversation_id))"
        )
    logged = store.read_events(run_id) if isinstance(store, RunEventLog) else []
    stream = recover()
    if logged and isinstance(store, RunEventLog):  # a log only a RunEventLog keeps
        try:
            publisher = publish_recovered(store, stream, logged, replay_ttl=replay_ttl, slot=slot)
        except BaseException:
            stream.close()  # idempotent: the run ends cancelled, stored
            logger.warning("run_id=<%s> | the recovered run's log could not go on", run_id)
            raise
        return publisher.thread.join
    return lambda: _drain(stream, run_id, slot)


def _drain(stream: AgentStream, run_id: str, slot: LiveSlot | None) -> None:
    """Run a recovered run without an event log to its end (its store has the rest)."""
    try:
        with stream:
            for _ in stream:
                pass
    except Exception:  # its end (failed) is stored; say it here too
        logger.warning("run_id=<%s> | the recovered run failed", run_id, exc_info=True)
    finally:
        if slot is not None:
            slot.give()


def publish_recovered(
    store: EventLogStore,
    stream: AgentStream,
    logged: Sequence[RunEvent],
    *,
    replay_ttl: float | None,
    slot: LiveSlot | None,
) -> Publisher:
    """Publish ``stream`` (a recovered run, started) after ``logged``, its log so far
    (``replay_ttl``: how long its complete log is kept; ``None``: the routes' default)."""
    state = stream.state
    started: dict[str, str] = {}
    ended: set[str] = set()
    last_step = 0
    for event in logged:
        record = event.data
        kind = record.get("type")
        if kind == "tool_start":
            started[str(record.get("id"))] = str(record.get("name"))
        elif kind == "tool_end":
            ended.add(str(record.get("id")))
        elif kind == "step":
            last_step = max(last_step, int(record.get("cycle") or 0))
    first: list[dict[str, Any]] = []
    if last_step < state.cycle:
        first.extend(_committed_step(state))
    first.append(resumed_record(state.run_id, state.cycle))
    uses = {use["toolUseId"]: use for use in state.pending_tool_uses}
    for result in state.round_results:
        call_id = result["toolUseId"]
        use = uses.get(call_id)
        if call_id in ended or use is None:
            continue
        if call_id not in started:
            first.append(
                {"type": "tool_start", "id": call_id, "name": use["name"], "input": use["input"]}
            )
        first.extend(records_of(ToolEnd(tool_use=use, result=result, duration_s=0.0), cycle=0))
        started.pop(call_id, None)
    return Publisher(
        store,
        stream,
        run_id=state.run_id,
        first=first,
        after=logged[-1].seq if logged else 0,
        cycle=state.cycle,
        replay_ttl=REPLAY_TTL_S if replay_ttl is None else replay_ttl,
        slot=slot,
        open_calls={i: name for i, name in started.items() if i not in ended},
    )


def _committed_step(state: RunState) -> list[dict[str, Any]]:
    """The ``step`` record of the state's last model call (committed, never published)."""
    for message in reversed(state.messages):
        if message["role"] == "assistant":
            calls: list[ToolUse] = [b["toolUse"] for b in message["content"] if "toolUse" in b]
            return [
                {
                    "type": "step",
                    "cycle": state.cycle,
                    "tool_calls": [
                        {"id": c["toolUseId"], "name": c["name"], "input": c["input"]}
                        for c in calls
                    ],
                }
            ]
    return []
