"""What differs between model providers in a trace: the provider's name, how its token
counts map to the GenAI semantic conventions' usage attributes, where it is served
(``server.address``/``server.port``, from the model's ``endpoint``) and the request
parameters it was given.

Who answers a call (:func:`answerer`: its provider and server) is read from the model that
answered it: the model called, or the member of a chain that answered, once its answer
began. What was asked (``gen_ai.request.*``) is read from the model called.

Imported only once OpenTelemetry is found (its names come from the semantic conventions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import _names as n

__all__ = [
    "Answerer",
    "answerer",
    "provider_name",
    "request_attributes",
    "server_attributes",
    "usage_attributes",
    "usage_counts",
]

_PROVIDERS = {
    ("agent_sync.models.anthropic", "AnthropicModel"): n.ANTHROPIC,
    ("agent_sync.models.bedrock", "BedrockModel"): n.AWS_BEDROCK,
    ("agent_sync.models.openai", "OpenAIModel"): n.OPENAI,
    ("agent_sync.models.gemini", "GeminiModel"): n.GCP_GEMINI,
}
_CACHE_EXCLUDED = frozenset({n.ANTHROPIC, n.AWS_BEDROCK})  # inputTokens omit cached tokens
_DEFAULT_PORTS = {"https": 443, "http": 80}

# The spellings of the three parameters across the wires (snake_case, Converse camelCase,
# Gemini's and the Responses API's own): one table, whatever the model.
_MAX_TOKENS = ("max_tokens", "maxTokens", "max_completion_tokens", "max_output_tokens",
               "maxOutputTokens")  # fmt: skip
_TEMPERATURE = ("temperature",)
_TOP_P = ("top_p", "topP")


@dataclass(frozen=True)
class Answerer:
    """Who answers a model call, as its span and metrics name it."""

    provider: str
    """``gen_ai.provider.name`` (how the call's usage is counted too)."""
    attributes: dict[str, Any]
    """``gen_ai.provider.name``, ``server.address``, ``server.port``."""


def answerer(model: object) -> Answerer:
    """The provider and server of a call ``model`` answers."""
    provider = provider_name(model)
    return Answerer(provider, {n.PROVIDER_NAME: provider, **server_attributes(model)})


def provider_name(model: object) -> str:
    """``gen_ai.provider.name`` of a model.

    A non-empty ``provider_name`` string attribute wins; else agent_sync's models (and
    their subclasses) give ``anthropic``, ``aws.bedrock``, ``openai``, ``gcp.gemini``; a
    ``FallbackModel`` its primary's; else the class name, lowercased.
    """
    name = getattr(model, "provider_name", None)
    if isinstance(name, str) and name:
        return name
    chain = _chain(model)
    if chain is not None:
        return provider_name(chain)
    for cls in type(model).__mro__:
        known = _PROVIDERS.get((cls.__module__, cls.__qualname__))
        if known is not None:
            return known
    return type(model).__name__.lower()


def _chain(model: object) -> object | None:
    """A ``FallbackModel``'s primary (the provider each call asks first), else ``None``."""
    for cls in type(model).__mro__:
        if (cls.__module__, cls.__qualname__) == ("agent_sync.models.fallback", "FallbackModel"):
            models = getattr(model, "models", ())
            return models[0] if models else None
    return None


def usage_counts(usage: Mapping[str, Any], provider: str) -> tuple[int | None, int | None]:
    """``(input, output)`` tokens as the conventions count them: input includes cached
    tokens (for the providers whose ``inputTokens`` omit them, Anthropic and Bedrock, the
    sum); ``None`` where not reported."""
    inputs, outputs = usage.get("inputTokens"), usage.get("outputTokens")
    if isinstance(inputs, int) and provider in _CACHE_EXCLUDED:
        read, write = usage.get("cacheReadInputTokens"), usage.get("cacheWriteInputTokens")
        inputs += sum(k for k in (read, write) if isinstance(k, int))
    return (
        inputs if isinstance(inputs, int) else None,
        outputs if isinstance(outputs, int) else None,
    )


def usage_attributes(usage: Mapping[str, Any], provider: str) -> dict[str, int]:
    """The ``gen_ai.usage.*`` attributes of a usage dict (input tokens: :func:`usage_counts`)."""
    inputs, outputs = usage_counts(usage, provider)
    read, write = usage.get("cacheReadInputTokens"), usage.get("cacheWriteInputTokens")
    attributes: dict[str, int] = {}
    if inputs is not None:
        attributes[n.USAGE_INPUT_TOKENS] = inputs
    if outputs is not None:
        attributes[n.USAGE_OUTPUT_TOKENS] = outputs
    if isinstance(read, int):
        attributes[n.USAGE_CACHE_READ_INPUT_TOKENS] = read
    if isinstance(write, int):
        attributes[n.USAGE_CACHE_CREATION_INPUT_TOKENS] = write
    return attributes


def server_attributes(model: object) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of the model's ``endpoint`` (a URL; every
    agent_sync model has one), or none when it has no endpoint (``ScriptedModel``)."""
    endpoint = getattr(model, "endpoint", None)
    if not isinstance(endpoint, str) or not endpoint:
        return {}
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return {}
    attributes: dict[str, Any] = {n.SERVER_ADDRESS: parts.hostname}
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    if port is not None:
        attributes[n.SERVER_PORT] = port
    return attributes


def request_attributes(model: object, params: Mapping[str, Any]) -> dict[str, Any]:
    """``gen_ai.request.max_tokens``/``temperature``/``top_p`` the model was given: the
    call's ``params`` over the model's own ``params`` (and a ``max_tokens`` attribute, as
    ``AnthropicModel`` has)."""
    own = getattr(model, "params", None)
    merged: dict[str, Any] = {**own, **params} if isinstance(own, Mapping) else dict(params)
    attributes: dict[str, Any] = {}
    max_tokens = _first(merged, _MAX_TOKENS)
    if max_tokens is None:
        max_tokens = getattr(model, "max_tokens", None)
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        attributes[n.REQUEST_MAX_TOKENS] = max_tokens
    for key, names in ((n.REQUEST_TEMPERATURE, _TEMPERATURE), (n.REQUEST_TOP_P, _TOP_P)):
        value = _first(merged, names)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[key] = float(value)
    return attributes


def _first(params: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if name in params:
            return params[name]
    return None
