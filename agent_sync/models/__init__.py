"""Model providers.

``from agent_sync.models import AnthropicModel, BedrockModel, GeminiModel, OpenAIModel,
OpenAIResponsesModel``: each provider is imported on first use, so ``import agent_sync`` stays
fast and a provider's SDK is only loaded when you use it. ``FallbackModel`` chains models:
the next one answers when one fails before its answer began.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from .base import Model, ModelRequest

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .bedrock import BedrockModel
    from .fallback import FallbackModel
    from .gemini import GeminiModel
    from .openai import OpenAIModel
    from .responses import OpenAIResponsesModel

__all__ = [
    "AnthropicModel",
    "BedrockModel",
    "FallbackModel",
    "GeminiModel",
    "Model",
    "ModelRequest",
    "OpenAIModel",
    "OpenAIResponsesModel",
]

_LAZY = {
    "AnthropicModel": ".anthropic",
    "BedrockModel": ".bedrock",
    "FallbackModel": ".fallback",
    "GeminiModel": ".gemini",
    "OpenAIModel": ".openai",
    "OpenAIResponsesModel": ".responses",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
