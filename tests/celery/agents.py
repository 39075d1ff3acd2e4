"""The agents of the Celery tests, built alike by the worker (``worker_app``) and the web
side of the tests (a paused run is resumed by the web worker that takes the decision).

:class:`ProbeModel` answers by the last user text, with :class:`ScriptedModel` turns:

- ``wait <marker>``: calls :func:`wait_for_stop`, which tells the test (over a Unix socket,
  no polling) that it runs, in which process, then waits until the run is cancelled;
- ``ask``: calls the gated tool :func:`wipe` (the run pauses for approval);
- anything else (and every tool result): ``finished in <pid>``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

from agent_sync import Agent, ToolContext, tool
from agent_sync.cancel import CancelScope
from agent_sync.models import ModelRequest
from agent_sync.stores import RunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import COOPERATIVE_GRACE

PROBE_SOCKET = "AGENT_SYNC_TEST_PROBE_SOCKET"
TOLD = "told to stop"


@tool
def wait_for_stop(marker: str, context: ToolContext) -> str:
    """Tell the test this call has started, then wait until the run is cancelled.

    Args:
        marker: Names the call for the test.
    """
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(os.environ[PROBE_SOCKET])
        conn.sendall(f"{marker} {os.getpid()}\n".encode())
    return TOLD if context.wait(60) else "never told"


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return f"wiped {path}"


class ProbeModel:
    """Scripted turns chosen by the last user message (see the module docstring)."""

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[Any]:
        content = request.messages[-1]["content"]
        texts = [block["text"] for block in content if "text" in block]
        answered = any("toolResult" in block for block in content)
        text = texts[-1] if texts and not answered else ""
        turn: Any = f"finished in {os.getpid()}"
        if text.startswith("wait "):
            call = {"name": "wait_for_stop", "input": {"marker": text.removeprefix("wait ")}}
            turn = {"tool_calls": [call]}
        elif text == "ask":
            turn = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}
        return ScriptedModel([turn]).stream(request, cancel=cancel)


def make_agent(store: RunStore, conversation_id: str, *, resume: bool = False) -> Agent:
    """The conversation's agent on ``store``; with ``resume``, its runs go on in another
    process when theirs dies (the worker's agents: the test's own never take a run over)."""
    return Agent(
        ProbeModel(),
        tools=[wait_for_stop, wipe],
        store=store,
        conversation_id=conversation_id,
        on_owner_lost="resume" if resume else "fail",
        tool_grace_period=COOPERATIVE_GRACE,  # the tool's own result is asserted
    )
