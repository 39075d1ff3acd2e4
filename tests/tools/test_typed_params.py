"""Typed tool parameters (issue 17 item 5): any type pydantic validates, the schema from
pydantic, the model's input validated by pydantic (strictly, as JSON) with each failure sent
back naming its field, and the function called with real objects."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import uuid
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from agent_sync import Agent, ToolContext, UsageError, tool, validate_history
from agent_sync.testing import ScriptedModel

SEEN: list[dict[str, Any]] = []


class Trip(BaseModel):
    """A trip to book."""

    origin: str = Field(description="IATA code of the departure airport.")
    destination: str


class Cabin(enum.Enum):
    ECONOMY = "economy"
    BUSINESS = "business"


@dataclasses.dataclass
class Traveller:
    name: str
    age: int = 30


class Address(TypedDict):
    city: str
    zip: str


class Booking(BaseModel):
    reference: uuid.UUID
    when: datetime.date
    price: Decimal


@tool
def book(
    trip: Trip,
    seats: Annotated[int, Field(ge=1, le=9, description="How many seats.")],
    when: datetime.date,
    context: ToolContext,
    cabin: Cabin = Cabin.ECONOMY,
    travellers: list[Traveller] | None = None,
    address: Address | None = None,
    request_id: uuid.UUID | None = None,
    at: datetime.datetime | None = None,
    price: Decimal | None = None,
    legs: list[Trip] = [],  # noqa: B006 - never mutated: the default the model sees
    meal: Literal["veg", "any"] = "any",
) -> Booking:
    """Book a trip.

    Args:
        trip: Where from and to.
        seats: Ignored: the Field's description wins.
        when: The day of departure.
        cabin: The cabin class.
    """
    SEEN.append(
        {
            "trip": trip,
            "seats": seats,
            "when": when,
            "cabin": cabin,
            "travellers": travellers,
            "address": address,
            "request_id": request_id,
            "at": at,
            "price": price,
            "legs": legs,
            "meal": meal,
        }
    )
    return Booking(reference=uuid.UUID(int=1), when=when, price=Decimal("99.50"))


@pytest.fixture(autouse=True)
def _clear() -> None:
    SEEN.clear()


def _call(tool_input: dict[str, Any], tools: list[Any] | None = None) -> tuple[Agent, Any]:
    turns = [{"tool_calls": [{"name": "book", "input": tool_input}]}, "done"]
    agent = Agent(ScriptedModel(turns), tools=tools or [book])
    assert agent.invoke("book it").text == "done"  # the run goes on whatever the input
    assert validate_history(agent.messages) == []
    return agent, agent.messages[2]["content"][0]["toolResult"]


GOOD = {"trip": {"origin": "OSL", "destination": "BER"}, "seats": 2, "when": "2026-12-01"}


def test_the_tool_receives_real_objects_and_its_typed_return_is_json() -> None:
    _, result = _call(
        {
            **GOOD,
            "cabin": "business",
            "travellers": [{"name": "Ann"}],
            "address": {"city": "Oslo", "zip": "0150"},
            "request_id": "00000000-0000-0000-0000-000000000007",
            "at": "2026-12-01T08:30:00+01:00",
            "price": "12.50",
            "legs": [{"origin": "BER", "destination": "OSL"}],
            "meal": "veg",
        }
    )
    (seen,) = SEEN
    assert seen["trip"] == Trip(origin="OSL", destination="BER")
    assert seen["seats"] == 2 and seen["when"] == datetime.date(2026, 12, 1)
    assert seen["cabin"] is Cabin.BUSINESS
    assert seen["travellers"] == [Traveller(name="Ann", age=30)]
    assert seen["address"] == {"city": "Oslo", "zip": "0150"}
    assert seen["request_id"] == uuid.UUID(int=7)
    assert seen["at"] == datetime.datetime(
        2026, 12, 1, 8, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    assert seen["price"] == Decimal("12.50") and seen["legs"] == [
        Trip(origin="BER", destination="OSL")
    ]
    assert result["status"] == "success"
    assert result["content"] == [
        {
            "json": {
                "reference": "00000000-0000-0000-0000-000000000001",
                "when": "2026-12-01",
                "price": "99.50",
            }
        }
    ]


def test_defaults_are_the_functions_when_the_model_leaves_them_out() -> None:
    _call(GOOD)
    (seen,) = SEEN
    assert seen["cabin"] is Cabin.ECONOMY and seen["travellers"] is None and seen["legs"] == []


def test_the_schema_comes_from_pydantic_without_the_context() -> None:
    schema = book.input_schema
    Draft202012Validator.check_schema(schema)
    assert json.loads(json.dumps(schema, allow_nan=False)) == schema  # plain JSON
    props = schema["properties"]
    assert "context" not in props
    assert schema["required"] == ["trip", "seats", "when"]
    assert props["seats"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 9,
        "description": "How many seats.",  # Annotated[..., Field(description=)] wins
    }
    assert props["when"] == {
        "type": "string",
        "format": "date",
        "description": "The day of departure.",
    }
    assert props["trip"]["$ref"] == "#/$defs/Trip"
    assert props["trip"]["description"] == "Where from and to."  # the docstring's Args
    trip = schema["$defs"]["Trip"]
    assert trip["description"] == "A trip to book."
    assert trip["properties"]["origin"] == {
        "type": "string",
        "description": "IATA code of the departure airport.",
    }  # no per-field titles: tokens for nothing
    assert props["cabin"]["default"] == "economy"  # an Enum default as its JSON value
    assert schema["$defs"]["Cabin"]["enum"] == ["economy", "business"]
    assert props["request_id"]["anyOf"][0] == {"type": "string", "format": "uuid"}
    assert props["legs"]["items"] == {"$ref": "#/$defs/Trip"} and props["legs"]["default"] == []
    assert props["meal"] == {"type": "string", "enum": ["veg", "any"], "default": "any"}
    assert "title" not in schema


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"seats": 0}, "input.seats: Input should be greater than or equal to 1 (got 0)"),
        ({"seats": 10}, "input.seats: Input should be less than or equal to 9 (got 10)"),
        ({"seats": "2"}, "input.seats: expected integer, got string"),  # strict: JSON types
        ({"seats": True}, "input.seats: expected integer, got boolean"),
        ({"when": "soon"}, "input.when: Input should be a valid date in the format YYYY-MM-DD"),
        ({"trip": {"origin": "OSL"}}, "input.trip: missing required field 'destination'"),
        ({"trip": "OSL-BER"}, "input.trip: expected object, got string"),
        (
            {"cabin": "first"},
            "input.cabin: Input should be 'economy' or 'business' (got \"first\")",
        ),
        ({"travellers": [{"name": 5}]}, "input.travellers[0].name: expected string, got integer"),
        ({"request_id": "nope"}, "input.request_id: Input should be a valid UUID"),
        ({"address": {"city": "Oslo"}}, "input.address: missing required field 'zip'"),
        ({"pets": 1}, "input: unknown parameter 'pets' (expected: address, at, cabin"),
    ],
)
def test_invalid_input_goes_back_to_the_model_naming_each_field(
    change: dict[str, Any], problem: str
) -> None:
    _, result = _call({**GOOD, **change})
    assert SEEN == []  # the function never ran
    assert result["status"] == "error"
    text = result["content"][0]["text"]
    assert text.startswith("Invalid input for tool 'book': ")
    assert problem in text


def test_every_problem_is_named_at_once() -> None:
    _, result = _call({"trip": {}, "seats": 0})
    text = result["content"][0]["text"]
    for problem in (
        "input.trip: missing required field 'origin'",
        "input.trip: missing required field 'destination'",
        "input.seats: Input should be greater than or equal to 1",
        "input: missing required parameter 'when'",
    ):
        assert problem in text


def test_a_union_names_its_members_in_json_words() -> None:
    @tool
    def pick(key: int | str, value: float = 0.0) -> str:
        return f"{key!r}={value!r}"

    assert pick.validate_input({"key": 1.5}) == [
        "input.key: expected integer or string, got number"
    ]
    assert pick.parse_input({"key": "a", "value": 2}) == ({"key": "a", "value": 2.0}, [])


def test_a_field_default_and_its_constraints_apply() -> None:
    @tool
    def page(limit: int = Field(10, ge=1, description="Rows per page.")) -> str:
        return str(limit)

    assert page.input_schema["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "default": 10,
        "description": "Rows per page.",
    }
    assert page.parse_input({}) == ({"limit": 10}, [])  # pydantic fills the Field's default
    assert page.validate_input({"limit": 0}) == [
        "input.limit: Input should be greater than or equal to 1 (got 0)"
    ]


def test_a_generic_context_is_hidden_even_when_its_deps_type_cannot_be_resolved() -> None:
    class LocalDeps:  # local: "ToolContext[LocalDeps]" cannot be resolved by name
        pass

    def lookup(key: str, ctx: ToolContext[LocalDeps]) -> str:
        return key

    made = tool(lookup)
    assert made.context_param == "ctx"
    assert list(made.input_schema["properties"]) == ["key"]


class _Custom:
    """No pydantic schema."""


def _positional(a: str, /) -> str:
    return a


def _custom(x: _Custom) -> str:
    return "x"


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_positional, "parameter a is positional-only"),
        (_custom, "parameter x: unsupported type annotation"),
    ],
)
def test_what_pydantic_cannot_take_is_refused_when_the_tool_is_built(fn: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        tool(fn)


def test_a_plain_signatures_schema_is_unchanged() -> None:
    """What the hand-written builder made for plain types, pydantic makes too (the wire
    bytes, hence prompt caches, of existing tools stay as they were)."""

    @tool
    def get_weather(city: str, unit: Literal["C", "F"] = "C", days: int | None = None) -> str:
        """Weather.

        Args:
            city: City name.
        """
        return city

    assert get_weather.input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name."},
            "unit": {"type": "string", "enum": ["C", "F"], "default": "C"},
            "days": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        },
        "required": ["city"],
    }


def test_a_model_local_to_a_function_resolves_under_postponed_annotations() -> None:
    """This module has ``from __future__ import annotations``: ``trip: LocalTrip`` is the
    text "LocalTrip", which the function's module does not know; the names of the code that
    made the tool do (as pydantic resolves a model's own fields)."""

    class LocalTrip(BaseModel):
        destination: str

    @tool(name="go")
    def go(trip: LocalTrip, when: datetime.date) -> str:
        return f"{trip.destination} on {when}"

    @tool
    def go_plain(trip: LocalTrip) -> str:
        return trip.destination

    arguments, problems = go.parse_input({"trip": {"destination": "BER"}, "when": "2026-12-01"})
    assert problems == [] and arguments is not None
    assert arguments["trip"] == LocalTrip(destination="BER")
    assert go_plain.input_schema["properties"]["trip"] == {"$ref": "#/$defs/LocalTrip"}


def test_an_annotation_nothing_resolves_is_named() -> None:
    def lost(trip: Nowhere) -> str:  # type: ignore[name-defined]  # noqa: F821
        return "x"

    with pytest.raises(UsageError, match="cannot resolve the type hint of parameter trip"):
        tool(lost)


def test_a_signature_made_again_shares_its_validator_and_each_tool_keeps_its_schema() -> None:
    """A tool defined in a function (for each request) is built again and again: pydantic's
    adapter is made once per signature, while each tool's schema stays its own, with its
    own docstring and defaults."""

    def make(default: int, doc: str) -> Any:
        def pick(context: ToolContext, cabin: Cabin, seats: int = default) -> str:
            return f"{cabin.value} x{seats}"

        pick.__doc__ = f"Pick a cabin.\n\nArgs:\n    cabin: {doc}\n"
        return tool(pick)

    first, second = make(1, "first doc"), make(2, "second doc")
    assert first._arguments._adapter is second._arguments._adapter
    first.input_schema["properties"]["cabin"]["description"] = "changed"
    cabin = second.input_schema["properties"]["cabin"]
    assert cabin["description"] == "second doc"
    assert second.input_schema["properties"]["seats"]["default"] == 2
    assert first.validate_input({"cabin": "first"}) != []  # not a Cabin: each validates
    assert second.validate_input({"cabin": "business", "seats": 3}) == []
