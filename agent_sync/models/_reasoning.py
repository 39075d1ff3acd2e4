"""Whose reasoning a ``reasoningContent`` signature is: each wire replays only its own.

A reasoning block's ``signature`` is the provider's integrity token, meaningful to that
provider alone. Anthropic's (and Claude on Bedrock's) are bare base64 strings. A wire whose
reasoning token is something else (the OpenAI Responses API's reasoning item: its id and
``encrypted_content``) stores it *tagged*: ``"<wire>:<payload>"``. A ``":"`` never occurs
in base64, so the rule every request translator follows is one test:

* a translator replays a tagged signature only when the tag is its own
  (:func:`untag`), and drops the block otherwise;
* Anthropic and Bedrock replay only untagged signatures (:func:`is_tagged` is false);
* a wire that cannot carry reasoning at all (Chat Completions) drops every block.

So a conversation may switch providers mid-way: each keeps its own reasoning and never
sends another's, which its API would refuse.
"""

from __future__ import annotations

__all__ = ["is_tagged", "tag", "untag"]

_SEPARATOR = ":"


def tag(wire: str, payload: str) -> str:
    """The signature holding ``payload`` for ``wire`` (``wire`` has no ``":"``)."""
    return f"{wire}{_SEPARATOR}{payload}"


def is_tagged(signature: str | None) -> bool:
    """Whether ``signature`` was tagged by a wire (so it is not Anthropic's)."""
    return bool(signature) and _SEPARATOR in signature  # type: ignore[operator]


def untag(wire: str, signature: str | None) -> str | None:
    """The payload of ``signature`` when ``wire`` tagged it, else ``None``."""
    if not signature:
        return None
    head, separator, payload = signature.partition(_SEPARATOR)
    return payload if separator and head == wire else None
