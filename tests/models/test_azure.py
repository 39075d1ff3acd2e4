"""Azure OpenAI, for both OpenAI models: the key goes in the ``api-key`` header (never as a
bearer token), defaults to ``AZURE_OPENAI_API_KEY``, and reaches no log, repr or error.

The requests go to an Azure host name through the local fake acting as a plain HTTP proxy
(``requests`` sends the absolute URL to it), so the model sees the Azure ``base_url``
exactly as a user would write it and nothing leaves the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from agent_sync.errors import ModelError, ModelHTTPError
from agent_sync.models import OpenAIModel, OpenAIResponsesModel
from agent_sync.testing import OpenAIServer, ResponsesServer, ScriptedServer
from tests.fixtures.logs import RootRecords
from tests.fixtures.streams import assemble, collect

KEY = "azure-SECRET-9f8e7d6c5b4a3f2e1d0c"
AZURE = "http://my-resource.openai.azure.com/openai/v1"
FOUNDRY = "http://my-resource.cognitiveservices.azure.com/openai/v1"

Build = Callable[..., Any]
WIRES: dict[str, tuple[type[ScriptedServer], Build]] = {
    "chat": (OpenAIServer, OpenAIModel),
    "responses": (ResponsesServer, OpenAIResponsesModel),
}


@pytest.fixture(params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Iterator[tuple[ScriptedServer, Build]]:
    server_class, build = WIRES[request.param]
    with server_class() as server:
        yield server, build


def through(server: ScriptedServer) -> requests.Session:
    """A session whose plain-HTTP requests go through ``server`` as their proxy."""
    session = requests.Session()
    session.trust_env = False  # no proxy settings from the environment
    session.proxies = {"http": server.base_url}
    return session


@pytest.mark.parametrize("base_url", [AZURE, FOUNDRY])
def test_the_key_goes_in_the_api_key_header_not_as_a_bearer_token(
    wire: tuple[ScriptedServer, Build], base_url: str
) -> None:
    server, build = wire
    server.add_turns("hello from Azure")
    session = through(server)
    model = build("my-deployment", base_url=base_url, api_key=KEY, session=session)
    try:
        assert assemble(collect(model)).message["content"] == [{"text": "hello from Azure"}]
    finally:
        model.close()
        session.close()
    sent = server.requests[0]
    assert sent.path.startswith(base_url)  # the Azure URL itself, by way of the proxy
    assert sent.headers["api-key"] == "***"  # recorded redacted: it was sent
    assert "authorization" not in sent.headers


def test_other_hosts_keep_the_bearer_token(wire: tuple[ScriptedServer, Build]) -> None:
    server, build = wire
    server.add_turns("hi")
    model = build("gpt-test", base_url=f"{server.base_url}/v1", api_key=KEY)
    try:
        collect(model)
    finally:
        model.close()
    assert "authorization" in server.requests[0].headers
    assert "api-key" not in server.requests[0].headers


def test_the_azure_key_defaults_to_its_own_variable(
    wire: tuple[ScriptedServer, Build], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, build = wire
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-azure-0123456789")
    server.add_turns("hi")
    session = through(server)
    model = build("my-deployment", base_url=AZURE, session=session)
    try:
        collect(model)
    finally:
        model.close()
        session.close()
    assert server.requests[0].headers["api-key"] == "***"
    assert "authorization" not in server.requests[0].headers


def test_no_azure_key_fails_before_sending(
    wire: tuple[ScriptedServer, Build], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, build = wire
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-azure-0123456789")
    session = through(server)
    model = build("my-deployment", base_url=AZURE, session=session)
    try:
        with pytest.raises(ModelError, match="AZURE_OPENAI_API_KEY") as info:
            collect(model)
    finally:
        model.close()
        session.close()
    assert not info.value.retryable
    assert server.requests == []


def test_the_azure_key_reaches_no_log_repr_or_error(
    wire: tuple[ScriptedServer, Build], root_records: RootRecords
) -> None:
    server, build = wire
    server.add_turns({"status": 401, "error_message": f"Access denied: key {KEY} is invalid."})
    session = through(server)
    model = build("my-deployment", base_url=AZURE, api_key=KEY, session=session)
    try:
        with pytest.raises(ModelHTTPError) as info:
            collect(model)
    finally:
        model.close()
        session.close()
    error = info.value
    assert error.status == 401 and not error.retryable
    assert root_records.texts  # the capture works
    for surface in (str(error), repr(error), repr(error.args), str(error.body), repr(model),
                    "\n".join(root_records.texts)):  # fmt: skip
        assert KEY not in surface
        assert "SECRET" not in surface
