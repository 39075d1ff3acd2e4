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

from collections.abc import Sequence
from typing import Any

from .._run_state import RunState
from ..events import ToolEnd
from ..messages import ToolUse
from ..run._handle import AgentStream
from ..stores._event_log import EventLogStore, RunEvent
from ._publish import REPLAY_TTL_S, Publisher, RunSlots
from ._records import records_of, resumed_record

__all__ = ["publish_recovered"]


def publish_recovered(
    store: EventLogStore,
    stream: AgentStream,
    logged: Sequence[RunEvent],
    *,
    replay_ttl: float | None,
    slot: RunSlots | None,
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
