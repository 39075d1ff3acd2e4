"""The GenAI semantic conventions' names the spans and metrics use, from
``opentelemetry-semantic-conventions`` (never strings of ours: ``tests/test_tracing_genai.py``
fails on a string literal naming a GenAI attribute in this package).

Imported only once OpenTelemetry is found (:mod:`._otel`); an ``ImportError`` or
``AttributeError`` here (a semantic-conventions release without one of these names) turns
tracing off.
"""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv._incubating.attributes import server_attributes as _server
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as _metrics
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import exception_attributes as _exception

AGENT_NAME = _gen_ai.GEN_AI_AGENT_NAME
CONVERSATION_ID = _gen_ai.GEN_AI_CONVERSATION_ID
INPUT_MESSAGES = _gen_ai.GEN_AI_INPUT_MESSAGES
OPERATION_NAME = _gen_ai.GEN_AI_OPERATION_NAME
OUTPUT_MESSAGES = _gen_ai.GEN_AI_OUTPUT_MESSAGES
OUTPUT_TYPE = _gen_ai.GEN_AI_OUTPUT_TYPE
PROVIDER_NAME = _gen_ai.GEN_AI_PROVIDER_NAME
REQUEST_MAX_TOKENS = _gen_ai.GEN_AI_REQUEST_MAX_TOKENS
REQUEST_MODEL = _gen_ai.GEN_AI_REQUEST_MODEL
REQUEST_STREAM = _gen_ai.GEN_AI_REQUEST_STREAM
REQUEST_TEMPERATURE = _gen_ai.GEN_AI_REQUEST_TEMPERATURE
REQUEST_TOP_P = _gen_ai.GEN_AI_REQUEST_TOP_P
RESPONSE_FINISH_REASONS = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
RESPONSE_ID = _gen_ai.GEN_AI_RESPONSE_ID
RESPONSE_MODEL = _gen_ai.GEN_AI_RESPONSE_MODEL
TOKEN_TYPE = _gen_ai.GEN_AI_TOKEN_TYPE
TOOL_CALL_ARGUMENTS = _gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
TOOL_CALL_ID = _gen_ai.GEN_AI_TOOL_CALL_ID
TOOL_CALL_RESULT = _gen_ai.GEN_AI_TOOL_CALL_RESULT
TOOL_NAME = _gen_ai.GEN_AI_TOOL_NAME
TOOL_TYPE = _gen_ai.GEN_AI_TOOL_TYPE
USAGE_CACHE_CREATION_INPUT_TOKENS = _gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
USAGE_CACHE_READ_INPUT_TOKENS = _gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
USAGE_INPUT_TOKENS = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
USAGE_OUTPUT_TOKENS = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS

CHAT = _gen_ai.GenAiOperationNameValues.CHAT.value
EXECUTE_TOOL = _gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
INVOKE_AGENT = _gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
OUTPUT_JSON = _gen_ai.GenAiOutputTypeValues.JSON.value
OUTPUT_TEXT = _gen_ai.GenAiOutputTypeValues.TEXT.value
TOKEN_INPUT = _gen_ai.GenAiTokenTypeValues.INPUT.value
TOKEN_OUTPUT = _gen_ai.GenAiTokenTypeValues.OUTPUT.value

ANTHROPIC = _gen_ai.GenAiProviderNameValues.ANTHROPIC.value
AWS_BEDROCK = _gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value
GCP_GEMINI = _gen_ai.GenAiProviderNameValues.GCP_GEMINI.value
OPENAI = _gen_ai.GenAiProviderNameValues.OPENAI.value

SERVER_ADDRESS = _server.SERVER_ADDRESS
SERVER_PORT = _server.SERVER_PORT
ERROR_TYPE = _error.ERROR_TYPE
EXCEPTION_MESSAGE = _exception.EXCEPTION_MESSAGE
EXCEPTION_STACKTRACE = _exception.EXCEPTION_STACKTRACE
EXCEPTION_TYPE = _exception.EXCEPTION_TYPE

CLIENT_TOKEN_USAGE = _metrics.GEN_AI_CLIENT_TOKEN_USAGE
CLIENT_OPERATION_DURATION = _metrics.GEN_AI_CLIENT_OPERATION_DURATION
