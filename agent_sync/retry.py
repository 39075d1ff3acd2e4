"""The one retry policy for model calls, on tenacity, with back-off that wakes on cancel.

Providers never retry on their own (SDK retries are switched off). The loop asks
:meth:`RetryPolicy.attempts` for tenacity attempts and wraps each model call, up to its first
content event, in one. What is retried: :class:`~agent_sync.errors.ModelError` with
``retryable`` true (429, 529/overloaded, 5xx, throttling, connection failures before any
byte of content), while the invocation is not cancelled.

Waiting is split in two on purpose: tenacity decides *whether* and *how long* (stop and
wait strategies), but its ``sleep`` only records the delay; the loop then waits with
``CancelScope.wait`` (an ``Event.wait``), so ``cancel()`` ends a back-off at once, and the
loop can tell the caller about the retry (a ``ModelRetry`` event) before it waits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
)
from tenacity.wait import wait_base

from .cancel import CancelScope
from .errors import ModelError, UsageError

_JITTER = random.Random()
"""The back-off jitter's own generator: a library never draws from the global ``random``
state, which an application (or a property test) may have seeded, from its run threads."""

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How model calls are retried.

    The n-th retry waits ``min(max_delay, initial_delay * 2**(n-1) + uniform(0, jitter))``
    seconds, or the provider's ``retry-after`` if that is longer (still capped at
    ``max_delay``). Every wait ends early when the invocation is cancelled, and no new
    request is sent after a cancel.

    Attributes:
        max_attempts: Model calls per step, the first included (1 disables retries).
        initial_delay: Seconds before the first retry.
        max_delay: Upper bound of any single wait, ``retry-after`` included.
        jitter: Up to this many random seconds added to each wait.
    """

    max_attempts: int = 6
    initial_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UsageError("RetryPolicy.max_attempts must be at least 1")
        if min(self.initial_delay, self.max_delay, self.jitter) < 0:
            raise UsageError("RetryPolicy delays must not be negative")

    def delay_for(self, retry_number: int, error: BaseException | None = None) -> float:
        """Seconds to wait before retry number ``retry_number`` (1-based) after ``error``."""
        delay = self.initial_delay * 2.0 ** (retry_number - 1)
        if self.jitter:
            delay += _JITTER.uniform(0, self.jitter)
        retry_after: object = getattr(error, "retry_after", None)
        if isinstance(retry_after, (int, float)) and retry_after > delay:
            delay = float(retry_after)
        return min(delay, self.max_delay)

    def attempts(self, scope: CancelScope, delays: list[float]) -> Retrying:
        """A tenacity ``Retrying`` for one model step.

        Args:
            scope: The invocation's cancel scope: a cancelled scope stops retrying.
            delays: Receives each back-off delay instead of sleeping; the caller must pop
                it and wait on ``scope`` before the next attempt.
        """

        def should_retry(error: BaseException) -> bool:
            return isinstance(error, ModelError) and error.retryable and not scope.cancelled

        return Retrying(
            stop=stop_after_attempt(self.max_attempts) | stop_when_event_set(scope.event),
            wait=_WaitPolicy(self),
            retry=retry_if_exception(should_retry),
            sleep=delays.append,
            reraise=True,
        )


class _WaitPolicy(wait_base):
    """tenacity wait strategy that delegates to :meth:`RetryPolicy.delay_for`."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None and outcome.failed else None
        return self._policy.delay_for(retry_state.attempt_number, error)
