"""What the Flask and Django chat examples share: the chat page, a tool and the model choice.

Example code, not part of the installed package: ``flask_chat/chat_app.py`` and
``django_chat/chat/views.py`` put this folder's parent (``examples/``) on ``sys.path`` and
import it. It uses only agent_sync's public API.

The model is offline by default (:class:`OfflineDemoModel`), a real provider if configured.

Environment variables:

- ``AGENT_SYNC_PROVIDER``: ``anthropic``, ``openai`` or ``bedrock``; unset: the offline demo.
- ``AGENT_SYNC_MODEL``: the provider's model id (a sensible default per provider).
- The provider's own credentials: ``ANTHROPIC_API_KEY``; ``OPENAI_API_KEY`` (and
  ``OPENAI_BASE_URL`` for any OpenAI-compatible server); the usual AWS variables and
  ``AWS_REGION`` for Bedrock.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

from agent_sync import CancelScope, UsageError, tool
from agent_sync.messages import StreamEvent
from agent_sync.models import Model, ModelRequest
from agent_sync.testing import ScriptedModel

__all__ = [
    "SYSTEM_PROMPT",
    "TOOLS",
    "OfflineDemoModel",
    "chat_page",
    "delete_file",
    "model_from_env",
    "roll_dice",
]

_DEFAULT_MODEL_IDS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4o-mini",
    "bedrock": "anthropic.claude-3-5-haiku-20241022-v1:0",
}

SYSTEM_PROMPT = "You are a friendly assistant. Use the roll_dice tool when asked to roll dice."


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (a stand-in: nothing is deleted). A person must approve each call.

    Args:
        path: The file.
    """
    return f"{path} deleted (not really: this is a demo)"


@tool
def roll_dice(sides: int = 6) -> int:
    """Roll one die.

    Args:
        sides: How many faces the die has.
    """
    return random.randint(1, max(2, sides))


TOOLS = [roll_dice]


def chat_page() -> str:
    """The examples' chat page (HTML, CSS and a little JS; plain HTML, no template tags).

    It posts to ``/chat`` (answer streamed as SSE), ``/cancel`` (the Stop button) and reads
    Django's ``csrftoken`` cookie when there is one.

    Returns:
        The page, read from ``chat.html`` next to this module.
    """
    return Path(__file__).with_name("chat.html").read_text(encoding="utf-8")


def model_from_env() -> Model:
    """The model named by ``AGENT_SYNC_PROVIDER``, or the offline demo model.

    Returns:
        A new model; constructing one makes no network call.

    Raises:
        UsageError: ``AGENT_SYNC_PROVIDER`` names no known provider.
    """
    provider = os.environ.get("AGENT_SYNC_PROVIDER", "").strip().lower()
    if not provider or provider == "offline":
        return OfflineDemoModel()
    model_id = os.environ.get("AGENT_SYNC_MODEL") or _DEFAULT_MODEL_IDS.get(provider, "")
    # Imported on demand: each provider brings its SDK, and the offline demo needs none.
    if provider == "anthropic":
        from agent_sync.models import AnthropicModel

        return AnthropicModel(model_id, max_tokens=1024)
    if provider == "openai":
        from agent_sync.models import OpenAIModel

        base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        return OpenAIModel(model_id, base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY"))
    if provider == "bedrock":
        from agent_sync.models import BedrockModel

        return BedrockModel(model_id, region_name=os.environ.get("AWS_REGION"))
    raise UsageError(f"unknown AGENT_SYNC_PROVIDER {provider!r}: use anthropic, openai or bedrock")


class OfflineDemoModel:
    """A model for the offline demo: picks a scripted turn from the request.

    It asks for ``roll_dice`` when the message mentions dice, reports a tool result when it
    gets one, and otherwise answers slowly enough that the Stop button has time to act.
    Each turn streams through :class:`~agent_sync.testing.ScriptedModel`, the same path
    real providers take. Stateless, so one instance may serve any number of threads.
    """

    def stream(self, request: ModelRequest, *, cancel: CancelScope) -> Iterator[StreamEvent]:
        """Stream the scripted turn that fits the conversation so far.

        Args:
            request: The conversation; only its last message is read.
            cancel: The run's cancel scope, passed on to :class:`ScriptedModel`.

        Yields:
            The turn's stream events.
        """
        turn = ScriptedModel([self._turn_for(request)])
        yield from turn.stream(request, cancel=cancel)

    @staticmethod
    def _turn_for(request: ModelRequest) -> str | dict[str, object]:
        last = request.messages[-1]["content"] if request.messages else []
        for block in last:
            if "toolResult" in block:
                content = block["toolResult"].get("content", [])
                value = " ".join(str(c.get("text", c.get("json", ""))) for c in content)
                if block["toolResult"].get("status") == "error":
                    return {"text": f"I did not: {value}", "chunk_size": 4, "chunk_delay": 0.03}
                if "deleted" in value:
                    return {"text": f"Done: {value}.", "chunk_size": 4, "chunk_delay": 0.03}
                return {"text": f"The die shows {value}.", "chunk_size": 4, "chunk_delay": 0.03}
        said = " ".join(block.get("text", "") for block in last).strip()
        offered = {spec["name"] for spec in request.tool_specs}
        if "delete" in said.lower() and "delete_file" in offered:
            return {
                "text": "Deleting needs your approval.",
                "tool_calls": [{"name": "delete_file", "input": {"path": "old.log"}}],
            }
        if "dice" in said.lower() or "roll" in said.lower():
            return {
                "text": "Rolling a die for you.",
                "tool_calls": [{"name": "roll_dice", "input": {"sides": 6}}],
            }
        text = (
            f"You said: {said}\n\nThis is the offline demo model: it streams a scripted "
            "answer, a few characters at a time, so you can watch the stream and press Stop "
            "halfway. Ask it to roll dice to see a tool call. Set AGENT_SYNC_PROVIDER to "
            "anthropic, openai or bedrock to talk to a real model instead."
        )
        return {"text": text, "chunk_size": 3, "chunk_delay": 0.04}
