"""@tool: names, descriptions and JSON schemas from signatures and docstrings."""

from __future__ import annotations

from typing import Literal

import pytest

from agent_sync import ToolContext, UsageError, tool


def test_schema_from_hints_and_google_docstring() -> None:
    @tool
    def search(
        query: str,
        limit: int = 10,
        ratio: float = 0.5,
        exact: bool = False,
        tags: list[str] | None = None,
        order: Literal["asc", "desc"] = "asc",
        filters: dict[str, int] | None = None,
        note: str | None = None,
    ) -> str:
        """Search the catalogue.

        Longer explanation.

        Args:
            query: What to look for,
                possibly on two lines.
            limit (int): How many results.
            ratio: A ratio.
            exact: Exact match only.
            tags: Tags to filter by.
            order: Sort order.
            filters: Numeric filters.
            note: A note.

        Returns:
            The results.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the catalogue.\n\nLonger explanation."
    schema = search.input_schema
    assert schema["required"] == ["query"]
    props = schema["properties"]
    assert props["query"] == {
        "type": "string",
        "description": "What to look for, possibly on two lines.",
    }
    assert props["limit"] == {"type": "integer", "description": "How many results.", "default": 10}
    assert props["ratio"]["type"] == "number"
    assert props["exact"]["type"] == "boolean"
    assert props["tags"]["anyOf"] == [
        {"type": "array", "items": {"type": "string"}},
        {"type": "null"},
    ]
    assert props["order"]["enum"] == ["asc", "desc"]
    assert props["filters"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    assert props["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert search.spec == {
        "name": "search",
        "description": search.description,
        "inputSchema": {"json": schema},
    }
    assert search("direct call") == "direct call"  # still a plain function


def test_overrides_and_context_parameter_hidden() -> None:
    @tool(name="lookup_v2", description="Look things up.")
    def lookup(q: str, ctx: ToolContext) -> str:
        """Ignored docstring."""
        return q

    assert lookup.name == "lookup_v2"
    assert lookup.description == "Look things up."
    assert lookup.context_param == "ctx"
    assert list(lookup.input_schema["properties"]) == ["q"]


def test_validation_messages_speak_to_the_model() -> None:
    @tool
    def book(city: str, nights: int, kind: Literal["hotel", "hostel"] = "hotel") -> str:
        """Book a room."""
        return city

    assert book.validate_input({"city": "Oslo", "nights": 2}) == []
    problems = book.validate_input({"city": 5, "nights": True, "kind": "tent", "extra": 1})
    assert "input.city: expected string, got integer" in problems
    assert "input.nights: expected integer, got boolean" in problems
    assert "input.kind: Input should be 'hotel' or 'hostel' (got \"tent\")" in problems
    assert any("unknown parameter 'extra'" in p for p in problems)
    assert book.validate_input({}) == [
        "input: missing required parameter 'city'",
        "input: missing required parameter 'nights'",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        lambda: tool(lambda *args: None),
        lambda: tool(name="has space")(lambda: None),
    ],
)
def test_unsupported_definitions_raise_usage_error(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError):
        bad()


class Custom:
    """Not a JSON type."""


def test_unsupported_annotation_is_named_in_the_error() -> None:
    def f(x: Custom) -> None:
        """F."""

    with pytest.raises(UsageError, match="parameter x"):
        tool(f)


def test_no_docstring_falls_back_to_the_name() -> None:
    def ping() -> str:
        return "pong"

    assert tool(ping).description == "ping"
    assert tool(ping).input_schema == {"type": "object", "properties": {}}
