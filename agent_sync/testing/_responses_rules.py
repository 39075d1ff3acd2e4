"""What the OpenAI Responses API refuses, for :class:`~.responses_server.ResponsesServer`.

:func:`responses_problem` returns the API's error message for a ``POST /responses`` body it
would refuse, or ``None``. The rules, each one the real API's (its wording where known):

* ``model`` missing; ``input`` neither a string nor a list; ``stream`` not a boolean;
* an input item of an unknown ``type``; a message whose ``role`` is not ``user``,
  ``assistant``, ``system`` or ``developer``; an assistant message part that is not
  ``output_text``/``refusal``, or a user part that is not ``input_text``/``input_image``/
  ``input_file``; an ``input_image`` without an ``http(s)``/``data:`` URL;
* a ``function_call_output`` whose ``call_id`` no earlier ``function_call`` issued, a
  ``function_call`` answered by no ``function_call_output``, a ``call_id`` called twice;
* a ``reasoning`` item this server never issued (or, with ``store: false``, one without
  ``encrypted_content``), whose ``encrypted_content`` is not the one issued, or that is not
  followed by the item that followed it in the answer (matched by id);
* a function tool without a ``name``, or ``strict`` (the API's default) with a schema that
  is not strict; a ``tool_choice`` naming a function not in ``tools``;
* ``text.format`` ``json_schema`` without a valid ``name``/``schema``, or strict with a
  schema that is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._output_rules import _NAME, _strict_problem

__all__ = ["IssuedReasoning", "responses_problem"]

_ROLES = ("user", "assistant", "system", "developer")
_USER_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal")
_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")

IssuedReasoning = Mapping[str, tuple[str, str | None]]
"""Reasoning item id -> (its ``encrypted_content``, the id of the item that followed it)."""


def responses_problem(body: Any, issued: IssuedReasoning) -> str | None:
    """Why the Responses API would refuse ``body``, or ``None``. See the module docstring."""
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "Missing required parameter: 'model'."
    if "stream" in body and not isinstance(body["stream"], bool):
        return "Invalid type for 'stream': expected a boolean."
    items = body.get("input")
    if isinstance(items, list):
        problem = _input_problem(items, issued, store=body.get("store", True) is not False)
        if problem is not None:
            return problem
    elif not isinstance(items, str):
        return "Invalid type for 'input': expected a string or an array of input items."
    return _tools_problem(body) or _format_problem(body)


def _input_problem(items: list[Any], issued: IssuedReasoning, *, store: bool) -> str | None:
    called: set[str] = set()
    answered: set[str] = set()
    for position, item in enumerate(items):
        where = f"input[{position}]"
        if not isinstance(item, dict):
            return f"Invalid type for '{where}': expected an object."
        kind = item.get("type", "message")
        if kind not in _ITEM_TYPES:
            return f"Invalid value for '{where}.type': {kind!r}."
        if kind == "message":
            problem = _message_problem(item, where)
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id or not isinstance(item.get("name"), str):
                return f"Missing required parameter: '{where}.call_id'."
            if call_id in called:
                return f"Duplicate item found with call_id {call_id}."
            called.add(call_id)
            problem = None
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in called:
                return f"No tool call found for function call output with call_id {call_id}."
            answered.add(call_id)
            output = item.get("output")
            problem = (
                None
                if isinstance(output, (str, list))
                else f"Invalid type for '{where}.output': expected a string or an array."
            )
        else:
            problem = _reasoning_problem(items, position, issued, store=store)
        if problem is not None:
            return problem
    unanswered = sorted(called - answered)
    if unanswered:
        return f"No tool output found for function call {unanswered[0]}."
    return None


def _message_problem(item: dict[str, Any], where: str) -> str | None:
    role = item.get("role")
    if role not in _ROLES:
        return (
            f"Invalid value: {role!r}. Supported values are: 'assistant', 'system', "
            "'developer', and 'user'."
        )
    content = item.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"Invalid type for '{where}.content': expected a string or an array."
    allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
    for number, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            names = "' and '".join(allowed) if len(allowed) == 2 else "', '".join(allowed)
            return f"Invalid value: {kind!r}. Supported values are: '{names}'."
        if kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url.startswith(("http://", "https://", "data:")):
                return f"Invalid '{where}.content[{number}].image_url': expected a URL."
    return None


def _reasoning_problem(
    items: list[Any], position: int, issued: IssuedReasoning, *, store: bool
) -> str | None:
    item = items[position]
    item_id = item.get("id")
    known = issued.get(item_id) if isinstance(item_id, str) else None
    encrypted = item.get("encrypted_content")
    if known is None or (not store and not encrypted):
        suffix = "" if store else " Items are not persisted when `store` is set to false."
        return f"Item with id '{item_id}' not found.{suffix}"
    if encrypted is not None and encrypted != known[0]:
        return f"The encrypted content for item {item_id} could not be verified."
    follower = items[position + 1] if position + 1 < len(items) else None
    if (
        not isinstance(follower, dict)
        or follower.get("type", "message") == "reasoning"
        or (known[1] is not None and follower.get("id") != known[1])
    ):
        return (
            f"Item '{item_id}' of type 'reasoning' was provided without its required "
            "following item."
        )
    return None


def _tools_problem(body: dict[str, Any]) -> str | None:
    names = set()
    for position, spec in enumerate(body.get("tools") or ()):
        if not isinstance(spec, dict) or spec.get("type") != "function":
            continue
        name = spec.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            return f"Invalid 'tools[{position}].name': must match ^[a-zA-Z0-9_-]{{1,64}}$."
        names.add(name)
        parameters = spec.get("parameters")
        if spec.get("strict", True) is not False and isinstance(parameters, dict):
            problem = _strict_problem(parameters, "()")
            if problem is not None:
                return f"Invalid schema for function '{name}': {problem}"
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        if choice.get("name") not in names:
            return f"Tool choice 'function' not found in 'tools' parameter: {choice.get('name')}."
    return None


def _format_problem(body: dict[str, Any]) -> str | None:
    text = body.get("text")
    spec = text.get("format") if isinstance(text, dict) else None
    if not isinstance(spec, dict) or spec.get("type") != "json_schema":
        return None
    if not _NAME.match(str(spec.get("name", ""))):
        return "Invalid 'text.format.name': must match ^[a-zA-Z0-9_-]{1,64}$."
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        return "Missing required parameter: 'text.format.schema'."
    if spec.get("strict") is True:
        problem = _strict_problem(schema, "()")
        if problem is not None:
            return f"Invalid schema for response_format '{spec['name']}': {problem}"
    return None
