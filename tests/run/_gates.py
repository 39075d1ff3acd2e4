"""Doubles for the run tests: a model that pauses mid-stream and tools that wait for the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from agent_sync import ToolContext, tool
from agent_sync.cancel import CancelScope
from agent_sync.messages import StreamEvent
from agent_sync.models.base import Model, ModelRequest


class PausingModel:
    """Relays ``inner``; on call number ``pause_on_call`` (1-based), after its first content
    event, sets ``paused`` and waits (cancellably) for ``resume``."""

    def __init__(self, inner: Model, pause_on_call: int = 1) -> None:
        self.inner = inner
        self.pause_on_call = pause_on_call
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.calls = 0

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        self.calls += 1
        number = self.calls
        for event in self.inner.stream(request, cancel=cancel):
            yield event
            if number == self.pause_on_call and "contentBlockDelta" in event:
                if not self.paused.is_set():
                    unregister = cancel.register_abort(self.resume.set)  # cancel wakes us
                    self.paused.set()
                    self.resume.wait(30)
                    unregister()
                    if cancel.cancelled:
                        return


class Gate:
    """A tool ``wait_for_gate`` that signals ``entered`` and returns once ``opened`` (or,
    if ``cooperative``, once its run is cancelled)."""

    def __init__(self, *, cooperative: bool = True) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.calls = 0
        gate = self

        @tool
        def wait_for_gate(context: ToolContext[object]) -> str:
            """Wait until the test opens the gate."""
            gate.calls += 1
            gate.entered.set()
            # polls the cancel flag between bounded waits: a cooperative tool's usual shape
            while not gate.opened.wait(0.02):
                if cooperative and context.cancelled:
                    return "gave up"
            return "gate result"

        self.tool = wait_for_gate


def gate_call() -> dict[str, object]:
    return {"name": "wait_for_gate", "input": {}}
