"""Bedrock's ``gen_ai.response.id`` (issue 31 item 6, a loose end): Converse answers carry no
id of their own, so a chat span had none; AWS gives every response an ``x-amzn-RequestId``
header (botocore's ``ResponseMetadata.RequestId``), the id its support asks for. It is now
the ``messageStop``'s ``responseId`` on both operations, ``converse-stream`` and ``converse``.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_sync import Agent, _tracing
from agent_sync.models import BedrockModel
from agent_sync.testing.bedrock_server import BedrockServer
from tests.models._bedrock_fixtures import aws_session


@pytest.mark.parametrize("streaming", [True, False], ids=["converse-stream", "converse"])
def test_each_call_carries_the_request_id_aws_gave_it(streaming: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracing.use_provider(provider)
    try:
        with BedrockServer(["one", "two"]) as server:
            session = aws_session("AKIDRESPONSEID", "response-id-secret")
            model = BedrockModel(
                "test-model",
                endpoint_url=server.base_url,
                boto_session=session,
                streaming=streaming,
            )
            try:
                agent = Agent(model)
                agent.invoke("first")
                agent.invoke("second")
            finally:
                model.close()
    finally:
        _tracing.use_provider(None)
    chats = [span for span in exporter.get_finished_spans() if span.name == "chat test-model"]
    ids = [dict(span.attributes or {}).get("gen_ai.response.id") for span in chats]
    assert len(ids) == 2 and all(isinstance(found, str) and found for found in ids), ids
    if streaming:  # the scripted server gives each stream its own id, as AWS does
        assert ids[0] != ids[1]
    else:  # its converse answer's header, always this id
        assert ids == ["req-1", "req-1"]
