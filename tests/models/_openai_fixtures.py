"""The ``server`` and ``model`` fixtures of the OpenAIModel test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync.models import OpenAIModel
from agent_sync.testing.openai_server import OpenAIServer


def openai_fixtures(api_key: str) -> tuple[Any, Any]:
    """``server, model = openai_fixtures(KEY)`` at module level (pytest finds them).

    ``server``: a started :class:`OpenAIServer`; ``model``: an ``OpenAIModel``
    ("gpt-test", timeout (5, 30)) on it with ``api_key`` (each module uses its own key),
    closed after the test.
    """

    @pytest.fixture
    def server() -> Iterator[OpenAIServer]:
        with OpenAIServer() as s:
            yield s

    @pytest.fixture
    def model(server: OpenAIServer) -> Iterator[OpenAIModel]:
        m = OpenAIModel("gpt-test", base_url=server.url, api_key=api_key, timeout=(5, 30))
        yield m
        m.close()

    return server, model
