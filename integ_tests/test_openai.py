"""OpenAIModel against a real OpenAI-compatible server. Skipped unless OPENAI_API_KEY is set.

Environment: ``OPENAI_API_KEY``; optional ``OPENAI_BASE_URL`` (e.g. a vLLM or Ollama server,
which then needs any non-empty key) and ``AGENT_SYNC_OPENAI_MODEL`` (default gpt-4o-mini).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agent_sync.models import OpenAIModel
from integ_tests._scenarios import (
    check_cancel_while_streaming,
    check_text,
    check_tool_round_trip,
)

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY"),
]

MODEL_ID = os.environ.get("AGENT_SYNC_OPENAI_MODEL", "gpt-4o-mini")
BASE_URL = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")


@pytest.fixture
def model() -> Iterator[OpenAIModel]:
    m = OpenAIModel(MODEL_ID, base_url=BASE_URL, temperature=0, max_tokens=400)
    yield m
    m.close()


def test_text(model: OpenAIModel) -> None:
    check_text(model)


def test_tool_round_trip(model: OpenAIModel) -> None:
    check_tool_round_trip(model)


def test_cancel_while_streaming(model: OpenAIModel) -> None:
    check_cancel_while_streaming(model)
