"""Exceptions raised by agent_sync.

Families are grouped by who has to act::

    AgentSyncError
    ├── UsageError                      the calling code's mistake
    │   ├── ConcurrentInvocationError   invoke/stream on an agent that is already running
    │   ├── PendingApprovalError        invoke/stream while a run waits for approval
    │   └── DecisionValidationError     resume() with missing or invalid decisions
    ├── ModelError                      the model call failed (after retries, if retryable)
    │   ├── ModelHTTPError              the provider answered with an error status
    │   │   └── ModelThrottledError     429 / 529 / ThrottlingException: slow down
    │   ├── ModelConnectionError        connect/read failed, connection dropped
    │   ├── ModelStreamError            the response stream was malformed or truncated
    │   └── ContextWindowOverflowError  the conversation no longer fits the model's window
    ├── ToolError                       raised by or for a tool (becomes an error toolResult)
    │   └── MCPError                    an MCP server cannot be started, reached or answered
    ├── OutputValidationError           the model's structured answer stayed invalid
    ├── HookError                       a hook raised: the run stopped, history left valid
    ├── RunConflictError                a run store refused a change made from stale state
    └── StoreUnavailableError           a run store cannot be reached or written

Every :class:`ModelError` carries ``retryable``: the single retry policy in
:mod:`agent_sync.retry` retries exactly the errors whose ``retryable`` is true and that
happened before the model streamed any content. Messages and bodies never contain
secrets: :class:`ModelError` passes both through :func:`agent_sync._redact.redact` on
construction, whichever provider builds it.
"""

from __future__ import annotations

from ._encodable import clean_text
from ._redact import redact

__all__ = [
    "AgentSyncError",
    "ConcurrentInvocationError",
    "ContextWindowOverflowError",
    "DecisionValidationError",
    "HookError",
    "MCPError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelStreamError",
    "ModelThrottledError",
    "OutputValidationError",
    "PendingApprovalError",
    "RunConflictError",
    "StoreUnavailableError",
    "ToolError",
    "UsageError",
]

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses that a well-behaved client retries (409 is Anthropic's lock conflict)."""


class AgentSyncError(Exception):
    """Base class of every exception agent_sync raises on purpose."""


class UsageError(AgentSyncError):
    """The calling code used the API wrongly (bad argument, wrong state)."""


class ConcurrentInvocationError(UsageError):
    """``invoke``/``stream`` was called on an agent that is already running.

    Raised at once; the running invocation and the history are not touched. Use one agent
    per conversation, or wait for ``agent.is_running`` to become false.
    """


class PendingApprovalError(UsageError):
    """``invoke``/``stream``/``steps`` on an agent whose run waits for approval.

    Raised at once; nothing is touched. Answer the pending requests with
    ``agent.resume(decisions)`` (or ``agent.cancel()`` to drop them) first.
    """


class DecisionValidationError(UsageError):
    """``resume(decisions)`` did not answer every pending request validly.

    Nothing ran and the run is still paused: fix the decisions and call ``resume`` again.

    Attributes:
        problems: Every problem found, one line each.
    """

    def __init__(self, problems: list[str]) -> None:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"invalid decisions: {problems[0]}{more}")
        self.problems = problems


class ModelError(AgentSyncError):
    """A model call failed.

    Attributes:
        provider: Short provider name (``"anthropic"``, ``"bedrock"``, ``"openai"``,
            ``"scripted"``), or ``None`` when unknown.
        retryable: Whether the retry policy may try the call again (only before the
            model has streamed any content).
        fallback_errors: Raised by a :class:`~agent_sync.models.FallbackModel`: the errors
            of the models its chain tried before the one that raised this, in order
            (empty otherwise).
    """

    retryable: bool = False
    fallback_errors: tuple[ModelError, ...] = ()

    def __init__(
        self, message: str, *, provider: str | None = None, retryable: bool | None = None
    ) -> None:
        message = clean_text(redact(message))  # text from outside: shown, logged, stored
        super().__init__(message)
        self.message = message
        self.provider = provider
        if retryable is not None:
            self.retryable = retryable


class ModelHTTPError(ModelError):
    """The provider answered with an error status.

    Attributes:
        status: HTTP status code, when the provider reported one.
        body: The error body as text (provider's message), truncated; never request headers.
        retry_after: Seconds the provider asked us to wait before retrying, if it said.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        if retryable is None:
            retryable = status in RETRYABLE_STATUSES
        super().__init__(message, provider=provider, retryable=retryable)
        self.status = status
        self.body = clean_text(redact(body)) if body is not None else None
        self.retry_after = retry_after


class ModelThrottledError(ModelHTTPError):
    """The provider is throttling or overloaded (429, 529, ``ThrottlingException``).

    Retryable by default; ``retry_after`` is honoured by the retry policy.
    """

    def __init__(
        self,
        message: str = "the model provider is throttling requests",
        *,
        status: int | None = 429,
        body: str | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        retryable: bool | None = True,
    ) -> None:
        super().__init__(
            message,
            status=status,
            body=body,
            retry_after=retry_after,
            provider=provider,
            retryable=retryable,
        )


class ModelConnectionError(ModelError):
    """Connecting to or reading from the provider failed (reset, refused, timed out).

    Retryable by default: the retry policy only retries it before any content arrived.
    """

    retryable = True


class ModelStreamError(ModelError):
    """The provider's response stream was malformed, truncated or reported an error event."""


class ContextWindowOverflowError(ModelError):
    """The request does not fit the model's context window; shorten the history."""


class ToolError(AgentSyncError):
    """Raised by or for a tool.

    A tool may raise it (or any exception) to report failure: the loop turns it into a
    ``toolResult`` with ``status: "error"`` and the exception's message, and continues.
    """


class OutputValidationError(AgentSyncError):
    """The model's answer did not validate against ``output_type``, re-asks included.

    Raised after ``output_retries`` re-asks (each sent the problems back to the model). The
    history is valid (the last answer's output tool call is answered) and the agent is
    reusable.

    Attributes:
        errors: Every problem with the last answer, one line each naming the field
            (``"items.0.price: Input should be a valid number"``).
        output: The last answer as the model gave it (the parsed JSON, or the text when
            it was not JSON).
    """

    def __init__(self, errors: list[str], output: object) -> None:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        first = errors[0] if errors else "invalid"
        super().__init__(f"the model's output is invalid: {first}{more}")
        self.errors = errors
        self.output = output


class MCPError(ToolError):
    """An MCP server (:mod:`agent_sync.mcp`) could not be started or reached, or a call to
    it failed in transport (the server exited, the session dropped, no answer in time).

    Connecting (``with server:``, ``server.tools()``, or the first run of an agent that has
    the server) raises it; during a run a tool call that fails this way becomes an error
    ``toolResult`` naming the server and the cause. The message never holds the values of
    the server's secret ``env=`` entries or ``headers=``.
    """


class HookError(AgentSyncError):
    """A hook (``Agent(hooks=[...])``) raised; the run was stopped with a valid history.

    The hook's exception is ``__cause__``.

    Attributes:
        hook: The hook object.
        method: The method that raised, e.g. ``"before_tool_call"``.
    """

    def __init__(self, message: str, *, hook: object, method: str) -> None:
        super().__init__(redact(message))
        self.hook = hook
        self.method = method


class RunConflictError(AgentSyncError):
    """A run store refused a change: the run moved on since it was read.

    Every state change in a store is a compare-and-set on the run's version; the loser of a
    race (two resumes of one paused run, a commit from an owner whose lease was taken over)
    gets this error and changed nothing.
    """


class StoreUnavailableError(AgentSyncError):
    """A run store cannot be reached or written (Redis down, SQLite file unwritable).

    Stores fail closed: nothing that needed the store happened (a gated tool never runs
    without a stored decision); what was committed before stays. The cause is chained.
    """
