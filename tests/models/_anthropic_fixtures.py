"""The ``server`` and ``model`` fixtures of the AnthropicModel test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync.models import AnthropicModel
from agent_sync.testing.anthropic_server import AnthropicServer


def anthropic_fixtures(api_key: str) -> tuple[Any, Any]:
    """``server, model = anthropic_fixtures(API_KEY)`` at module level (pytest finds them).

    ``server``: a started :class:`AnthropicServer`; ``model``: an ``AnthropicModel``
    ("claude-test") on it, signed with ``api_key`` (each module uses its own key, so a
    leak check in one never passes because of another's), closed after the test.
    """

    @pytest.fixture
    def server() -> Iterator[AnthropicServer]:
        with AnthropicServer() as srv:
            yield srv

    @pytest.fixture
    def model(server: AnthropicServer) -> Iterator[AnthropicModel]:
        instance = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": api_key}
        )
        yield instance
        instance.close()

    return server, model
