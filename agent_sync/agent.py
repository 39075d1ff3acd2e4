"""The :class:`Agent`: configuration plus the facade over runs (invoke, stream, steps,
resume, cancel, inject).

An agent runs at most one invocation at a time. Each invocation is a
:class:`~agent_sync.run.Run` (see :mod:`agent_sync.run._driver` for its lifecycle and the
Ctrl-C rules); the agent's runner (:class:`~agent_sync._agent_runs.AgentRunner`, which it
owns) holds it in a :class:`~agent_sync.run._slot.RunSlot` with the history.
``invoke``/``stream``/``steps`` take the slot without waiting (a busy agent raises
:class:`~agent_sync.errors.ConcurrentInvocationError` at once and touches nothing);
``cancel()``/``inject()`` read the slot once and act on that run, so a late call reaches a
finished run (``False``/``UsageError``), never the next invocation.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._agent_runs import AgentRunner, Prompt, run_to_end
from ._decisions import ApprovalRequest, Decision
from ._guardrails._checks import Guardrail
from ._guardrails._pattern import PatternGuard
from ._limits import UsageLimits
from ._prompt import history_copy
from ._run_log._recovered import go_on_recovered
from ._run_state import OwnerLostPolicy
from .cancel import CancelScope, CancelToken, check_mode
from .context import ContextPolicy, SlidingWindow, Summarizing
from .context._keeper import ContextKeeper
from .errors import UsageError
from .messages import ContentBlock, Message
from .models.base import CacheMode, Model
from .result import AgentResult
from .retry import RetryPolicy
from .run import CancelMode, Run
from .run._binding import ConversationBinding
from .run._driver import RunDriver
from .run._handle import AgentStream, StepsRun
from .run._settings import UNSET, RunSettings, Unset, agent_settings
from .run._slot import RunSlot
from .stores._protocol import RunStore, StoredRun
from .stores._recovery import LiveSlot
from .tools._registry import ToolSource
from .tools.context import ToolContext
from .tools.decorator import Tool
from .tools.executor import ExecutorKind

__all__ = ["Agent", "AgentStream", "Prompt"]

logger = logging.getLogger(__name__)


class Agent:
    """An LLM agent that runs the model -> tools loop in the calling thread.

    ``invoke``/``stream`` may be called from any thread, one invocation at a time per agent;
    ``cancel`` may be called from any thread at any moment. Use one agent per conversation;
    agents share nothing mutable, so many can run in parallel threads.

    Args:
        model: The model (see :mod:`agent_sync.models`); no network default.
        tools: ``@tool`` functions (plain functions are wrapped with :func:`~agent_sync.tool`).
        system_prompt: System instructions.
        messages: Prior history (Converse shape) to continue from; copied, then owned by
            the agent.
        max_cycles: Model calls per invocation before it stops with ``"max_cycles"``.
        tool_executor: ``"concurrent"`` (tools of one message in parallel) or
            ``"sequential"``.
        max_tool_workers: Threads for concurrent tools.
        tool_grace_period: Seconds a running tool gets to return after a cancel before it
            is abandoned (its late result is discarded).
        retry: The retry policy for model calls.
        params: Extra model parameters sent with every request of this agent (e.g.
            ``{"temperature": 0}``), merged over the model's own; ``invoke(...,
            params=...)`` merges more over these for one call.
        cache: Prompt caching for every call (``"short"``, ``"long"`` or ``None``); see
            ``docs/caching.md``. ``invoke(..., cache=...)`` overrides it per call.
        hooks: Objects with any of ``before_model_call``, ``after_model_call``,
            ``before_tool_call``, ``after_tool_call`` (see :mod:`agent_sync.hooks`); they
            run in the loop's thread.
        trace_content: With the ``otel`` extra and a tracer provider, put prompt and
            completion text on the spans (off by default: spans carry no content).
        approval_timeout: Seconds a tool call may wait for approval; past it, the request
            is answered ``Deny("approval expired")`` when the run is resumed.
        store: A :class:`~agent_sync.stores.RunStore`: the conversation's history and runs
            live there, so any process with the same store and ``conversation_id`` sees
            them, runs them one at a time, and can cancel, inject into or resume them.
        conversation_id: The conversation's name in the store (needed with ``store``); also
            the tracing ``gen_ai.conversation.id``. A name, not a secret: your web layer
            decides who may use it.
        lease_s: Seconds a run stays claimed without a sign of life from its process
            (renewed every third of it); by default the store's ``lease_s``, else 30.
        deps: What the tools of every run get as ``context.deps`` (a database session, a
            client...), unless a call passes its own ``deps=``. Never stored with a run.
        output_type: The type of a structured answer for every call (a pydantic model, a
            dataclass, a TypedDict, ``list[...]``/scalars, or a JSON-schema dict):
            ``result.output`` is the validated answer. See ``docs/output.md``.
        output_retries: How many times an invalid answer is sent back to the model with
            its problems before :class:`~agent_sync.errors.OutputValidationError`.
        context: A context policy (:mod:`agent_sync.context`: ``SlidingWindow`` or
            ``Summarizing``) that builds the model's view of a long conversation for each
            call; the history keeps every message. ``None`` sends the whole history.
        on_owner_lost: With a store, what happens to a run whose process dies (its lease
            runs out): ``"fail"`` (the default) ends it failed, its in-flight calls answered
            "worker stopped; effect unknown"; ``"resume"`` leaves it for a recoverer (the
            chat routes, ``agent_sync.celery``, ``store.recover``) that goes on from its
            last committed step, the same run. See ``docs/recovery.md``.
        usage_limits: A :class:`~agent_sync.UsageLimits` budget for each run (requests,
            tokens, tool calls, dollars); a run that reaches one stops cleanly with
            ``stop_reason == "usage_limit"``. ``invoke(..., usage_limits=...)`` replaces
            it for one call. See ``docs/usage_limits.md``.
        guardrails: :mod:`~agent_sync.guardrails` (``Guardrail``, ``PatternGuard``) that
            gate what leaves each run and stop it when they trip (``stop_reason ==
            "guardrail"``); ``invoke(..., guardrails=...)`` adds more for one call. See
            ``docs/guardrails.md``.
        name: The agent's name (a non-empty str, ``"agent"`` by default): its runs'
            spans are ``invoke_agent {name}`` with ``gen_ai.agent.name`` (see
            ``docs/observability.md``); a sub-agent's copies keep it.

    Raises:
        UsageError: Invalid arguments (duplicate tool names, an invalid history, ...).
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Sequence[Tool[Any] | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        messages: Sequence[Message] | None = None,
        max_cycles: int = 20,
        tool_executor: ExecutorKind = "concurrent",
        max_tool_workers: int = 8,
        tool_grace_period: float = 0.5,
        retry: RetryPolicy | None = None,
        params: dict[str, Any] | None = None,
        cache: CacheMode | None = None,
        hooks: Sequence[object] = (),
        trace_content: bool = False,
        approval_timeout: float | None = None,
        store: RunStore | None = None,
        conversation_id: str | None = None,
        lease_s: float | None = None,
        deps: Any = None,
        output_type: object = None,
        output_retries: int = 2,
        context: ContextPolicy | None = None,
        on_owner_lost: OwnerLostPolicy = "fail",
        usage_limits: UsageLimits | None = None,
        name: str = "agent",
        guardrails: Sequence[Guardrail | PatternGuard] = (),
    ) -> None:
        if context is not None and not isinstance(context, (SlidingWindow, Summarizing)):
            raise UsageError(
                "context must be an agent_sync.context policy (SlidingWindow, Summarizing), "
                f"got {type(context).__name__}"
            )
        sources: list[ToolSource] = []  # MCP servers: their tools come at each run
        settings = agent_settings(
            model,
            tools=tools,
            system_prompt=system_prompt,
            max_cycles=max_cycles,
            tool_executor=tool_executor,
            max_tool_workers=max_tool_workers,
            tool_grace_period=tool_grace_period,
            retry=retry,
            params=params,
            cache=cache,
            hooks=hooks,
            trace_content=trace_content,
            approval_timeout=approval_timeout,
            conversation_id=conversation_id,
            deps=deps,
            output_type=output_type,
            output_retries=output_retries,
            context=(
                ContextKeeper(context, store=store, conversation_id=conversation_id)
                if context is not None
                else None
            ),
            tool_sources=sources,
            on_owner_lost=on_owner_lost,
            usage_limits=usage_limits,
            name=name,
            guardrails=guardrails,
        )
        if store is not None:
            if conversation_id is None:
                raise UsageError("a store needs a conversation_id (the conversation's name)")
            if messages is not None:
                raise UsageError("with a store the history comes from it: do not pass messages")
        lease = float(lease_s if lease_s is not None else getattr(store, "lease_s", 30.0))
        if not lease > 0:
            raise UsageError("lease_s must be positive (seconds)")
        binding = (
            ConversationBinding(
                store=store,
                conversation_id=conversation_id,
                lease_s=lease,
                on_owner_lost=settings.on_owner_lost,
            )
            if store is not None and conversation_id is not None
            else None
        )
        history = self._checked_history(messages or [])
        # its runs' machinery and state; with a store, the history and any paused run
        # are read from it here
        self._runner = AgentRunner(settings, sources, binding, history)

    # -- public API --

    @property
    def model(self) -> Model:
        """The model this agent calls."""
        return self._runner.settings.model

    @property
    def name(self) -> str:
        """The agent's name (``Agent(name=...)``; read-only)."""
        return self._runner.settings.name

    @property
    def tools(self) -> dict[str, Tool[Any]]:
        """The agent's tools by name (a copy)."""
        return dict(self._runner.settings.tools)

    @property
    def messages(self) -> list[Message]:
        """The whole history, Converse-shaped and JSON-serialisable.

        This is the agent's own list: read it freely, but do not change it or its messages
        in place (with a store, agents of the same conversation in this process share the
        messages they read from it). Assign a new history (only while idle) to replace it:
        with a store, it is written to the store as the conversation's history, which every
        worker then reads (refused while a run of the conversation is live or paused, in
        this process or another).

        Raises (on assignment):
            UsageError: An invalid history.
            ConcurrentInvocationError: A run is live (this agent's, or the conversation's
                in another worker); nothing changed.
            PendingApprovalError: A run waits for approval; nothing changed.
            StoreUnavailableError: The store could not be reached; nothing changed.
        """
        return self._runner.slot.messages

    @messages.setter
    def messages(self, value: Sequence[Message]) -> None:
        self._runner.replace_history(self._checked_history(value))

    @property
    def is_running(self) -> bool:
        """Whether an invocation (or an unfinished stream or steps run) holds the agent."""
        return self._runner.slot.driver is not None

    @property
    def is_paused(self) -> bool:
        """Whether a run waits for approval (see :meth:`resume`)."""
        return self._runner.slot.paused is not None

    @property
    def pending_approvals(self) -> tuple[ApprovalRequest, ...]:
        """The requests a paused run waits for (empty when not paused)."""
        paused = self._runner.slot.paused
        return paused.approvals if paused is not None else ()

    @property
    def active_run(self) -> Run | None:
        """The run in progress (a :class:`~agent_sync.run.Run` handle), or ``None``.

        Read it once and keep the handle: its ``cancel``/``inject``/``snapshot`` act on
        that run only, from any thread, even after the agent has moved on.
        """
        driver = self._runner.slot.driver
        return Run(driver) if driver is not None else None

    def invoke(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | Unset = UNSET,
        cancel: CancelToken | None = None,
        deps: Any = UNSET,
        params: Mapping[str, Any] | None = None,
        output_type: object = UNSET,
        usage_limits: UsageLimits | None | Unset = UNSET,
        guardrails: Sequence[Guardrail | PatternGuard] | None = None,
    ) -> AgentResult:
        """Run the loop to the end and return its result.

        Args:
            prompt: The user's message: text or content blocks. ``None`` answers the
                history as it stands (it must end with a user message, e.g. after a
                :class:`~agent_sync.errors.ModelError`, to try again).
            timeout: Seconds after which the run is cancelled with reason ``"timeout"``.
            cache: Prompt caching for this call (``"short"``, ``"long"``, ``None``); by
                default the agent's ``cache``.
            cancel: A :class:`~agent_sync.CancelToken` the caller holds: cancelling it
                cancels this run (and every other run it was passed to).
            deps: The tools' ``context.deps`` for this run, instead of the agent's.
            params: Model parameters for every model call of this run, merged over the
                agent's ``params`` (``{"temperature": 0}``).
            output_type: The structured answer's type for this call (see ``Agent``);
                ``None`` for free text; by default the agent's. ``result.output`` holds
                the validated answer.
            usage_limits: A :class:`~agent_sync.UsageLimits` for this run instead of the
                agent's (``None``: no limits).
            guardrails: :mod:`~agent_sync.guardrails` for this run, added to the agent's.

        Returns:
            The result; ``stop_reason == "cancelled"`` if ``cancel()``, the token or the
            timeout stopped it (the history is then closed with "Cancelled by user").

        Raises:
            ConcurrentInvocationError: The agent is already running (nothing is touched).
            UsageError: An invalid prompt.
            ModelError: The model failed after retries; the history is left valid and ends
                with the user's message.
            OutputValidationError: With an output type, the answer was still invalid after
                ``output_retries`` re-asks; the history is valid, the agent reusable.
        """
        runner = self._runner
        call = runner.call(
            timeout, cache, cancel, deps, params, output_type, usage_limits, guardrails
        )
        return run_to_end(runner.new_run(self, prompt, call, emit_deltas=False))

    __call__ = invoke

    def stream(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | Unset = UNSET,
        cancel: CancelToken | None = None,
        deps: Any = UNSET,
        params: Mapping[str, Any] | None = None,
        output_type: object = UNSET,
        usage_limits: UsageLimits | None | Unset = UNSET,
        guardrails: Sequence[Guardrail | PatternGuard] | None = None,
    ) -> AgentStream:
        """Run the loop as a blocking iterator of :mod:`~agent_sync.events`.

        The agent is taken at once (a busy agent raises ``ConcurrentInvocationError`` here,
        not on first iteration). Leaving the iteration early (``break`` followed by
        ``close()``, a ``with`` block, or garbage collection) cancels the run with reason
        ``"stream closed"`` and leaves the history valid. Same arguments and errors as
        :meth:`invoke`; the last event is ``Done`` carrying the result.
        """
        runner = self._runner
        call = runner.call(
            timeout, cache, cancel, deps, params, output_type, usage_limits, guardrails
        )
        return runner.open(self, prompt, call, emit_deltas=True, face=AgentStream)

    def steps(
        self,
        prompt: Prompt = None,
        *,
        timeout: float | None = None,
        cache: CacheMode | None | Unset = UNSET,
        cancel: CancelToken | None = None,
        deps: Any = UNSET,
        params: Mapping[str, Any] | None = None,
        output_type: object = UNSET,
        usage_limits: UsageLimits | None | Unset = UNSET,
        guardrails: Sequence[Guardrail | PatternGuard] | None = None,
    ) -> Run:
        """Run the loop one step at a time: a :class:`~agent_sync.run.Run` to iterate.

        Each iteration makes one model call and runs the tools it asked for, then yields a
        :class:`~agent_sync.run.Step` (``step.message``, ``step.tool_results``); after
        the last, ``run.result`` holds the result. Use it as a context manager: leaving
        the block early cancels the run with a valid history::

            with agent.steps("Plan the trip") as run:
                for step in run:
                    if len(step.tool_results) > 3:
                        break  # cancelled on leaving the block
            print(run.result.stop_reason if run.result else "cancelled")

        The agent is taken at once, as for :meth:`stream`; same arguments and errors as
        :meth:`invoke` (a model error is raised from the iteration).
        """
        runner = self._runner
        call = runner.call(
            timeout, cache, cancel, deps, params, output_type, usage_limits, guardrails
        )
        return runner.open(self, prompt, call, emit_deltas=False, face=StepsRun)

    def resume(
        self,
        decisions: Mapping[str, Decision],
        *,
        timeout: float | None = None,
        cache: CacheMode | None | Unset = UNSET,
        cancel: CancelToken | None = None,
        deps: Any = UNSET,
        params: Mapping[str, Any] | None = None,
        output_type: object = UNSET,
        usage_limits: UsageLimits | None | Unset = UNSET,
        guardrails: Sequence[Guardrail | PatternGuard] | None = None,
    ) -> AgentResult:
        """Answer every pending approval request and go on with the paused run.

        Denied calls get an error ``toolResult`` with the reason; approved calls run (with
        ``Approve(input=...)`` if given, and ``context.decision`` set); then the run goes
        on as ``invoke`` would, with the same ``run_id``. It may pause again.

        Args:
            decisions: Request id -> ``True`` (``Approve()``), ``False`` (``Deny()``),
                ``Approve(input=None, data=None)`` or ``Deny(reason="", data=None)``,
                for every pending request (expired ones are answered
                ``Deny("approval expired")`` whatever is sent).
            timeout, cache, cancel, params: As for :meth:`invoke`.
            deps: As for :meth:`invoke`. ``deps`` are never stored with a paused run (they
                are this process's objects): a resume gets these, else the agent's.

        Returns:
            The result, as :meth:`invoke` returns it.

        Raises:
            DecisionValidationError: A request without a decision, an unknown id, or an
                invalid decision (input or ``decision_schema`` data); nothing ran and the
                run is still paused.
            UsageError: Nothing is paused.
            ConcurrentInvocationError: The agent is running.
        """
        runner = self._runner
        resume = runner.checked_resume(decisions)
        call = runner.call(
            timeout, cache, cancel, deps, params, output_type, usage_limits, guardrails
        )
        return run_to_end(runner.new_run(self, None, call, emit_deltas=False, resume=resume))

    def resume_stream(
        self,
        decisions: Mapping[str, Decision],
        *,
        timeout: float | None = None,
        cache: CacheMode | None | Unset = UNSET,
        cancel: CancelToken | None = None,
        deps: Any = UNSET,
        params: Mapping[str, Any] | None = None,
        output_type: object = UNSET,
        usage_limits: UsageLimits | None | Unset = UNSET,
        guardrails: Sequence[Guardrail | PatternGuard] | None = None,
    ) -> AgentStream:
        """:meth:`resume` as a blocking iterator of :mod:`~agent_sync.events`, as
        :meth:`stream` is to :meth:`invoke`.

        The decisions are checked and the run is taken at once (the errors of
        :meth:`resume` are raised here, before any event); the run's events follow, the
        last one ``Done``. The run keeps its ``run_id``.
        """
        runner = self._runner
        resume = runner.checked_resume(decisions)
        call = runner.call(
            timeout, cache, cancel, deps, params, output_type, usage_limits, guardrails
        )
        return runner.open(self, None, call, emit_deltas=True, face=AgentStream, resume=resume)

    def cancel(self, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        """Stop the running invocation, from any thread, at any moment.

        Returns at once; the invocation returns within milliseconds (a tool that ignores
        cancel is abandoned after ``tool_grace_period``) with ``stop_reason ==
        "cancelled"``, unless it was already finishing. Idempotent: the first reason wins.
        ``mode="after_turn"`` lets the model call in flight and its tools finish first
        (see :meth:`agent_sync.run.Run.cancel`).

        With a store, an agent that runs nothing itself cancels the conversation's run
        wherever it is: running in another worker (its process hears it through the store,
        in either mode) or paused for approval (cancelled at once).

        Returns:
            ``True`` if a running invocation was signalled (or a paused one cancelled);
            ``False`` if there was none (then nothing happens, and the next invocation is
            not affected).

        Raises:
            UsageError: ``mode`` is neither ``"now"`` nor ``"after_turn"`` (even when idle).
        """
        check_mode(mode)  # first, whatever there is to cancel: a bad mode is never ignored
        runner = self._runner
        driver = runner.slot.driver  # one read: the run of this moment, or None
        if driver is not None:
            return driver.cancel(reason, mode=mode)
        if runner.binding is not None:
            return runner.cancel_stored(reason, mode)
        return runner.cancel_paused(self)

    def as_tool(
        self,
        *,
        name: str,
        description: str,
        conversation_id: Callable[[ToolContext[Any]], str] | None = None,
        max_depth: int = 8,
    ) -> Tool[Any]:
        """This agent as a tool of another agent: each call is a child run of the calling
        run (a sub-agent).

        This agent is a template: each call runs on a fresh copy of it (same model, tools
        and settings, an empty history), so one tool serves parallel calls and this
        agent's own ``messages`` are never touched. The model calls the tool with a
        ``prompt``; the child's final text (or ``result.output`` with an
        ``output_type``) is the tool's result, and the caller's ``result.usage``
        includes the child's. Each child run has its own ``run_id``; its events reach
        the caller's stream wrapped in :class:`~agent_sync.events.SubAgentEvent`.

        Cancel is a tree: cancelling the caller (any thread, ``timeout=``, a
        ``CancelToken``, ``store.cancel`` from another process) cancels every running
        child within milliseconds (its call answered "Cancelled by user");
        ``mode="after_turn"`` lets children finish their turn. A child that fails answers
        its call with an error result. With a store (the caller's, else this agent's),
        each child run is stored there, under a conversation of its own, with
        ``parent_run_id``. A gated tool (``requires_approval``) in a child pauses the
        child and the caller: the caller's ``result.approvals`` carry the child's
        requests (with the child's ``run_id``), and the caller's :meth:`resume` resumes
        the child with them, then goes on (from any process, with a store).

        Args:
            name: The tool's name, as the model calls it.
            description: What the sub-agent does (the model reads it).
            conversation_id: A factory ``(context) -> str`` naming the child's
                conversation per call (calls with the same name continue it: in the store,
                or in memory without one); by default each call starts a fresh one.
            max_depth: How many levels below the top-level run (the one a user started)
                this sub-agent's runs may be: 1 is a child of it, 2 a grandchild. A call
                past it (an agent that calls itself, a cycle of agents) starts nothing
                and is answered with an error result naming the limit, which the model
                reads.

        Raises:
            UsageError: An invalid name, description, factory or ``max_depth``.
        """
        from ._subagent import subagent_tool

        return subagent_tool(
            self,
            name=name,
            description=description,
            conversation_id=conversation_id,
            max_depth=max_depth,
        )

    def inject(self, content: str | Sequence[ContentBlock]) -> None:
        """Queue input for the running invocation, from any thread (see
        :meth:`agent_sync.run.Run.inject`).

        Raises:
            UsageError: The agent is idle (or its run just ended), or invalid content.
        """
        driver = self._runner.slot.driver
        if driver is None:
            raise UsageError("the agent is idle: there is no run to inject into")
        driver.inject(content)

    def __repr__(self) -> str:
        state = "running" if self.is_running else "idle"
        count = len(self._runner.slot.messages)
        return f"<Agent {state} model={type(self.model).__name__} messages={count}>"

    # -- package-internal: what the sub-agent tool, recovery, the web and Celery use --

    @property
    def _settings(self) -> RunSettings:
        """The agent's checked settings (with its tool sources' tools of the last run)."""
        return self._runner.settings

    @property
    def _binding(self) -> ConversationBinding | None:
        """The agent's conversation in its store (``None`` without a store)."""
        return self._runner.binding

    @property
    def _slot(self) -> RunSlot:
        """The history, the live run and the paused one."""
        return self._runner.slot

    def _spawn_child(self, store: ConversationBinding | None, conversation_id: str | None) -> Agent:
        """Package-internal (``_subagent``): a fresh copy of this agent for one sub-agent
        call: same model, tools and settings, its own empty history (or the stored
        conversation's); with ``store`` (the calling run's binding, else the template's),
        in the conversation ``conversation_id`` of that store, with its lease."""
        child = copy.copy(self)
        child._runner = self._runner.spawned(store, conversation_id)
        return child

    def _open_child(
        self,
        prompt: Prompt,
        parent: CancelScope,
        *,
        decisions: Mapping[str, Decision] | None = None,
    ) -> RunDriver:
        """Package-internal (``_subagent``): start this agent's run (or, with
        ``decisions``, its paused run's resume) as a child of the calling run's scope
        ``parent``, for the caller to drive with :meth:`RunDriver.events`; the caller's
        ``finally`` releases it (:func:`~agent_sync.run._driver.release_surely`)."""
        return self._runner.open_child(self, prompt, parent, decisions)

    def _recover(self, lost: StoredRun, timeout: float | None = None) -> AgentStream:
        """Package-internal (:meth:`_go_on`): go on with ``lost``, a run of this agent's
        conversation whose worker died, from its last committed state (see
        :mod:`agent_sync.run._lost`): claimed in the store, then streamed here as a
        resumed paused run is.

        Raises:
            RunConflictError: Another recoverer took it, or it is no longer lost.
            ConcurrentInvocationError: This agent is running.
            UsageError: The agent has no store, or the run is another conversation's.
        """
        return self._runner.recover(self, lost, timeout)

    def _go_on(
        self,
        store: RunStore,
        lost: StoredRun,
        *,
        timeout: float | None,
        replay_ttl: float | None,
        slot: LiveSlot | None,
    ) -> Callable[[], None]:
        """Package-internal (the stores' recovery loop, ``stores._recovery``): take ``lost``
        over (:meth:`_recover`) and return the rest of its work: its event log going on
        after the dead worker's last record, or the run drained to its end (see
        :func:`agent_sync._run_log._recovered.go_on_recovered`).

        Raises:
            UsageError: The agent is not one of ``store``'s.
            RunConflictError, ConcurrentInvocationError, PendingApprovalError: As
                :meth:`_recover`.
        """
        return go_on_recovered(
            store,
            lost,
            self._binding,
            lambda: self._recover(lost, timeout),
            replay_ttl=replay_ttl,
            slot=slot,
        )

    def _stream_as(
        self,
        run_id: str,
        prompt: Prompt,
        *,
        timeout: float | None,
        cancel: CancelToken | None,
    ) -> AgentStream:
        """Package-internal (``agent_sync.celery``): :meth:`stream` for a new run whose
        id the caller chose (the web worker that hands the run over names it)."""
        runner = self._runner
        call = runner.call(timeout, UNSET, cancel, UNSET, None, UNSET)
        return runner.open(self, prompt, call, emit_deltas=True, face=AgentStream, run_id=run_id)

    @staticmethod
    def _checked_history(messages: Sequence[Message]) -> list[Message]:
        """A private, encodable copy of ``messages``; ``UsageError`` naming the first problem."""
        return history_copy(messages)
