"""The OpenAI Responses API's stream events as Converse stream events: :class:`EventTranslator`.

The request side is :mod:`._responses_format`. Each output item becomes a Converse block:

* ``message``: a text block of its ``response.output_text.delta`` (and refusal) deltas;
* ``function_call``: a ``toolUse`` block, started at ``response.output_item.added``
  (``toolUseId`` is the ``call_id``), its input streamed from
  ``response.function_call_arguments.delta``, closed at ``response.output_item.done``;
* ``reasoning``: a reasoning block of its summary (and raw reasoning text) deltas, whose
  signature (:func:`._responses_format.reasoning_signature`) is sent when the *next* item
  starts, since it names that item: the API wants it back together with the reasoning.
  Until then the block is unfinished, so a cancel in between drops it (section 3).

An item whose ``done`` event carries content that no delta streamed (a server that sends
whole items, or a ``200 application/json`` answer: :func:`response_as_events`) gives that
content at once. ``response.completed`` ends the message (``tool_use`` when it called
tools, else ``end_turn``), ``response.incomplete`` with its reason (``max_output_tokens``
-> ``max_tokens``, ``content_filter`` -> ``content_filtered``); ``response.failed`` and
``error`` events raise the mapped error. Usage comes from the final response.

Boundary rule: an event the translator cannot read raises
:class:`~agent_sync.errors.ModelStreamError`, never a raw ``KeyError``.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ModelStreamError
from ..messages import StreamEvent, Usage
from ._openai_errors import PROVIDER, stream_error
from ._response import message_stop
from ._responses_format import reasoning_signature
from ._wire import MALFORMED as _MALFORMED

__all__ = ["EventTranslator", "converse_usage", "response_as_events"]

_INCOMPLETE_REASONS = {"max_output_tokens": "max_tokens", "content_filter": "content_filtered"}
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def converse_usage(usage: dict[str, Any]) -> Usage:
    """Responses ``usage`` -> Converse usage.

    ``inputTokens`` is ``input_tokens``, which includes cached tokens (OpenAI's meaning);
    ``outputTokens`` includes the reasoning tokens, also reported as ``reasoningTokens``.
    ``cached_tokens`` becomes ``cacheReadInputTokens`` and ``cache_write_tokens``
    ``cacheWriteInputTokens``, each only when reported.
    """
    prompt = int(usage.get("input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    total = int(usage.get("total_tokens") or prompt + completion)
    converse: Usage = {"inputTokens": prompt, "outputTokens": completion, "totalTokens": total}
    details = usage.get("input_tokens_details")
    if isinstance(details, dict):
        if details.get("cached_tokens") is not None:
            converse["cacheReadInputTokens"] = int(details["cached_tokens"])
        if details.get("cache_write_tokens"):
            converse["cacheWriteInputTokens"] = int(details["cache_write_tokens"])
    output_details = usage.get("output_tokens_details")
    if isinstance(output_details, dict) and output_details.get("reasoning_tokens") is not None:
        converse["reasoningTokens"] = int(output_details["reasoning_tokens"])
    return converse


def response_as_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole ``response`` object (a JSON answer to a stream request) as the stream events
    that would have carried it: each output item added and done, then the terminal event.

    Raises:
        ModelStreamError: ``response`` has no readable ``output``.
    """
    try:
        events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
        for index, item in enumerate(response.get("output") or ()):
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": item})  # fmt: skip
            events.append({"type": "response.output_item.done", "output_index": index,
                           "item": item})  # fmt: skip
        status = response.get("status") or "completed"
        events.append({"type": f"response.{status}", "response": response})
    except _MALFORMED as exc:
        raise _malformed(exc, "JSON answer") from exc
    return events


def _malformed(exc: BaseException, what: str = "stream event") -> ModelStreamError:
    return ModelStreamError(
        f"malformed {what} from the Responses API: {type(exc).__name__}: {exc}"[:500],
        provider=PROVIDER,
    )


def _delta(index: int | None, delta: dict[str, Any]) -> StreamEvent:
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}  # type: ignore[typeddict-item]


def _string(value: Any, what: str) -> str:
    if type(value) is not str:  # noqa: E721 (exact and fast)
        raise TypeError(f"{what} is {type(value).__name__}, not a string")
    return value


class _Item:
    """One output item's Converse block."""

    __slots__ = ("block", "kind", "streamed", "summary_index")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.block: int | None = None  # the Converse block index, once opened
        self.streamed = False  # a delta carried content (the done item need not)
        self.summary_index = 0


class EventTranslator:
    """Turns one response's stream events into Converse stream events.

    Not thread-safe: one per response. Feed every event (the parsed ``data`` of each SSE
    event) to :meth:`add`, then call :meth:`finish` once the stream ends.

    Attributes:
        finished: Whether a terminal event (``response.completed``/``incomplete``) was seen.
    """

    __slots__ = ("_called", "_items", "_next_index", "_pending", "_response", "_started",
                 "_stop", "_usage", "_wire_stop", "finished")  # fmt: skip

    def __init__(self) -> None:
        self._started = False
        self._next_index = 0
        self._items: dict[int, _Item] = {}
        self._pending: tuple[int, dict[str, Any]] | None = None  # reasoning awaiting its next
        self._called = False
        self._stop: str | None = None
        self._wire_stop: str | None = None  # "completed", or why it is incomplete
        self._response: dict[str, Any] = {}  # the terminal response: its id and model
        self._usage: dict[str, Any] | None = None
        self.finished = False

    def add(self, event: dict[str, Any]) -> list[StreamEvent]:
        """Events for one stream event (usually one; none for bookkeeping events).

        Raises:
            ModelStreamError: The event cannot be read.
            ModelError: The event reports a failure (``error``, ``response.failed``).
        """
        try:
            return self._add(event)
        except _MALFORMED as exc:
            raise _malformed(exc) from exc

    def finish(self) -> list[StreamEvent]:
        """Events that close the message (stop, usage) once the stream has ended."""
        try:
            out: list[StreamEvent] = []
            self._start(out)
            self._flush_reasoning(out, None)
            self._close_all(out)
            reason = self._stop or "end_turn"
            if self._called and reason == "end_turn":
                reason = "tool_use"
            response = self._response
            out.append(
                message_stop(
                    reason,
                    provider_reason=self._wire_stop,
                    response_id=response.get("id"),
                    response_model=response.get("model"),
                )
            )
            if self._usage is not None:
                out.append({"metadata": {"usage": converse_usage(self._usage)}})
            return out
        except _MALFORMED as exc:
            raise _malformed(exc) from exc

    # -- internals --

    def _start(self, out: list[StreamEvent]) -> None:
        if not self._started:
            self._started = True
            out.append({"messageStart": {"role": "assistant"}})

    def _add(self, event: dict[str, Any]) -> list[StreamEvent]:
        # A list, not a generator: this runs once per event on the hot path.
        out: list[StreamEvent] = []
        if not self._started:
            self._start(out)
        kind = event["type"]
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            item = self._items.get(event["output_index"])
            if item is None:  # a server that skipped output_item.added: a message it is
                item = self._items[event["output_index"]] = _Item("message")
            self._text(out, item, _string(event["delta"], "text delta"))
        elif kind == "response.function_call_arguments.delta":
            item = self._items[event["output_index"]]
            item.streamed = True
            piece = _string(event["delta"], "arguments delta")
            if piece:
                out.append(_delta(item.block, {"toolUse": {"input": piece}}))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._reasoning_delta(out, event)
        elif kind == "response.output_item.added":
            self._item_added(out, event["output_index"], event["item"])
        elif kind == "response.output_item.done":
            self._item_done(out, event["output_index"], event["item"])
        elif kind in _TERMINAL:
            self._terminal(kind, event["response"])
        elif kind == "error":
            raise stream_error(event.get("error") or event)
        # Everything else (created, in_progress, content_part.*, *.done duplicates of the
        # deltas, annotations) carries nothing the Converse message needs.
        return out

    def _text(self, out: list[StreamEvent], item: _Item, piece: str) -> None:
        item.streamed = True
        if not piece:
            return
        if item.block is None:
            item.block = self._open()
        out.append(_delta(item.block, {"text": piece}))

    def _reasoning_delta(self, out: list[StreamEvent], event: dict[str, Any]) -> None:
        item = self._items[event["output_index"]]
        piece = _string(event["delta"], "reasoning delta")
        summary_index = event.get("summary_index", item.summary_index)
        if item.streamed and summary_index != item.summary_index:
            piece = "\n\n" + piece  # a new summary part: keep the parts apart in the text
        item.summary_index = summary_index
        item.streamed = True
        if not piece:
            return
        if item.block is None:
            item.block = self._open()
        out.append(_delta(item.block, {"reasoningContent": {"text": piece}}))

    def _open(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index

    def _item_added(self, out: list[StreamEvent], position: int, item: dict[str, Any]) -> None:
        self._flush_reasoning(out, item)
        kind = item["type"]
        state = self._items[position] = _Item(kind)
        if kind == "function_call":
            self._called = True
            state.block = self._open()
            out.append(
                {
                    "contentBlockStart": {
                        "contentBlockIndex": state.block,
                        "start": {
                            "toolUse": {
                                "toolUseId": _string(item["call_id"], "call_id"),
                                "name": _string(item["name"], "function name"),
                            }
                        },
                    }
                }
            )

    def _item_done(self, out: list[StreamEvent], position: int, item: dict[str, Any]) -> None:
        state = self._items.get(position)
        if state is None:  # a done without its added: take it as both
            self._item_added(out, position, item)
            state = self._items[position]
        if state.kind == "message":
            if not state.streamed:
                for part in item.get("content") or ():
                    text = part.get("text") if part.get("type") == "output_text" else None
                    text = part.get("refusal") if part.get("type") == "refusal" else text
                    if text:
                        self._text(out, state, _string(text, "output text"))
            self._close(out, state)
        elif state.kind == "function_call":
            if not state.streamed and item.get("arguments"):
                arguments = item["arguments"]
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                out.append(_delta(state.block, {"toolUse": {"input": arguments}}))
            self._close(out, state)
        elif state.kind == "reasoning":
            if state.block is None:
                state.block = self._open()
                summary = "\n\n".join(part.get("text", "") for part in item.get("summary") or ())
                if summary and not state.streamed:
                    out.append(_delta(state.block, {"reasoningContent": {"text": summary}}))
            self._pending = (state.block, item)
            state.block = None  # closed by _flush_reasoning, once its follower is known
        # other items (web search, file search...) are the server's own: nothing to keep

    def _flush_reasoning(self, out: list[StreamEvent], follower: dict[str, Any] | None) -> None:
        if self._pending is None:
            return
        block, item = self._pending
        self._pending = None
        signature = reasoning_signature(item, follower)
        out.append(_delta(block, {"reasoningContent": {"signature": signature}}))
        out.append({"contentBlockStop": {"contentBlockIndex": block}})

    def _close(self, out: list[StreamEvent], state: _Item) -> None:
        if state.block is not None:
            out.append({"contentBlockStop": {"contentBlockIndex": state.block}})
            state.block = None

    def _close_all(self, out: list[StreamEvent]) -> None:
        for state in self._items.values():
            if state.kind != "reasoning":  # an unfinished reasoning item is not kept
                self._close(out, state)

    def _terminal(self, kind: str, response: dict[str, Any]) -> None:
        if kind == "response.failed":
            raise stream_error(response.get("error") or {"message": "the response failed"})
        self.finished = True
        self._response = response
        self._wire_stop = "completed"
        usage = response.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        if kind == "response.incomplete":
            details = response.get("incomplete_details") or {}
            reason = str(details.get("reason") or "max_output_tokens")
            self._wire_stop = reason
            self._stop = _INCOMPLETE_REASONS.get(reason, reason)
