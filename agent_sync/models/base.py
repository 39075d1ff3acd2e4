"""The model interface: what the agent loop needs from a provider.

A provider is any object with a ``stream(request, *, cancel)`` method that yields
:class:`~agent_sync.messages.StreamEvent` dicts (Bedrock ConverseStream shapes). Providers
inherit nothing; :class:`Model` is a :class:`typing.Protocol`.

Contract for ``stream``:

* Translate ``request`` to the provider's wire format, send it, and yield events as they
  arrive. Do not retry: the agent's single retry policy (:mod:`agent_sync.retry`) retries
  errors whose ``retryable`` is true, raised before the first content event.
* Raise :class:`~agent_sync.errors.ModelError` subclasses (mapped in one place per
  provider, ``raise ... from exc``), never SDK exceptions; no secrets in messages.
* Make ``cancel`` effective while blocked: register an abort callback with
  ``cancel.register_abort`` that wakes any blocked read or connect (shut the socket down),
  and unregister it when the stream ends. After an abort, raise anything (the loop knows
  the scope is cancelled) or simply stop yielding.
* Release the connection when the generator is closed early (``finally``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..cancel import CancelScope
from ..messages import Message, StreamEvent, ToolSpec

__all__ = ["CacheMode", "Model", "ModelRequest", "OutputSchema"]

CacheMode = Literal["short", "long"]
"""Prompt caching: ``"short"`` (the provider's default lifetime, about 5 minutes) or
``"long"`` (Anthropic/Bedrock 1 hour, OpenAI 24 hours). See ``docs/caching.md``."""


@dataclass(frozen=True, kw_only=True)
class OutputSchema:
    """The structured answer a request asks for (``output_type``, as the wire sees it).

    Attributes:
        name: The output's name (``"final_result"``): the output tool's name, or the
            ``response_format`` schema's.
        description: What the answer is (the output tool's description).
        schema: The JSON schema of the answer, always an object. Read-only: a provider
            keeps what it derives from it (OpenAI's strict form) per schema object.
    """

    name: str
    description: str
    schema: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """Everything a model call needs, provider-neutral.

    Attributes:
        messages: The conversation so far (Converse shape), ending with a user message.
            Treat as read-only.
        system_prompt: System instructions, or ``None``.
        tool_specs: Tools the model may call.
        tool_choice: ``None`` (provider default, "auto"), ``{"auto": {}}``, ``{"any": {}}``
            or ``{"tool": {"name": ...}}`` (Converse shapes).
        params: Extra per-invocation parameters, merged over the model's own.
        cache: Mark the stable prefix cacheable (``None``: no cache markers). Anthropic:
            ``cache_control`` on the system prompt, the last tool spec and the last block
            of ``messages[-2]`` (the last message before the newest user message, when
            there is one); Bedrock: ``cachePoint`` blocks at the same places;
            OpenAI-compatible: caching is automatic, ``"long"`` adds
            ``prompt_cache_retention: "24h"`` and ``prompt_cache_key``.
        cache_key: A stable id of the conversation (OpenAI's ``prompt_cache_key``), or
            ``None``.
        output: Ask for a structured answer matching ``output.schema`` (``None``: free
            text). Each provider uses its wire's best mechanism (OpenAI-compatible:
            ``response_format`` json_schema; Anthropic, Bedrock: a forced output tool, see
            ``agent_sync.models._output``); a model that ignores it answers in text, which
            the loop parses.
    """

    messages: Sequence[Message]
    system_prompt: str | None = None
    tool_specs: Sequence[ToolSpec] = ()
    tool_choice: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    cache: CacheMode | None = None
    cache_key: str | None = None
    output: OutputSchema | None = None


@runtime_checkable
class Model(Protocol):
    """A chat model that streams Converse-shaped events. See the module docstring."""

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Send ``request`` and yield the response as stream events.

        Args:
            request: The conversation, system prompt and tools.
            cancel: The invocation's cancel scope; register an abort callback for blocked I/O.

        Raises:
            agent_sync.errors.ModelError: On any failure, with ``retryable`` set correctly.
        """
        ...
