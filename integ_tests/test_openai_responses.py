"""OpenAIResponsesModel against the real Responses API. Skipped unless OPENAI_API_KEY is set.

Environment: ``OPENAI_API_KEY``; optional ``OPENAI_BASE_URL`` (an Azure OpenAI v1 endpoint
takes ``AZURE_OPENAI_API_KEY`` instead) and ``AGENT_SYNC_RESPONSES_MODEL`` (default
gpt-5-mini, with low reasoning effort and a summary, so reasoning items go back and forth).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agent_sync.models import OpenAIResponsesModel
from integ_tests._scenarios import (
    check_cancel_while_streaming,
    check_text,
    check_tool_round_trip,
)

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(
        not (os.environ.get("OPENAI_API_KEY") or os.environ.get("AZURE_OPENAI_API_KEY")),
        reason="needs OPENAI_API_KEY (or AZURE_OPENAI_API_KEY for an Azure base URL)",
    ),
]

MODEL_ID = os.environ.get("AGENT_SYNC_RESPONSES_MODEL", "gpt-5-mini")
BASE_URL = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")


@pytest.fixture
def model() -> Iterator[OpenAIResponsesModel]:
    m = OpenAIResponsesModel(
        MODEL_ID,
        base_url=BASE_URL,
        max_output_tokens=2000,
        reasoning={"effort": "low", "summary": "auto"},
    )
    yield m
    m.close()


def test_text(model: OpenAIResponsesModel) -> None:
    check_text(model)


def test_tool_round_trip(model: OpenAIResponsesModel) -> None:
    check_tool_round_trip(model)


def test_cancel_while_streaming(model: OpenAIResponsesModel) -> None:
    check_cancel_while_streaming(model)
