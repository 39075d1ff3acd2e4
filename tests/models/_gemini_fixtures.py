"""The ``server`` and ``model`` fixtures of the GeminiModel test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync.models import GeminiModel
from agent_sync.testing.gemini_server import GeminiServer


def gemini_fixtures(api_key: str, model_id: str = "gemini-2.5-flash") -> tuple[Any, Any]:
    """``server, model = gemini_fixtures(KEY)`` at module level (pytest finds them).

    ``server``: a started :class:`GeminiServer` accepting only ``api_key``; ``model``: a
    ``GeminiModel`` (``model_id``, timeout (5, 30)) on it with that key, closed after the test.
    """

    @pytest.fixture
    def server() -> Iterator[GeminiServer]:
        with GeminiServer(api_key=api_key) as s:
            yield s

    @pytest.fixture
    def model(server: GeminiServer) -> Iterator[GeminiModel]:
        m = GeminiModel(model_id, base_url=server.url, api_key=api_key, timeout=(5, 30))
        yield m
        m.close()

    return server, model
