"""``ScriptedModel``: an offline, deterministic model for tests, demos and benchmarks.

It replays one scripted assistant turn per model call through the same stream-event path
as the real providers, and blocks the way a real socket does: its delays and stalls wait
on an event that the invocation's abort callback sets (the mechanism providers use to shut
a socket down), so cancel latency measured on it is the loop's own.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

from ..cancel import CancelScope
from ..errors import ModelConnectionError, ModelError, UsageError
from ..messages import OPTIONAL_USAGE_KEYS, StreamEvent, Usage
from ..models.base import ModelRequest

__all__ = ["ScriptedModel", "ScriptedTurn", "TurnSpec"]

TurnSpec = Union[str, Mapping[str, Any], "ScriptedTurn"]


@dataclass(frozen=True, kw_only=True)
class ScriptedTurn:
    """One scripted assistant turn.

    Delta counts (``stall_after``, ``error_after``) count text and tool-input deltas.

    Attributes:
        text: The assistant's text, streamed ``chunk_size`` characters per delta.
        tool_calls: ``[{"name": ..., "input": {...}}]``; an ``"id"`` key is optional.
            ``"raw_input"`` (a string) sends that exact text as the input JSON.
        reasoning: Reasoning text streamed before the answer (with a fake signature).
        chunk_size: Characters per delta.
        chunk_delay: Seconds between deltas (interruptible by cancel).
        stall_after: After that many deltas, block like a silent socket until cancelled
            (``0``: before the response starts, like headers that never come).
        error: An exception instance to raise during the turn, e.g.
            ``ModelThrottledError("slow down")``.
        error_after: Deltas streamed before ``error`` is raised (default 0: before content,
            so a retryable error is retried).
        stop_reason: Reported stop reason (default ``"tool_use"`` with tool calls, else
            ``"end_turn"``).
        usage: Reported ``inputTokens``/``outputTokens`` and, if given, ``cacheReadInputTokens``/
            ``cacheWriteInputTokens`` (default: a size-based estimate).
    """

    text: str = ""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    reasoning: str | None = None
    chunk_size: int = 8
    chunk_delay: float = 0.0
    stall_after: int | None = None
    error: BaseException | None = None
    error_after: int = 0
    stop_reason: str | None = None
    usage: Mapping[str, int] | None = field(default=None)

    @classmethod
    def of(cls, spec: TurnSpec) -> ScriptedTurn:
        """Build a turn from a ``str``, a mapping of the attributes, or a turn."""
        if isinstance(spec, ScriptedTurn):
            return spec
        if isinstance(spec, str):
            return cls(text=spec)
        if not isinstance(spec, Mapping):
            raise UsageError(f"a scripted turn is a str or a dict, not {type(spec).__name__}")
        fields = dict(spec)
        unknown = set(fields) - set(cls.__dataclass_fields__)
        if unknown:
            raise UsageError(f"unknown scripted turn keys: {', '.join(sorted(unknown))}")
        fields["tool_calls"] = tuple(fields.get("tool_calls", ()))
        if fields.get("chunk_size", 1) < 1:
            raise UsageError("chunk_size must be at least 1")
        return cls(**fields)


class ScriptedModel:
    """A model that replays scripted turns, one per call. Thread-safe.

    Example::

        model = ScriptedModel([
            {"tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}]},
            "It is 21 degrees in Oslo.",
        ])
        agent = Agent(model, tools=[get_weather])
        agent.invoke("Weather in Oslo?").text  # 'It is 21 degrees in Oslo.'
        model.calls[1].messages[-1]           # the toolResult the agent sent back

    Args:
        turns: The turns, in call order: ``str`` or dicts of :class:`ScriptedTurn` fields.
        repeat: Start again from the first turn when the script is used up (else a call
            past the end raises :class:`~agent_sync.errors.ModelError`).
        model_id: The id ``result.metrics.model_ids`` lists for this model's answers (name
            two scripted models of a :class:`~agent_sync.models.FallbackModel` apart) and
            traces show as the requested model; ``None`` (the default): none, and
            ``model_ids`` lists ``"ScriptedModel"``.

    Attributes:
        model_id: As given.
        calls: Every request received, as :class:`~agent_sync.models.ModelRequest` with a
            deep copy of the messages at call time.
    """

    def __init__(
        self,
        turns: Iterable[TurnSpec],
        *,
        repeat: bool = False,
        model_id: str | None = None,
    ) -> None:
        self.model_id = model_id
        self._turns = [ScriptedTurn.of(t) for t in turns]
        self._repeat = repeat
        self._lock = threading.Lock()
        self._next = 0
        self._ids = itertools.count(1)
        self.calls: list[ModelRequest] = []

    def __repr__(self) -> str:
        return f"ScriptedModel(model_id={self.model_id!r}, turns={len(self._turns)})"

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Replay the next turn as stream events (see :class:`~agent_sync.models.Model`)."""
        with self._lock:
            # every field as sent (cache included), the mutable ones copied
            recorded = replace(
                request,
                messages=copy.deepcopy(list(request.messages)),
                tool_specs=tuple(request.tool_specs),
                params=dict(request.params),
            )
            self.calls.append(recorded)
            index = self._next
            if index >= len(self._turns) and self._repeat and self._turns:
                index = index % len(self._turns)
            self._next += 1
            if index >= len(self._turns):
                raise ModelError(
                    f"ScriptedModel has no turn left "
                    f"({len(self._turns)} scripted, call {self._next})",
                    provider="scripted",
                )
            turn = self._turns[index]
            tool_ids = [
                str(c.get("id") or f"tooluse_{next(self._ids):04d}") for c in turn.tool_calls
            ]
        return self._play(turn, tool_ids, request, cancel)

    def _play(
        self, turn: ScriptedTurn, tool_ids: list[str], request: ModelRequest, cancel: CancelScope
    ) -> Iterator[StreamEvent]:
        woken = threading.Event()
        unregister = cancel.register_abort(woken.set)
        player = _Player(turn, woken)
        try:
            player.pause_before_start()
            yield {"messageStart": {"role": "assistant"}}
            index = 0
            if turn.reasoning:
                for piece in _chunks(turn.reasoning, turn.chunk_size):
                    player.before_delta()
                    yield {
                        "contentBlockDelta": {
                            "contentBlockIndex": index,
                            "delta": {"reasoningContent": {"text": piece}},
                        }
                    }
                yield {
                    "contentBlockDelta": {
                        "contentBlockIndex": index,
                        "delta": {"reasoningContent": {"signature": "scripted-signature"}},
                    }
                }
                yield {"contentBlockStop": {"contentBlockIndex": index}}
                index += 1
            if turn.text:
                for piece in _chunks(turn.text, turn.chunk_size):
                    player.before_delta()
                    yield {
                        "contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": piece}}
                    }
                yield {"contentBlockStop": {"contentBlockIndex": index}}
                index += 1
            for call, tool_use_id in zip(turn.tool_calls, tool_ids, strict=True):
                yield {
                    "contentBlockStart": {
                        "contentBlockIndex": index,
                        "start": {"toolUse": {"toolUseId": tool_use_id, "name": str(call["name"])}},
                    }
                }
                raw = call.get("raw_input")
                raw_input = raw if isinstance(raw, str) else json.dumps(call.get("input", {}))
                for piece in _chunks(raw_input, turn.chunk_size):
                    player.before_delta()
                    yield {
                        "contentBlockDelta": {
                            "contentBlockIndex": index,
                            "delta": {"toolUse": {"input": piece}},
                        }
                    }
                yield {"contentBlockStop": {"contentBlockIndex": index}}
                index += 1
            player.before_end()
            stop_reason = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
            yield {"messageStop": {"stopReason": stop_reason}}
            yield {"metadata": {"usage": _usage(turn, request), "metrics": {"latencyMs": 0}}}
        finally:
            unregister()


class _Player:
    """Plays a turn's timing and faults; every wait wakes on the abort callback."""

    __slots__ = ("_deltas", "_turn", "_woken")

    def __init__(self, turn: ScriptedTurn, woken: threading.Event) -> None:
        self._turn = turn
        self._woken = woken
        self._deltas = 0

    def pause_before_start(self) -> None:
        if self._turn.stall_after == 0:
            self._stall()
        self._maybe_fail()

    def before_delta(self) -> None:
        turn = self._turn
        if self._deltas and turn.stall_after == self._deltas:
            self._stall()
        if self._deltas:
            self._maybe_fail()
        if turn.chunk_delay and self._deltas and self._woken.wait(turn.chunk_delay):
            raise ModelConnectionError("connection aborted", provider="scripted")
        self._deltas += 1

    def before_end(self) -> None:
        turn = self._turn
        if turn.stall_after is not None and turn.stall_after >= self._deltas > 0:
            self._stall()
        if turn.error is not None and turn.error_after >= self._deltas > 0:
            raise turn.error

    def _maybe_fail(self) -> None:
        if self._turn.error is not None and self._turn.error_after == self._deltas:
            raise self._turn.error

    def _stall(self) -> None:
        self._woken.wait()  # like a silent socket: only an abort ends it
        raise ModelConnectionError("connection aborted", provider="scripted")


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(turn: ScriptedTurn, request: ModelRequest) -> Usage:
    if turn.usage is not None:
        inp, out = int(turn.usage.get("inputTokens", 0)), int(turn.usage.get("outputTokens", 0))
    else:
        prompt_chars = sum(len(json.dumps(m["content"], default=str)) for m in request.messages)
        inp = prompt_chars // 4 + 1
        out = (len(turn.text) + len(json.dumps(list(turn.tool_calls), default=str))) // 4 + 1
    usage: Usage = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out}
    for key in OPTIONAL_USAGE_KEYS:
        if turn.usage is not None and key in turn.usage:
            usage[key] = int(turn.usage[key])
    return usage
