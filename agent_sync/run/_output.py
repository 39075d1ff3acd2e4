"""The output step of a structured run (``output_type``): read the model's answer, validate
it, re-ask with the problems or end the run with ``result.output``.

After each model call of a run with an output type the loop comes here (``model ->
output``). The answer is the output tool's input when the model called it (Anthropic,
Bedrock, an OpenAI-compatible server without ``response_format``), else the message's text
(``response_format``, or any model that answers in text)::

    output ──(the agent's tools called, no output tool)──> tools
      ├──(valid)──> finish                       result.output set
      ├──(invalid, re-asks left)──> model        the problems go back to the model
      └──(invalid, none left)──> OutputValidationError

History rule: the output tool's ``toolUse`` is always answered (success, or an error result
carrying the problems; other calls of that turn are answered "not run"), and a valid answer
through the tool is closed by an assistant message holding the output as JSON, so the
history ends with an assistant message and is valid for every provider, whichever mechanism
was used. A text answer that fails gets a user message with the problems. When the re-asks
run out, the turn is closed with an assistant message saying so before the error is raised.

Partial output (:class:`PartialTracker`): while a model call streams, the text or the
output tool's input is fed to an incremental parser; a :class:`~agent_sync.events.PartialOutput`
is emitted only when the value so far changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from .._history import tool_result_message
from .._run_state import Step, StepName
from ..errors import OutputValidationError
from ..events import AgentEvent, MessageComplete, PartialOutput
from ..messages import Message, StreamEvent, ToolResult
from ..models.base import OutputSchema
from ..output._partial import PartialJSON
from ..output._spec import OutputProblems, OutputSpec
from ..result import TEXT_OUTPUT
from ..tools._results import error_result

if TYPE_CHECKING:
    from ._context import RunContext

__all__ = [
    "NO_OUTPUT",
    "PartialTracker",
    "output_request",
    "output_step",
    "partial_tracker",
    "result_output",
]

logger = logging.getLogger(__name__)


class _NoOutput:
    def __repr__(self) -> str:
        return "NO_OUTPUT"


NO_OUTPUT: Any = _NoOutput()
"""``ctx.output`` before a valid answer."""

RECEIVED_TEXT = "Final result received."
NOT_RUN_TEXT = "Not run: the final answer was given in the same turn."
_REASK = (
    "Your answer does not match the required output ({label}):\n{problems}\n"
    "Answer again, with the whole answer corrected."
)


def output_request(ctx: RunContext) -> OutputSchema | None:
    """What the next model request asks for (``None``: free text)."""
    spec = ctx.settings.output
    if spec is None:
        return None
    return OutputSchema(name=spec.name, description=spec.description, schema=spec.schema)


def output_step(ctx: RunContext) -> Generator[AgentEvent, None, StepName | None]:
    """Read the answer of the model call just made (see the module docstring)."""
    spec = ctx.settings.output
    assistant = ctx.messages[-1]
    uses = [block["toolUse"] for block in assistant["content"] if "toolUse" in block]
    ours = [use for use in uses if spec is not None and use["name"] == spec.name]
    if spec is None or not ours:
        if uses:
            return "tools"  # the agent's own tools first; the answer comes later
        ctx.add_step(Step(cycle=ctx.cycle, message=assistant, tool_results=()))
        if spec is None:  # a state stored by a run with an output type, resumed without
            return "finish"
        text = "".join(block["text"] for block in assistant["content"] if "text" in block)
        try:
            ctx.keep_output(spec.parse_text(text))
        except OutputProblems as failed:
            return (yield from _reask_in_text(ctx, spec, failed))
        return "finish"
    use = ours[0]
    raw: object = use["input"]
    invalid = ctx.invalid_tool_inputs.get(use["toolUseId"])
    problems: OutputProblems | None = None
    try:
        if invalid is not None:
            raise OutputProblems([invalid], raw)
        output = spec.validate(raw)
    except OutputProblems as exc:
        problems = exc
    results: list[ToolResult] = []
    for other in uses:
        if other is use:
            if problems is None:
                results.append(_success(use["toolUseId"]))
            else:
                results.append(error_result(use["toolUseId"], _reask_text(spec, problems)))
        else:
            results.append(error_result(other["toolUseId"], NOT_RUN_TEXT))
    answered = tool_result_message(results)
    ctx.messages.append(answered)
    ctx.add_step(Step(cycle=ctx.cycle, message=assistant, tool_results=tuple(results)))
    yield MessageComplete(message=answered, run_id=ctx.run_id)
    if problems is not None:
        return _retry_or_fail(ctx, spec, problems)
    # the closing message ends the turn, not the tool call
    ctx.keep_output(output, stop_reason="end_turn")
    # the answer's JSON as it streamed, where it is the value's as is: not encoded again
    as_streamed = ctx.tool_input_texts.get(use["toolUseId"])
    closing: Message = {"role": "assistant", "content": [{"text": as_streamed or _as_text(raw)}]}
    ctx.messages.append(closing)
    yield MessageComplete(message=closing, run_id=ctx.run_id)
    return "finish"


def _reask_in_text(
    ctx: RunContext, spec: OutputSpec, problems: OutputProblems
) -> Generator[AgentEvent, None, StepName | None]:
    """A text answer failed: the problems go back as a user message, if re-asks are left
    (else the history ends with the model's answer, valid as it is)."""
    if ctx.output_attempts >= ctx.settings.output_retries:
        raise OutputValidationError(problems.problems, problems.raw)
    message: Message = {"role": "user", "content": [{"text": _reask_text(spec, problems)}]}
    ctx.messages.append(message)
    yield MessageComplete(message=message, run_id=ctx.run_id)
    return _reask(ctx, problems)


def _retry_or_fail(ctx: RunContext, spec: OutputSpec, problems: OutputProblems) -> StepName:
    """The output tool's answer failed (its error result holds the problems): re-ask, or
    close the turn and raise when no re-ask is left."""
    if ctx.output_attempts >= ctx.settings.output_retries:
        text = f"Stopped: no valid {spec.label} after {ctx.output_attempts + 1} answers."
        ctx.messages.append({"role": "assistant", "content": [{"text": text}]})
        raise OutputValidationError(problems.problems, problems.raw)
    return _reask(ctx, problems)


def _reask(ctx: RunContext, problems: OutputProblems) -> StepName:
    attempts = ctx.reask()
    logger.debug(
        "run_id=<%s>, attempt=<%d>, problems=<%d> | output invalid; re-asking",
        ctx.run_id,
        attempts,
        len(problems.problems),
    )
    return "model"


def _reask_text(spec: OutputSpec, problems: OutputProblems) -> str:
    lines = "\n".join(f"- {problem}" for problem in problems.problems)
    return _REASK.format(label=spec.label, problems=lines)


def _success(tool_use_id: str) -> ToolResult:
    return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": RECEIVED_TEXT}]}


def _as_text(raw: object) -> str:
    return json.dumps(raw, ensure_ascii=False)


def result_output(ctx: RunContext) -> Any:
    """What ``result.output`` holds at the end: the output; ``None`` for a run with an
    output type that gave none (cancelled, cycle limit); for a run without one,
    ``TEXT_OUTPUT`` (the result's text)."""
    if ctx.output is not NO_OUTPUT:
        return ctx.output
    return None if ctx.settings.output is not None else TEXT_OUTPUT


class PartialTracker:
    """Feeds one model call's stream to a :class:`PartialJSON` and says when the value so
    far changed. One per model call; cost per event grows with its delta only.

    The answer is the output tool's input once the model starts that tool (text before it
    is the model thinking aloud), else the text.
    """

    __slots__ = ("_index", "_name", "_on_tool", "_parser", "_run_id", "_wrapped")

    def __init__(self, spec: OutputSpec, run_id: str) -> None:
        self._name = spec.name
        self._wrapped = spec.wrapped
        self._run_id = run_id
        self._parser = PartialJSON()
        self._index: int | None = None  # the content block the answer streams in
        self._on_tool = False

    def feed(self, event: StreamEvent) -> PartialOutput | None:
        """The partial output event ``event`` makes, if it shows something new."""
        delta_event = event.get("contentBlockDelta")
        if delta_event is None:
            start = event.get("contentBlockStart")
            if start is not None and not self._on_tool:
                tool = start["start"].get("toolUse")
                if tool is not None and tool.get("name") == self._name:
                    self._index, self._on_tool = start["contentBlockIndex"], True
                    self._parser = PartialJSON()
            return None
        index = delta_event["contentBlockIndex"]
        delta = delta_event["delta"]
        piece: str | None
        if self._on_tool:
            tool_delta = delta.get("toolUse")
            if tool_delta is None or index != self._index:
                return None
            piece = tool_delta.get("input", "")
        else:
            piece = delta.get("text")
            if piece is None:
                return None
            if self._index is None:
                self._index = index
            elif index != self._index:
                return None
        if not self._parser.feed(piece):
            return None
        partial = self._parser.snapshot()
        if self._wrapped:
            if not isinstance(partial, dict) or "result" not in partial:
                return None
            partial = partial["result"]
        return PartialOutput(partial=partial, run_id=self._run_id)


def partial_tracker(ctx: RunContext) -> PartialTracker | None:
    """A tracker for the next model call, when the run streams and has an output type."""
    spec = ctx.settings.output
    if spec is None or not ctx.emit_deltas:
        return None
    return PartialTracker(spec, ctx.run_id)
