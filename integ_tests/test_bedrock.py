"""BedrockModel against the real Bedrock runtime. Skipped without AWS credentials + AWS_REGION.

Environment: AWS credentials (environment, profile or role) and ``AWS_REGION``; optional
``AGENT_SYNC_BEDROCK_MODEL`` (default: a Claude Haiku inference profile, which needs model
access enabled in the account).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agent_sync import Agent
from agent_sync.models import BedrockModel
from integ_tests._scenarios import (
    check_cancel_while_streaming,
    check_text,
    check_tool_round_trip,
)


def _has_credentials() -> bool:
    if not os.environ.get("AWS_REGION"):
        return False
    try:
        import boto3

        return boto3.Session().get_credentials() is not None
    except Exception:  # noqa: BLE001 (no usable configuration: skip)
        return False


pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(not _has_credentials(), reason="needs AWS credentials and AWS_REGION"),
]

MODEL_ID = os.environ.get("AGENT_SYNC_BEDROCK_MODEL", "us.anthropic.claude-3-5-haiku-20241022-v1:0")


@pytest.fixture
def model() -> Iterator[BedrockModel]:
    bedrock = BedrockModel(MODEL_ID, temperature=0, max_tokens=400)
    yield bedrock
    bedrock.close()


def test_non_streaming_converse() -> None:
    plain = BedrockModel(MODEL_ID, streaming=False, temperature=0, max_tokens=100)
    try:
        result = Agent(plain).invoke("Say hello in Norwegian, one word.")
    finally:
        plain.close()
    assert result.stop_reason == "end_turn" and result.text.strip()


def test_text(model: BedrockModel) -> None:
    check_text(model)


def test_tool_round_trip(model: BedrockModel) -> None:
    check_tool_round_trip(model)


def test_cancel_while_streaming(model: BedrockModel) -> None:
    check_cancel_while_streaming(model)
