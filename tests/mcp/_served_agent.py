"""An agent served over MCP by ``agent_sync.mcp.serve``, for the tests of serving.

    python _served_agent.py stdio|stdio-factory|http [PORT]

The agent's model is a :class:`~agent_sync.testing.ScriptedModel` chosen by the prompt:

* ``hello``: answers :data:`HELLO`, streamed 4 characters a delta;
* ``stall``: streams "..." then goes silent until cancelled;
* ``gated``: calls ``delete(path="/tmp/x")`` (needs approval); after a tool's result,
  the model answers "the tool said: " and the result's text (or the denial's reason);
* ``boom``: the model fails (a ``ModelError``);
* anything else: echoes the prompt.

Over stdio one agent serves every call (one at a time); over HTTP (and ``stdio-factory``)
a factory gives each call its own. The end of each run is logged to stderr
(``TIME served run ... ended: STOP (REASON)``, ``TIME`` the epoch seconds of the record).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

from agent_sync import Agent, tool
from agent_sync.cancel import CancelScope
from agent_sync.errors import ModelError
from agent_sync.messages import StreamEvent
from agent_sync.models.base import ModelRequest
from agent_sync.testing import ScriptedModel

HELLO = "Hello from the served agent."


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    return f"deleted {path}"


def _script(prompt: str) -> ScriptedModel:
    if prompt == "hello":
        return ScriptedModel([{"text": HELLO, "chunk_size": 4}], repeat=True)
    if prompt == "stall":
        return ScriptedModel([{"text": "......", "chunk_size": 3, "stall_after": 1}], repeat=True)
    if prompt == "gated":
        return ScriptedModel(
            [{"tool_calls": [{"name": "delete", "input": {"path": "/tmp/x"}}]}], repeat=True
        )
    if prompt == "boom":
        return ScriptedModel([{"error": ModelError("the model is down")}], repeat=True)
    return ScriptedModel([f"echo: {prompt}"], repeat=True)


class ByPrompt:
    """A model that replays the script the run's first prompt names."""

    def __init__(self) -> None:
        self._scripts: dict[str, ScriptedModel] = {}

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        for block in request.messages[-1]["content"]:
            if "toolResult" in block:  # answer what the tool said (or why it was denied)
                said = [part["text"] for part in block["toolResult"]["content"] if "text" in part]
                answer = ScriptedModel([f"the tool said: {' '.join(said)}"])
                return answer.stream(request, cancel=cancel)
        first: Any = request.messages[-1]
        for message in reversed(request.messages):
            texts = [block["text"] for block in message["content"] if "text" in block]
            if message["role"] == "user" and texts:
                first = texts[-1]
                break
        prompt = str(first)
        if prompt not in self._scripts:
            self._scripts[prompt] = _script(prompt)
        return self._scripts[prompt].stream(request, cancel=cancel)


def make_agent() -> Agent:
    return Agent(ByPrompt(), tools=[delete])


def main(argv: list[str]) -> None:
    # the time (epoch seconds) first: bench/bench_mcp_serve.py times a cancel with it
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(created).6f %(message)s"
    )
    logging.getLogger("agent_sync.mcp").setLevel(logging.DEBUG)
    from agent_sync.mcp import serve

    if argv[0] == "stdio":
        serve(make_agent(), name="helper", description="A scripted helper.")
    elif argv[0] == "stdio-factory":
        serve(make_agent, name="helper")
    else:
        serve(make_agent, name="helper", transport="http", port=int(argv[1]))
    logging.getLogger("served").warning("served: stopped")


if __name__ == "__main__":
    main(sys.argv[1:])
