"""What the Gemini API refuses in a ``generateContent`` request, for :class:`GeminiServer`.

:func:`gemini_problem` returns the API's 400 ``INVALID_ARGUMENT`` message for a request it
would refuse, or ``None``. The rules:

* ``contents`` present and non-empty; each content's ``role`` ``user`` or ``model`` and its
  ``parts`` non-empty; the last content is the user's (a prompt or function responses);
* a ``functionCall`` turn (model) comes right after a user turn and is followed by one user
  turn holding exactly one ``functionResponse`` per call, each matching a call of that turn
  (by ``id`` when both carry one, else by ``name``); a ``functionResponse`` never answers
  anything else;
* ``thoughtSignature`` and ``inlineData.data`` are base64; a ``functionCall`` part takes
  ``name`` and an object ``args``; a ``functionResponse`` a ``name`` and an object
  ``response``;
* Gemini 3 (``model`` starting with ``gemini-3``): the first ``functionCall`` of each model
  turn of the current turn (since the last user prompt) carries a signature the server
  issued, or Google's documented placeholder;
* ``toolConfig.functionCallingConfig.allowedFunctionNames`` name declared functions;
  ``responseJsonSchema`` or ``responseSchema`` (not both) need ``responseMimeType``
  ``application/json``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

__all__ = ["SKIP_SIGNATURE", "gemini_problem"]

SKIP_SIGNATURE = "skip_thought_signature_validator"


def gemini_problem(body: Any, *, model: str, issued: Callable[[str], bool]) -> str | None:
    """Why the Gemini API would refuse ``body``, or ``None``.

    Args:
        body: The parsed request body.
        model: The model named in the path.
        issued: Whether a thought signature is one this server sent.
    """
    if not isinstance(body, dict):
        return "Invalid JSON payload received."
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    for position, content in enumerate(contents):
        problem = _content_problem(content, f"contents[{position}]")
        if problem is not None:
            return problem
    if contents[-1].get("role") != "user":
        return "Please ensure that multiturn requests ends with a user role or a function response."
    problem = _call_turn_problem(contents)
    if problem is None and model.startswith("gemini-3"):
        problem = _signature_problem(contents, issued)
    return problem or _config_problem(body)


def _content_problem(content: Any, where: str) -> str | None:
    if not isinstance(content, dict) or content.get("role") not in ("user", "model"):
        return f"* GenerateContentRequest.{where}.role: Please use a valid role: user, model."
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        return f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty."
    for index, part in enumerate(parts):
        spot = f"{where}.parts[{index}]"
        if not isinstance(part, dict):
            return f"Invalid value at '{spot}': not an object"
        if "thoughtSignature" in part and not _base64(part["thoughtSignature"]):
            return (
                f"Invalid value at '{spot}.thought_signature' (TYPE_BYTES), Base64 decoding failed"
            )
        data = part.get("inlineData")
        if data is not None and (
            not isinstance(data, dict) or not data.get("mimeType") or not _base64(data.get("data"))
        ):
            return f"Invalid value at '{spot}.inline_data': mimeType and base64 data required"
        call = part.get("functionCall")
        if call is not None and (
            not isinstance(call, dict) or not call.get("name")
            or not isinstance(call.get("args", {}), dict)
        ):  # fmt: skip
            return f"* GenerateContentRequest.{spot}.function_call: name and object args required"
        response = part.get("functionResponse")
        if response is not None and (
            not isinstance(response, dict) or not response.get("name")
            or not isinstance(response.get("response"), dict)
        ):  # fmt: skip
            return (
                f"* GenerateContentRequest.{spot}.function_response: name and object "
                "response required"
            )
    return None


def _calls(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["functionCall"] for p in content["parts"] if "functionCall" in p]


def _responses(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["functionResponse"] for p in content["parts"] if "functionResponse" in p]


def _call_turn_problem(contents: list[dict[str, Any]]) -> str | None:
    for position, content in enumerate(contents):
        calls = _calls(content) if content["role"] == "model" else []
        responses = _responses(content) if content["role"] == "user" else []
        if calls:
            if position == 0 or contents[position - 1]["role"] != "user":
                return (
                    "Please ensure that function call turn comes immediately after a user "
                    "turn or after a function response turn."
                )
            following = contents[position + 1] if position + 1 < len(contents) else None
            answers = _responses(following) if following and following["role"] == "user" else []
            if len(answers) != len(calls):
                return (
                    "Please ensure that the number of function response parts is equal to "
                    "the number of function call parts of the function call turn."
                )
        if responses:
            previous = contents[position - 1] if position else None
            made = _calls(previous) if previous and previous["role"] == "model" else []
            if not made:
                return (
                    "Please ensure that function response turn comes immediately after a "
                    "function call turn."
                )
            problem = _matching_problem(made, responses)
            if problem is not None:
                return problem
    return None


def _matching_problem(calls: list[dict[str, Any]], responses: list[dict[str, Any]]) -> str | None:
    open_calls = list(calls)
    for response in responses:
        for call in open_calls:
            if call.get("id") and response.get("id"):
                same = call["id"] == response["id"]
            else:
                same = call["name"] == response["name"]
            if same:
                open_calls.remove(call)
                break
        else:
            return (
                f"function response {response.get('name')!r} (id {response.get('id')!r}) "
                "does not match any function call of the previous turn."
            )
    return None


def _signature_problem(contents: list[dict[str, Any]], issued: Callable[[str], bool]) -> str | None:
    start = 0
    for position, content in enumerate(contents):
        prompt = any("functionResponse" not in p for p in content["parts"])
        if content["role"] == "user" and prompt:
            start = position
    for position in range(start, len(contents)):
        content = contents[position]
        if content["role"] != "model":
            continue
        for part in content["parts"]:
            if "functionCall" in part:
                signature = part.get("thoughtSignature")
                if signature != SKIP_SIGNATURE and not (signature and issued(signature)):
                    name = part["functionCall"]["name"]
                    return (
                        f"Unable to submit request because function call `{name}` in the "
                        f"{position + 1}. content block is missing a `thought_signature`."
                    )
                break  # only the first call of a turn is signed
    return None


def _config_problem(body: dict[str, Any]) -> str | None:
    declared = {
        declaration.get("name")
        for tool in body.get("tools") or []
        for declaration in (tool.get("functionDeclarations") or [])
    }
    calling = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    for name in calling.get("allowedFunctionNames") or []:
        if name not in declared:
            return f"* GenerateContentRequest.tool_config: function {name!r} is not declared."
    config = body.get("generationConfig") or {}
    schemas = [key for key in ("responseJsonSchema", "responseSchema") if key in config]
    if len(schemas) == 2:
        return "responseSchema and responseJsonSchema cannot both be set."
    if schemas and config.get("responseMimeType") != "application/json":
        return (
            "* GenerateContentRequest.generation_config.response_mime_type: "
            "application/json is required with a response schema."
        )
    return None


def _base64(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
    return True
