"""A tool's input checked by the one JSON-schema validator (jsonschema, Draft 2020-12): the
signature's schema, or an explicit ``input_schema=`` with every keyword enforced; problems
go back to the model as an error result naming the field, and the function never runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_sync import Agent, Approve, ToolContext, UsageError, tool
from agent_sync.testing import ScriptedModel

CALLS: list[dict[str, Any]] = []

BOOK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 9},
        "when": {"type": "string", "format": "date"},
        "who": {"oneOf": [{"$ref": "#/$defs/name"}, {"type": "integer"}]},
    },
    "required": ["code", "seats"],
    "additionalProperties": False,
    "$defs": {"name": {"type": "string", "minLength": 2}},
}


@tool(input_schema=BOOK_SCHEMA)
def book(code: str, seats: int, context: ToolContext, **extra: Any) -> str:
    """Book seats on a flight."""
    CALLS.append({"code": code, "seats": seats, **extra})
    return f"booked {seats} on {code}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLS.clear()


def _answer(tool_input: dict[str, Any]) -> dict[str, Any]:
    turns = [{"tool_calls": [{"name": "book", "input": tool_input}]}, "ok"]
    agent = Agent(ScriptedModel(turns), tools=[book])
    agent.invoke("book it")
    result: dict[str, Any] = agent.messages[2]["content"][0]["toolResult"]
    return result


@pytest.mark.parametrize(
    ("tool_input", "problem"),
    [
        ({"code": "osl", "seats": 1}, "input.code: 'osl' does not match"),
        ({"code": "OSL", "seats": 0}, "input.seats: 0 is less than the minimum of 1"),
        ({"code": "OSL", "seats": 1, "when": "soon"}, "input.when: 'soon' is not a 'date'"),
        ({"code": "OSL", "seats": 1, "who": "x"}, "input.who: 'x' is too short"),
        ({"code": "OSL", "seats": 1, "pet": "cat"}, "'pet' was unexpected"),
        ({"code": "OSL"}, "input: missing required parameter 'seats'"),
    ],
)
def test_an_explicit_input_schema_is_enforced_before_the_function_runs(
    tool_input: dict[str, Any], problem: str
) -> None:
    result = _answer(tool_input)
    assert result["status"] == "error"
    assert problem in result["content"][0]["text"]
    assert CALLS == []


def test_valid_input_calls_the_function_with_it_as_keywords() -> None:
    result = _answer({"code": "OSL", "seats": 2, "when": "2026-11-26", "who": "Ann"})
    assert result["status"] == "success"
    assert CALLS == [{"code": "OSL", "seats": 2, "when": "2026-11-26", "who": "Ann"}]
    assert book.spec["inputSchema"]["json"] == BOOK_SCHEMA  # what the model sees


def test_the_schema_is_the_tools_own_copy() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}

    def find(q: str = "") -> str:
        return q

    made = tool(input_schema=schema)(find)
    schema["properties"]["q"]["type"] = "integer"
    assert made.validate_input({"q": "x"}) == []


def test_a_schema_is_checked_once_per_process_and_kept_apart_from_its_dict() -> None:
    """Checking a schema against the metaschema takes milliseconds and the same schemas
    come back (a sub-agent tool per request, an MCP server's tools per connection): one
    validator per schema text, built from its own copy, and never a refusal kept."""
    from agent_sync._jsonschema import compile_schema, problems

    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
    first = compile_schema(schema, "tool a: input_schema")
    assert compile_schema(json.loads(json.dumps(schema)), "tool b: input_schema") is first
    schema["properties"]["q"]["type"] = "integer"  # the caller changes its dict afterwards
    assert problems(first, {"q": "x"}, "input") == []
    assert problems(compile_schema(schema, "tool c: input_schema"), {"q": "x"}, "input") != []
    bad = {"type": "strin"}
    for where in ("tool d: input_schema", "tool e: input_schema"):
        with pytest.raises(UsageError, match=f"^{where} is not a valid JSON schema"):
            compile_schema(bad, where)


def _two(a: str, b: int = 0) -> str:
    return a


def _positional(a: str, /) -> str:
    return a


@pytest.mark.parametrize(
    ("fn", "schema", "message"),
    [
        (_two, {"type": "object", "properties": {"a": {"type": "strin"}}}, "not a valid"),
        (_two, {"type": "object", "properties": {"a": {"pattern": "("}}}, "is not a 'regex'"),
        (
            _two,
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}},
            "cannot be resolved",
        ),
        (_two, {"type": "object", "properties": {"a": {"format": "zip"}}}, "unknown format 'zip'"),
        (_two, {"type": "array"}, 'needs "type": "object"'),
        (_two, {"type": "object", "required": ["a"], "properties": {"c": {}}}, "no parameter c"),
        (_two, {"type": "object", "properties": {"a": {}}}, 'list it under "required"'),
        (_positional, {"type": "object", "required": ["a"]}, "no positional-only"),
        (_two, ["a"], "must be a JSON schema (a dict)"),
    ],
)
def test_an_unusable_input_schema_is_refused_when_the_tool_is_built(
    fn: Any, schema: Any, message: str
) -> None:
    with pytest.raises(UsageError, match="input_schema") as raised:
        tool(input_schema=schema)(fn)
    assert message in str(raised.value)


def test_signature_tools_problems_are_worded_as_the_schema_validators() -> None:
    """pydantic checks a signature tool's input (tests/tools/test_typed_params.py); its
    problems read as those of an explicit schema, so the model sees one style."""

    @tool
    def add(numbers: list[int], label: str | None = None) -> str:
        """Add numbers."""
        return str(sum(numbers))

    assert add.validate_input({"numbers": [1, 2]}) == []
    assert add.validate_input({"numbers": [1, "2"], "label": 3, "x": 1}) == [
        "input.numbers[1]: expected integer, got string",
        "input.label: expected string, got integer",
        "input: unknown parameter 'x' (expected: label, numbers)",
    ]


@tool(
    name="sign_off",
    requires_approval=True,
    decision_schema={
        "type": "object",
        "properties": {"ticket": {"type": "string", "pattern": "^T-[0-9]+$"}},
        "required": ["ticket"],
    },
)
def strict_sign_off(path: str) -> str:
    """Sign a path off."""
    CALLS.append({"path": path})
    return "signed"


@tool(name="sign_off", requires_approval=True, decision_schema={"type": "object"})
def loose_sign_off(path: str) -> str:
    """Sign a path off (a later version with a looser schema)."""
    CALLS.append({"path": path})
    return "signed"


@pytest.mark.parametrize("tools", [[], [loose_sign_off]], ids=["tool-gone", "tool-changed"])
def test_the_schema_stored_with_the_request_rules_a_resume_elsewhere(tools: list[Any]) -> None:
    """Another agent (as in another process) resumes the paused run from the store: the
    decision is checked against the schema the request was made with, every keyword."""
    from agent_sync.errors import DecisionValidationError
    from agent_sync.stores import MemoryRunStore

    store = MemoryRunStore()
    asks = {"tool_calls": [{"name": "sign_off", "input": {"path": "/r"}}]}
    first = Agent(ScriptedModel([asks]), tools=[strict_sign_off], store=store, conversation_id="c")
    (request,) = first.invoke("sign").approvals
    other = Agent(ScriptedModel(["done"]), tools=tools, store=store, conversation_id="c")
    assert other.is_paused
    with pytest.raises(DecisionValidationError, match=r"data\.ticket: 'T-x' does not match"):
        other.resume({request.id: Approve(data={"ticket": "T-x"})})
    assert other.is_paused and CALLS == []


def test_a_default_that_is_not_json_is_left_out_of_the_schema() -> None:
    def scale(factor: float = float("nan"), limit: float = float("inf"), n: int = 2) -> str:
        return str(factor)

    made = tool(scale)  # was fine before the schema had to be plain JSON: still fine
    assert made.input_schema["properties"] == {
        "factor": {"type": "number"},
        "limit": {"type": "number"},
        "n": {"type": "integer", "default": 2},
    }


KEYWORDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
        "code": {"type": "string", "maxLength": 3, "enum": ["A", "BB", "CCC"]},
        "tags": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"const": "x"}},
        "mail": {"type": "string", "format": "email"},
        "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"},
        "kind": {"not": {"const": "bad"}, "allOf": [{"type": "string"}]},
        "card": {"type": "string"},
        "cvc": {"type": "string"},
    },
    "required": ["n"],
    "dependentRequired": {"card": ["cvc"]},
    "if": {"properties": {"kind": {"const": "vip"}}, "required": ["kind"]},
    "then": {"required": ["code"]},
}


def _any(**kwargs: Any) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("tool_input", "problem"),
    [
        ({"n": 0}, "input.n: 0 is less than or equal to the minimum of 0"),
        ({"n": 0.3}, "input.n: 0.3 is not a multiple of 0.5"),
        ({"n": 1, "code": "DDDD"}, "input.code: 'DDDD' is not one of 'A', 'BB', 'CCC'"),
        ({"n": 1, "tags": []}, "input.tags: [] should be non-empty"),
        ({"n": 1, "tags": ["x", "x"]}, "input.tags: ['x', 'x'] has non-unique elements"),
        ({"n": 1, "tags": ["y"]}, "input.tags[0]: 'x' was expected"),
        ({"n": 1, "mail": "nobody"}, "input.mail: 'nobody' is not a 'email'"),
        ({"n": 1, "id": "nope"}, "input.id: 'nope' is not a 'uuid'"),
        ({"n": 1, "ip": "1.2.3"}, "input.ip: '1.2.3' is not a 'ipv4'"),
        ({"n": 1, "kind": "bad"}, "input.kind: 'bad' should not be valid under {'const': 'bad'}"),
        ({"n": 1, "card": "4111"}, "input: 'cvc' is a dependency of 'card'"),
        ({"n": 1, "kind": "vip"}, "input: missing required parameter 'code'"),
    ],
)
def test_every_keyword_of_an_explicit_input_schema_is_enforced(
    tool_input: dict[str, Any], problem: str
) -> None:
    made = tool(name="pay", input_schema=KEYWORDS)(_any)
    assert problem in made.validate_input(tool_input)
    good = {"n": 1.5, "code": "BB", "tags": ["x"], "mail": "a@b.c", "kind": "vip"}
    assert made.parse_input(good) == (good, [])  # passed as it is: no conversion
