"""Test doubles for agent_sync users: an offline scripted model and local provider fakes.

``ScriptedModel`` needs nothing; the provider fakes (``AnthropicServer``, ``BedrockServer``,
``GeminiServer``, ``OpenAIServer``, ``ResponsesServer``) are local HTTP servers speaking each
provider's real wire protocol, for testing through the real SDK clients offline. They are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from ._http_server import RecordedRequest, ScriptedServer, ServerTurn
from .scripted import ScriptedModel, ScriptedTurn

if TYPE_CHECKING:
    from .anthropic_server import AnthropicServer
    from .bedrock_server import BedrockServer
    from .gemini_server import GeminiServer
    from .openai_server import OpenAIServer
    from .responses_server import ResponsesServer

__all__ = [
    "AnthropicServer",
    "BedrockServer",
    "GeminiServer",
    "OpenAIServer",
    "RecordedRequest",
    "ResponsesServer",
    "ScriptedModel",
    "ScriptedServer",
    "ScriptedTurn",
    "ServerTurn",
]

_LAZY = {
    "AnthropicServer": ".anthropic_server",
    "BedrockServer": ".bedrock_server",
    "GeminiServer": ".gemini_server",
    "OpenAIServer": ".openai_server",
    "ResponsesServer": ".responses_server",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
