"""retry_after_seconds: the one retry-after parser every provider uses."""

from __future__ import annotations

import email.utils
import time

import pytest
import requests.structures

from agent_sync.models._wire import retry_after_seconds, shorten


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # ms wins: more precise
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_delta_seconds_and_milliseconds(headers: object, expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_http_date_becomes_seconds_from_now() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    seconds = retry_after_seconds({"retry-after": when})
    assert seconds is not None and 25 <= seconds <= 31


def test_case_insensitive_headers_work() -> None:
    headers = requests.structures.CaseInsensitiveDict({"Retry-After": "4"})
    assert retry_after_seconds(headers) == 4.0


def test_shorten_cuts_long_text() -> None:
    assert shorten("x" * 500, 10) == "x" * 10 + "..."
    assert shorten("short") == "short"
