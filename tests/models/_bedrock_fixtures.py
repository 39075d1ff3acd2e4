"""The ``server`` fixture and the boto3 session helper of the BedrockModel test modules."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import boto3
import pytest

from agent_sync.testing.bedrock_server import BedrockServer


@pytest.fixture
def server() -> Iterator[BedrockServer]:
    """A started :class:`BedrockServer`."""
    with BedrockServer() as srv:
        yield srv


@functools.cache
def aws_session(
    access_key: str, secret_key: str, session_token: str | None = None
) -> boto3.Session:
    """A session with static credentials in us-east-1 (each module uses its own keys).

    One per set of keys for the whole test process: a new boto3 session loads botocore's
    endpoint and service JSON again (about a second of CPU on these cores), and nothing in
    a test changes a session (a model builds its client from it, under a lock)."""
    return boto3.Session(
        aws_session_token=session_token,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
    )
