"""``FallbackModel``: a chain of models, each tried when the one before fails before its
answer began.

Design. :meth:`FallbackModel.stream` opens the first model's stream and reads it up to its
first content event (:mod:`agent_sync.models._answer`: the first ``contentBlockStart`` or
``contentBlockDelta``; ``messageStart`` and ``metadata`` are not content). Those events are
held back: if the model raises a :class:`~agent_sync.errors.ModelError` before content,
they are dropped, the stream is closed (its connection released, its abort callback
unregistered) and the next model is called at once, with the same request and the same
cancel scope. The first model whose content arrives is the one that answers: its held
events are yielded (its ``messageStart`` carrying ``modelId``) and then the rest of its
stream, as it comes. An error after that point is raised as it is: nothing was shown
twice, and nothing is tried again here. The stream the chain returns names that model
(``answering``, :func:`~agent_sync.models._answer.answering_model`), so a trace of the call
describes the model that gave the answer, not the primary.

Retries are not the chain's business: the run's single retry policy (``Agent(retry=)``)
sees the chain as one model. When every model fails, the last one's error is raised with
the others in its ``fallback_errors``; the policy retries the whole chain (from the first
model) if that error is retryable.

Cancel: every model gets the run's :class:`~agent_sync.cancel.CancelScope`, so a cancel
reaches whichever is active (its abort callback wakes its socket). Between two models the
scope is checked: after a cancel, the next model is never called. A cancel that lands just
after the check is still seen: the next model registers its abort callback before it sends
anything, and a callback registered on a cancelled scope runs at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ..cancel import CancelledError, CancelScope
from ..errors import ModelError, ModelStreamError, UsageError
from ..messages import StreamEvent
from ._answer import answered_by, answering_model, model_label, read_until_content
from .base import Model, ModelRequest

__all__ = ["FallbackModel"]

logger = logging.getLogger(__name__)


class FallbackModel:
    """Try ``primary``, then each fallback in order, until one answers.

    A model is left for the next one when it raises a
    :class:`~agent_sync.errors.ModelError` before its first content event (its first text,
    reasoning or tool-call piece): throttled (429), overloaded (529, 503), any other 5xx,
    a connection failure, an authentication or permission failure (401, 403), a model
    the provider does not know (404), a context overflow (the next model may have a larger
    window) and a 400 too, since providers refuse different things (a document type, a
    schema keyword, a parameter) and the next one may accept what this one refused; a
    request every model refuses costs one quick refused call each. The switch is
    immediate: no back-off, no retry of the failed model here.

    Never a reason to switch: a :class:`~agent_sync.errors.UsageError` (the calling code's
    mistake, e.g. a parameter the wire does not have: the same mistake every time,
    better raised than hidden behind a fallback that would then answer every call), any
    exception that is not a ``ModelError``, an error after content began (raised as it
    is: nothing is emitted twice) and a cancel. ``fallback_on`` narrows the rule.

    When every model fails, the last model's error is raised; the earlier ones are in its
    :attr:`~agent_sync.errors.ModelError.fallback_errors`, in order (an error after content
    carries the failures before it the same way). The agent's ``retry=`` policy applies to
    the chain as a whole: it retries the chain, from ``primary``, when that last error is
    retryable, waiting as that error asks (``retry_after``).

    ``result.metrics.model_ids`` lists, per model call, the id of the model that answered
    (the stream's ``messageStart`` carries it as ``modelId``).

    Structured output, tools and prompt caching work as with each model alone: every model
    gets the same :class:`~agent_sync.models.ModelRequest` and uses its own wire's
    mechanism. The chain holds no state of its own: one may be shared by many agents in
    many threads (as far as its models may).

    Args:
        primary: The model tried first.
        *fallbacks: The models tried next, in order.
        fallback_on: Which ``ModelError`` moves to the next model (default: every one).
            Called before the switch; ``False`` raises the error at once.

    Raises:
        UsageError: If a model has no ``stream`` method, or ``fallback_on`` is not callable.
    """

    def __init__(
        self,
        primary: Model,
        *fallbacks: Model,
        fallback_on: Callable[[ModelError], bool] | None = None,
    ) -> None:
        models: tuple[Model, ...] = (primary, *fallbacks)
        for position, model in enumerate(models):
            if not callable(getattr(model, "stream", None)):
                raise UsageError(
                    f"FallbackModel: model {position} ({type(model).__name__}) is not a model: "
                    "it has no stream(request, *, cancel) method"
                )
        if fallback_on is not None and not callable(fallback_on):
            raise UsageError("FallbackModel: fallback_on must be callable")
        self.models = models
        self._fallback_on = fallback_on

    @property
    def model_id(self) -> str:
        """The id of the model each call asks first (the primary's). The model that
        answered a call is on its ``messageStop`` (``responseModel``), in
        ``result.metrics.model_ids``, and what the call's trace describes."""
        return model_label(self.models[0])

    @property
    def endpoint(self) -> str | None:
        """Where each call is sent first: the primary's ``endpoint``, ``None`` if it has
        none (a call's trace names the server of the model that answered)."""
        endpoint = getattr(self.models[0], "endpoint", None)
        return endpoint if isinstance(endpoint, str) and endpoint else None

    def __repr__(self) -> str:
        # each model's repr keeps its own secrets out (their contract); nothing else is shown
        return f"FallbackModel({', '.join(repr(model) for model in self.models)})"

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Stream the answer of the first model that answers (see the class docstring).

        Args:
            request: Sent to each model as it is.
            cancel: The run's cancel scope, given to each model.

        Raises:
            agent_sync.errors.ModelError: The last model's error when every model failed
                (``fallback_errors``: the others), or an error raised after content began.
            agent_sync.cancel.CancelledError: Cancelled between two models.
        """
        return _ChainStream(functools.partial(self._answer, request, cancel))

    def _answer(
        self, request: ModelRequest, cancel: CancelScope, chain: _ChainStream
    ) -> Generator[StreamEvent, None, None]:
        failed: list[ModelError] = []
        for position, model in enumerate(self.models):
            if failed and cancel.cancelled:  # never start the next model after a cancel
                raise CancelledError(cancel.reason or "cancelled") from failed[-1]
            stream: Iterator[StreamEvent] | None = None
            try:
                stream = iter(model.stream(request, cancel=cancel))
                head = read_until_content(stream)
                if answered_by(head, model) is None:  # ended before its answer began
                    cancel.raise_if_cancelled()  # a model may just stop after an abort
                    raise ModelStreamError(
                        "the model stream ended before its answer began",
                        provider=model_label(model),
                    )
            except ModelError as error:
                _close(stream)
                _attach(error, failed)
                if position == len(self.models) - 1 or not self._falls_back(error, cancel):
                    raise
                failed.append(error)
                logger.info(
                    "model=<%s>, error=<%s: %s> | falling back to model=<%s>",
                    model_label(model),
                    type(error).__name__,
                    error,
                    model_label(self.models[position + 1]),
                )
                continue
            except BaseException:
                _close(stream)
                raise
            chain.answering = answering_model(stream, model)
            try:
                label = model_label(model)
                for event in _marked(head, label):
                    yield _answered(event, label) if "messageStop" in event else event
                for event in stream:
                    yield _answered(event, label) if "messageStop" in event else event
            except ModelError as error:
                _attach(error, failed)
                raise
            finally:
                _close(stream)
            return

    def _falls_back(self, error: ModelError, cancel: CancelScope) -> bool:
        if cancel.cancelled:  # whatever a model raised after an abort is the cancel's
            return False
        return self._fallback_on is None or bool(self._fallback_on(error))


class _ChainStream(Iterator[StreamEvent]):
    """A chain's stream: the answering model's events, and that model (``answering``: set
    when its answer began; a chain inside a chain names its own member)."""

    __slots__ = ("answering", "events")

    def __init__(self, answer: Callable[[_ChainStream], Generator[StreamEvent, None, None]]):
        self.answering: object | None = None
        self.events = answer(self)

    def __next__(self) -> StreamEvent:
        return next(self.events)

    def close(self) -> None:
        self.events.close()


def _marked(head: list[StreamEvent], model_id: str) -> list[StreamEvent]:
    """``head`` with ``modelId`` on its ``messageStart`` (one is added if the model sent
    none); an id already there (a chain inside a chain) is kept."""
    marked: list[StreamEvent] = []
    started = False
    for event in head:
        start = event.get("messageStart")
        if start is not None and not started:
            started = True
            event = {"messageStart": {**start, "modelId": start.get("modelId") or model_id}}
        marked.append(event)
    if not started:
        marked.insert(0, {"messageStart": {"role": "assistant", "modelId": model_id}})
    return marked


def _answered(event: StreamEvent, model_id: str) -> StreamEvent:
    """A ``messageStop`` naming the model that answered (``responseModel``) when its wire
    gave none (Bedrock's, a scripted model's); a wire's own, more precise one is kept."""
    stop = event["messageStop"]
    if stop.get("responseModel"):
        return event
    return {"messageStop": {**stop, "responseModel": model_id}}


def _attach(error: ModelError, failed: list[ModelError]) -> None:
    """Give ``error`` the errors of the models tried before it."""
    if failed:
        error.fallback_errors = tuple(other for other in failed if other is not error)


def _close(stream: Iterator[Any] | None) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()
