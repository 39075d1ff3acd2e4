"""What each kind of ``output_type`` is on the wire and how its answer is validated."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

from agent_sync.errors import AgentSyncError, OutputValidationError, UsageError
from agent_sync.output import OUTPUT_TOOL_NAME, output_spec
from agent_sync.output._spec import OutputProblems


class Line(pydantic.BaseModel):
    name: str
    price: float


class Invoice(pydantic.BaseModel):
    """An invoice with its lines."""

    number: str
    lines: list[Line]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def _problems(spec_type: Any, raw: Any) -> list[str]:
    with pytest.raises(OutputProblems) as caught:
        output_spec(spec_type).validate(raw)
    return caught.value.problems


def test_a_pydantic_model_is_its_own_object_schema_and_validates_to_the_model() -> None:
    spec = output_spec(Invoice)
    assert spec.name == OUTPUT_TOOL_NAME and not spec.wrapped
    assert spec.schema["type"] == "object" and spec.schema["required"] == ["number", "lines"]
    assert "An invoice with its lines." in spec.description
    invoice = spec.validate({"number": "7", "lines": [{"name": "tea", "price": "2.5"}]})
    assert invoice == Invoice(number="7", lines=[Line(name="tea", price=2.5)])
    assert spec.to_json(invoice) == {"number": "7", "lines": [{"name": "tea", "price": 2.5}]}


def test_each_problem_names_its_field() -> None:
    found = _problems(Invoice, {"number": 7, "lines": [{"name": "tea", "price": "lots"}]})
    assert found[0].startswith("number: Input should be a valid string")
    assert found[1].startswith("lines.0.price: Input should be a valid number")


def test_dataclasses_and_typeddicts_are_objects_on_the_wire() -> None:
    assert output_spec(Point).validate({"x": 1, "y": 2}) == Point(1, 2)
    assert output_spec(Movie).validate({"title": "Heat", "year": 1995}) == {
        "title": "Heat",
        "year": 1995,
    }
    assert not output_spec(Point).wrapped and not output_spec(Movie).wrapped


@pytest.mark.parametrize(
    ("output_type", "wire", "output"),
    [
        (list[int], [1, 2], [1, 2]),
        (int, 3, 3),
        (str, "hi", "hi"),
        (Colour, "red", Colour.RED),
        (datetime.date, "2024-05-01", datetime.date(2024, 5, 1)),
        (list[Line], [{"name": "a", "price": 1}], [Line(name="a", price=1)]),
    ],
)
def test_other_types_travel_wrapped_in_an_object_and_come_back_unwrapped(
    output_type: Any, wire: Any, output: Any
) -> None:
    spec = output_spec(output_type)
    assert spec.wrapped
    assert spec.schema["type"] == "object" and spec.schema["required"] == ["result"]
    assert spec.validate({"result": wire}) == output
    assert spec.to_json(output) == wire


def test_a_wrapped_type_keeps_its_definitions_at_the_root_where_refs_point() -> None:
    schema = output_spec(list[Line]).schema
    assert "$defs" in schema and "Line" in schema["$defs"]
    assert schema["properties"]["result"]["items"] == {"$ref": "#/$defs/Line"}


def test_a_wrapped_answer_without_its_key_says_what_is_missing() -> None:
    assert _problems(list[int], [1, 2]) == [
        "the answer must be a JSON object with the key 'result'"
    ]
    assert _problems(list[int], {"result": [1, "x"]})[0].startswith("result.1:")


def test_a_json_schema_dict_validates_every_keyword_and_the_output_is_the_dict() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^T-[0-9]+$"}},
        "required": ["code"],
    }
    spec = output_spec(schema)
    assert spec.validate({"code": "T-1"}) == {"code": "T-1"}
    assert "does not match" in _problems(schema, {"code": "x"})[0]
    assert output_spec({"type": "integer", "minimum": 1}).validate({"result": 4}) == 4


def test_an_invalid_schema_or_type_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not a valid JSON schema"):
        output_spec({"type": "strin"})
    with pytest.raises(UsageError, match="has no JSON schema"):
        output_spec(object())


def test_text_answers_may_come_in_a_code_fence() -> None:
    assert output_spec(int).parse_text('```json\n{"result": 3}\n```') == 3
    assert "not valid JSON" in _problems_text('{"result": 3')


def _problems_text(text: str) -> str:
    with pytest.raises(OutputProblems) as caught:
        output_spec(int).parse_text(text)
    return caught.value.problems[0]


def test_output_validation_error_carries_the_problems_and_the_raw_answer() -> None:
    error = OutputValidationError(["a: bad", "b: worse"], {"a": 1})
    assert isinstance(error, AgentSyncError)
    assert error.errors == ["a: bad", "b: worse"] and error.output == {"a": 1}
    assert str(error) == "the model's output is invalid: a: bad (and 1 more)"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_number_in_a_text_answer_is_a_problem(number: str) -> None:
    """What goes out (a stored state holds the output as JSON) must be plain JSON."""
    for spec_type, text in ((Line, '{"name": "x", "price": %s}'), (float, '{"result": %s}')):
        with pytest.raises(OutputProblems) as caught:
            output_spec(spec_type).parse_text(text % number)
        assert "finite" in caught.value.problems[0] or "JSON" in caught.value.problems[0]


def test_a_large_finite_exponent_still_validates() -> None:
    assert output_spec(Line).parse_text('{"name": "x", "price": 1e200}').price == 1e200


class Node(pydantic.BaseModel):
    """A tree."""

    name: str
    children: list[Node] = []


def test_a_recursive_model_is_an_object_on_the_wire_not_wrapped() -> None:
    """pydantic's schema of a recursive model is a root ``$ref``: resolved, it is an object."""
    spec = output_spec(Node)
    assert not spec.wrapped
    assert spec.schema["type"] == "object" and "name" in spec.schema["properties"]
    assert spec.schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert "Node" in spec.schema["$defs"]  # the recursion still resolves
    tree = {"name": "a", "children": [{"name": "b"}]}
    assert spec.validate(tree) == Node(name="a", children=[Node(name="b")])
    assert spec.parse_text('{"name": "a"}') == Node(name="a")


def test_a_schema_dict_whose_root_is_a_reference_to_an_object_is_an_object() -> None:
    spec = output_spec(Node.model_json_schema())
    assert not spec.wrapped and spec.schema["type"] == "object"
    assert spec.validate({"name": "a", "children": []}) == {"name": "a", "children": []}
    assert _problems(Node.model_json_schema(), {"children": []})[0].startswith("output")


def test_a_root_reference_to_a_non_object_stays_wrapped() -> None:
    schema = {"$ref": "#/$defs/N", "$defs": {"N": {"type": "integer"}}}
    assert output_spec(schema).wrapped
    assert output_spec(schema).validate({"result": 3}) == 3


@pytest.mark.parametrize("output_type", [Invoice, list[int], {"type": "object"}])
def test_an_answer_nested_too_deep_is_a_problem_not_a_recursion_error(
    output_type: Any,
) -> None:
    deep = '{"result": ' + "[" * 3000 + "]" * 3000 + "}"
    with pytest.raises(OutputProblems) as caught:
        output_spec(output_type).parse_text(deep)
    assert caught.value.problems == ["the answer is nested deeper than 200 levels"]
