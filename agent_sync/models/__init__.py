"""Model providers.

``from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel``: each provider
is imported on first use, so ``import agent_sync`` stays fast and a provider's SDK is only
loaded when you use it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import Model, ModelRequest

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .bedrock import BedrockModel
    from .openai import OpenAIModel

__all__ = ["AnthropicModel", "BedrockModel", "Model", "ModelRequest", "OpenAIModel"]

_LAZY = {
    "AnthropicModel": ".anthropic",
    "BedrockModel": ".bedrock",
    "OpenAIModel": ".openai",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
