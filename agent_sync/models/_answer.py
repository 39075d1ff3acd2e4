"""Where a model's answer begins, and which model gave it: the rules the run's model step
and :class:`~agent_sync.models.FallbackModel` share, so both draw the same line.

A stream's **first content event** is its first ``contentBlockStart`` or
``contentBlockDelta`` (text, tool input or reasoning). ``messageStart`` is not content (it
says nothing the caller could see), nor is ``metadata``. Before that event nothing has been
shown to anyone, so an error may still be retried (the step) or handed to the next model
(the fallback); from it on, the answer has begun and an error is raised as it is.

A stream says which model answered with ``modelId`` on its ``messageStart`` (a fallback
chain sets it to the inner model's id); without one, the model called answered, and its id
is :func:`model_label`. A stream that delegates to another model's (a chain's) also names
that model itself, as its ``answering`` attribute once the answer began
(:func:`answering_model`): what a call's trace describes (its provider, its server).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..messages import StreamEvent

__all__ = ["answered_by", "answering_model", "is_content", "model_label", "read_until_content"]


def is_content(event: StreamEvent) -> bool:
    """Whether ``event`` is content: a ``contentBlockStart`` or a ``contentBlockDelta``."""
    return "contentBlockDelta" in event or "contentBlockStart" in event


def read_until_content(stream: Iterator[StreamEvent]) -> list[StreamEvent]:
    """The events up to and including the first content event (or all, if none comes)."""
    head: list[StreamEvent] = []
    for event in stream:
        head.append(event)
        if is_content(event):
            break
    return head


def model_label(model: object) -> str:
    """A model's id: its ``model_id`` when that is a non-empty ``str``, else its class name."""
    model_id = getattr(model, "model_id", None)
    return model_id if isinstance(model_id, str) and model_id else type(model).__name__


def answered_by(head: Sequence[StreamEvent], model: object) -> str | None:
    """The id of the model that answered, from a stream's head (:func:`read_until_content`),
    or ``None`` if it did not answer: no content and no ``messageStop`` (a stream a cancel
    cut short before its answer began)."""
    if not any(is_content(event) or "messageStop" in event for event in head):
        return None
    for event in head:
        start = event.get("messageStart")
        if start is not None:
            model_id = start.get("modelId")
            if isinstance(model_id, str) and model_id:
                return model_id
    return model_label(model)


def answering_model(stream: object, model: object) -> object:
    """The model whose answer ``stream`` (``model``'s, its head read) carries: the one it
    names as ``answering`` (a chain's stream: the member that answered, at any depth),
    else ``model``."""
    answering = getattr(stream, "answering", None)
    return model if answering is None else answering
