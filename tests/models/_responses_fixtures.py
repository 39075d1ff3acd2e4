"""The ``server`` and ``model`` fixtures of the OpenAIResponsesModel test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync.models import OpenAIResponsesModel
from agent_sync.testing import ResponsesServer


def responses_fixtures(api_key: str) -> tuple[Any, Any]:
    """``server, model = responses_fixtures(KEY)`` at module level (pytest finds them).

    ``server``: a started :class:`ResponsesServer`; ``model``: an ``OpenAIResponsesModel``
    ("gpt-test", timeout (5, 30)) on it with ``api_key``, closed after the test.
    """

    @pytest.fixture
    def server() -> Iterator[ResponsesServer]:
        with ResponsesServer() as s:
            yield s

    @pytest.fixture
    def model(server: ResponsesServer) -> Iterator[OpenAIResponsesModel]:
        m = OpenAIResponsesModel("gpt-test", base_url=server.url, api_key=api_key, timeout=(5, 30))
        yield m
        m.close()

    return server, model
