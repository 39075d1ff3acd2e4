"""The ``server`` fixture and the boto3 session helper of the BedrockModel test modules."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from agent_sync.testing.bedrock_server import BedrockServer


@pytest.fixture
def server() -> Iterator[BedrockServer]:
    """A started :class:`BedrockServer`."""
    with BedrockServer() as srv:
        yield srv


def aws_session(access_key: str, secret_key: str) -> boto3.Session:
    """A session with static credentials in us-east-1 (each module uses its own keys)."""
    return boto3.Session(
        aws_access_key_id=access_key, aws_secret_access_key=secret_key, region_name="us-east-1"
    )
