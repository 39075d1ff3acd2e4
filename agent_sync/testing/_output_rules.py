"""What the real APIs refuse about structured-output requests, for the local wire servers.

Each function returns the API's error message for a request it would refuse, or ``None``:

* OpenAI: a ``response_format`` ``json_schema`` without a valid ``name`` or ``schema``;
  with ``strict: true``, a schema that is not an object at the root, an object without
  ``additionalProperties: false``, or one whose ``required`` does not list every property;
  a ``tool_choice`` naming a function that is not among ``tools``.
* Anthropic: ``tool_use``/``tool_result`` blocks in a request without ``tools``; a
  ``tool_choice`` naming a tool that is not among ``tools``; a forced ``tool_choice``
  (``any``/``tool``) with extended thinking on.
* Bedrock: the same two rules for ``toolConfig.toolChoice``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["anthropic_problem", "bedrock_problem", "openai_problem"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def openai_problem(request: Any) -> str | None:
    """Why OpenAI would refuse ``request`` (a Chat Completions body), or ``None``."""
    if not isinstance(request, dict):
        return None
    choice = request.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        wanted = choice.get("function", {}).get("name")
        names = {t.get("function", {}).get("name") for t in request.get("tools") or []}
        if wanted not in names:
            return f"Invalid value for 'tool_choice': no function named {wanted!r} in 'tools'."
    response_format = request.get("response_format")
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or response_format.get("type") not in (
        "text",
        "json_object",
        "json_schema",
    ):
        return "Invalid value for 'response_format.type'."
    if response_format["type"] != "json_schema":
        return None
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not _NAME.match(str(spec.get("name", ""))):
        return "Invalid 'response_format.json_schema.name': must match ^[a-zA-Z0-9_-]{1,64}$."
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        return "Missing required parameter: 'response_format.json_schema.schema'."
    if spec.get("strict") is True:
        problem = _strict_problem(schema, "()")
        if problem is not None:
            return f"Invalid schema for response_format '{spec['name']}': {problem}"
    return None


def _strict_problem(schema: dict[str, Any], where: str) -> str | None:
    if where == "()" and schema.get("type") != "object":
        return "schema must be a JSON Schema of 'type: \"object\"', got 'type: None'."
    for context, node in _objects(schema, where):
        if node.get("additionalProperties") is not False:
            return (
                f"In context={context}, 'additionalProperties' is required to be supplied "
                "and to be false."
            )
        missing = [key for key in node.get("properties", {}) if key not in node.get("required", [])]
        if missing:
            return (
                f"In context={context}, 'required' is required to be supplied and to be an "
                f"array including every key in properties. Missing '{missing[0]}'."
            )
    return None


def _objects(node: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """Every object schema inside ``node``, with where it is."""
    found: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(node, dict):
        return found
    if node.get("type") == "object" or "properties" in node:
        found.append((where, node))
    for key in ("properties", "$defs", "definitions"):
        members = node.get(key)
        if isinstance(members, dict):
            for name, member in members.items():
                found += _objects(member, f"{where}/{key}/{name}")
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        members = node.get(key)
        if isinstance(members, list):
            for number, member in enumerate(members):
                found += _objects(member, f"{where}/{key}/{number}")
    for key in ("items", "not", "contains"):
        found += _objects(node.get(key), f"{where}/{key}")
    return found


def anthropic_problem(body: Any) -> str | None:
    """Why Anthropic's Messages API would refuse ``body``, or ``None``."""
    if not isinstance(body, dict):
        return None
    if not body.get("tools") and _has_tool_blocks(body.get("messages")):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return None
    names = {tool.get("name") for tool in body.get("tools") or []}
    if choice.get("type") == "tool" and choice.get("name") not in names:
        return f"tool_choice: tool {choice.get('name')!r} not found in tools"
    thinking = body.get("thinking")
    forced = choice.get("type") in ("any", "tool")
    if forced and isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def _has_tool_blocks(messages: Any) -> bool:
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result"):
                return True
    return False


def bedrock_problem(request: Any) -> str | None:
    """Why Bedrock's Converse API would refuse ``request``, or ``None``."""
    if not isinstance(request, dict):
        return None
    config = request.get("toolConfig")
    if not isinstance(config, dict) or not isinstance(config.get("toolChoice"), dict):
        return None
    choice = config["toolChoice"]
    names = {t.get("toolSpec", {}).get("name") for t in config.get("tools", [])}
    if "tool" in choice and choice["tool"].get("name") not in names:
        return "The tool specified in toolChoice is not defined in toolConfig.tools."
    fields = request.get("additionalModelRequestFields") or {}
    thinking = fields.get("thinking") if isinstance(fields, dict) else None
    if ("any" in choice or "tool" in choice) and isinstance(thinking, dict):
        if thinking.get("type") in ("enabled", "adaptive"):
            return "Thinking may not be enabled when tool_choice forces tool use."
    return None
