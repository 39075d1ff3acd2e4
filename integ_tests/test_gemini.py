"""GeminiModel against the real Gemini API. Skipped unless GEMINI_API_KEY is set.

Environment: ``GEMINI_API_KEY``; optional ``AGENT_SYNC_GEMINI_MODEL`` (default
gemini-2.5-flash).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agent_sync.models import GeminiModel
from integ_tests._scenarios import (
    check_cancel_while_streaming,
    check_text,
    check_tool_round_trip,
)

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(not os.environ.get("GEMINI_API_KEY"), reason="needs GEMINI_API_KEY"),
]

MODEL_ID = os.environ.get("AGENT_SYNC_GEMINI_MODEL", "gemini-2.5-flash")


@pytest.fixture
def model() -> Iterator[GeminiModel]:
    m = GeminiModel(MODEL_ID, temperature=0, maxOutputTokens=1000)
    yield m
    m.close()


def test_text(model: GeminiModel) -> None:
    check_text(model)


def test_tool_round_trip(model: GeminiModel) -> None:
    check_tool_round_trip(model)


def test_cancel_while_streaming(model: GeminiModel) -> None:
    check_cancel_while_streaming(model)
