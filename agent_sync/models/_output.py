"""How a provider asks for structured output: the shared part of each wire's mechanism.

A :class:`~agent_sync.models.base.ModelRequest` with ``output`` set asks for an answer
matching ``output.schema``. Each provider maps it to the best its wire has:

* OpenAI-compatible: ``response_format`` ``json_schema`` (``strict`` where the schema can
  be made strict, :func:`strict_schema`); a server that refuses ``response_format`` gets the
  output tool instead, remembered per model;
* Anthropic and Bedrock: the output tool (:func:`with_output_tool`), forced.

The output tool is a tool spec named ``output.name``; ``tool_choice`` forces it when it is
the only tool, and forces *a* tool call (``any``) when the agent has other tools, so the
model can still call them before it answers. Where a wire forbids forcing (Anthropic's
extended thinking), the tool is offered with ``auto`` and the model answers through it or in
text (the loop reads both).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from ..messages import ToolSpec
from .base import ModelRequest, OutputSchema

__all__ = [
    "output_tool_spec",
    "response_format",
    "strict_schema",
    "thinking_on",
    "with_output_tool",
]


def output_tool_spec(output: OutputSchema) -> ToolSpec:
    """The output tool: its input is the answer."""
    return {
        "name": output.name,
        "description": output.description,
        "inputSchema": {"json": output.schema},
    }


def with_output_tool(request: ModelRequest, *, force: bool = True) -> ModelRequest:
    """``request`` asking for its output through the output tool (``output`` cleared).

    Args:
        request: A request with ``output`` set (returned unchanged without).
        force: Force a tool call (``False``: ``auto``, where the wire forbids forcing).
    """
    output = request.output
    if output is None:
        return request
    choice: dict[str, Any] | None
    if not force:
        choice = {"auto": {}}
    elif request.tool_specs:
        choice = {"any": {}}  # the model may call the agent's tools before it answers
    else:
        choice = {"tool": {"name": output.name}}
    return replace(
        request,
        tool_specs=(*request.tool_specs, output_tool_spec(output)),
        tool_choice=choice,
        output=None,
    )


def thinking_on(params: dict[str, Any]) -> bool:
    """Whether ``params`` turn extended thinking on (Anthropic's ``thinking``, or Bedrock's
    inside ``additional_model_request_fields``): then a tool call may not be forced."""
    fields = params.get("additional_model_request_fields") or params.get(
        "additionalModelRequestFields"
    )
    candidates = [params.get("thinking")]
    if isinstance(fields, dict):
        candidates += [fields.get("thinking"), fields.get("reasoning_config")]
    return any(
        isinstance(found, dict) and found.get("type") in ("enabled", "adaptive")
        for found in candidates
    )


def response_format(output: OutputSchema) -> dict[str, Any]:
    """OpenAI's ``response_format`` for ``output``: ``json_schema``, strict where it can be.

    The strict form is made once per schema object (:func:`strict_schema` copies it whole:
    about 30 us for a small model, on every request of a typed run before); the schema and
    the result are read-only, as :class:`~agent_sync.models.base.ModelRequest` says."""
    strict = _strict_once(output.schema)
    return {
        "type": "json_schema",
        "json_schema": {
            "name": output.name,
            "description": output.description,
            "schema": strict if strict is not None else output.schema,
            "strict": strict is not None,
        },
    }


def strict_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``schema`` in OpenAI's strict form, or ``None`` where that would change its meaning.

    Strict mode needs every object closed (``additionalProperties: false``) and every
    property required. An object without ``additionalProperties`` is closed here (the
    validator drops or refuses extra keys anyway); an optional property, open
    ``additionalProperties`` or ``patternProperties`` cannot be made strict without
    changing what the schema accepts, so the schema is sent with ``strict: false``.
    """
    copied = copy.deepcopy(schema)
    return copied if _close(copied) else None


_STRICT_KEPT = 256
_strict_made: OrderedDict[int, tuple[dict[str, Any], dict[str, Any] | None]] = OrderedDict()
_strict_lock = threading.Lock()


def _strict_once(schema: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`strict_schema` of ``schema``, kept for the last few schema objects seen.

    Kept by the object's id, with the object itself: while an entry holds the schema its id
    cannot be reused by another one. An output type's schema is one object per process
    (``output_spec`` keeps it), so a typed agent's requests all find theirs."""
    key = id(schema)
    with _strict_lock:
        found = _strict_made.get(key)
        if found is not None and found[0] is schema:
            _strict_made.move_to_end(key)
            return found[1]
    strict = strict_schema(schema)
    with _strict_lock:
        _strict_made[key] = (schema, strict)
        if len(_strict_made) > _STRICT_KEPT:
            _strict_made.popitem(last=False)
    return strict


def _close(node: Any) -> bool:
    """Close every object schema in ``node`` in place; ``False`` if one cannot be."""
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" or "properties" in node:
        if "patternProperties" in node:
            return False
        if node.setdefault("additionalProperties", False) is not False:
            return False
        if set(node.get("required", [])) != set(node.get("properties", {})):
            return False
    for key in _SCHEMA_MAPS:
        members = node.get(key)
        if isinstance(members, dict) and not all(_close(m) for m in members.values()):
            return False
    for key in _SCHEMA_LISTS:
        members = node.get(key)
        if isinstance(members, list) and not all(_close(m) for m in members):
            return False
    return all(_close(node.get(key)) for key in _SCHEMAS)


_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMAS = ("items", "not", "contains", "if", "then", "else")
