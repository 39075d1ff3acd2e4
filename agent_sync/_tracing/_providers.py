"""What differs between model providers in a trace: the provider's name and how its token
counts map to the GenAI semantic conventions' usage attributes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["provider_name", "usage_attributes"]

_PROVIDERS = {
    ("agent_sync.models.anthropic", "AnthropicModel"): "anthropic",
    ("agent_sync.models.bedrock", "BedrockModel"): "aws.bedrock",
    ("agent_sync.models.openai", "OpenAIModel"): "openai",
    ("agent_sync.models.gemini", "GeminiModel"): "gcp.gemini",  # the conventions' name
}
_CACHE_EXCLUDED = frozenset({"anthropic", "aws.bedrock"})  # inputTokens omit cached tokens


def provider_name(model: object) -> str:
    """``gen_ai.provider.name`` of a model.

    A non-empty ``provider_name`` string attribute wins; else agent_sync's models (and
    their subclasses) give ``anthropic``, ``aws.bedrock``, ``openai``, ``gcp.gemini``; else
    the class name, lowercased.
    """
    name = getattr(model, "provider_name", None)
    if isinstance(name, str) and name:
        return name
    for cls in type(model).__mro__:
        known = _PROVIDERS.get((cls.__module__, cls.__qualname__))
        if known is not None:
            return known
    return type(model).__name__.lower()


def usage_attributes(usage: Mapping[str, Any], provider: str) -> dict[str, int]:
    """The ``gen_ai.usage.*`` attributes of a usage dict.

    ``input_tokens`` includes cached tokens, as the conventions ask: for the providers
    whose ``inputTokens`` omit them (Anthropic, Bedrock) it is the sum.
    """
    read, write = usage.get("cacheReadInputTokens"), usage.get("cacheWriteInputTokens")
    inputs, outputs = usage.get("inputTokens"), usage.get("outputTokens")
    attributes: dict[str, int] = {}
    if isinstance(inputs, int):
        if provider in _CACHE_EXCLUDED:
            inputs += sum(n for n in (read, write) if isinstance(n, int))
        attributes["gen_ai.usage.input_tokens"] = inputs
    if isinstance(outputs, int):
        attributes["gen_ai.usage.output_tokens"] = outputs
    if isinstance(read, int):
        attributes["gen_ai.usage.cache_read.input_tokens"] = read
    if isinstance(write, int):
        attributes["gen_ai.usage.cache_creation.input_tokens"] = write
    return attributes
