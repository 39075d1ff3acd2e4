"""Type-checked, not run by pytest: ``mypy --strict`` over this file fails if events stop narrowing.

``tests/test_docs.py`` runs mypy over it (and over the docs' ``match event`` examples); CI runs
the same check in ``.ci/run``. Each ``assert_type`` is an error under mypy the moment
``AgentEvent`` no longer narrows in that position.
"""

from __future__ import annotations

from typing_extensions import assert_type

from agent_sync import Agent, AgentEvent, AgentResult, AgentStream
from agent_sync.events import (
    ApprovalRequired,
    Done,
    GuardrailTripped,
    InputInjected,
    MessageComplete,
    ModelRetry,
    PartialOutput,
    ReasoningDelta,
    SubAgentEvent,
    TextDelta,
    ToolEnd,
    ToolProgress,
    ToolStart,
)
from agent_sync.messages import Message, ToolResult, ToolUse


def narrows_on_type(agent: Agent) -> None:
    stream = agent.stream("x")
    assert_type(stream, AgentStream)
    for event in stream:
        assert_type(event, AgentEvent)
        if event.type == "text":
            assert_type(event, TextDelta)
        elif event.type == "reasoning":
            assert_type(event, ReasoningDelta)
        elif event.type == "message":
            assert_type(event, MessageComplete)
        elif event.type == "retry":
            assert_type(event, ModelRetry)
        elif event.type == "tool_start":
            assert_type(event, ToolStart)
        elif event.type == "tool_progress":
            assert_type(event, ToolProgress)
        elif event.type == "tool_end":
            assert_type(event, ToolEnd)
        elif event.type == "input_injected":
            assert_type(event, InputInjected)
        elif event.type == "approval_required":
            assert_type(event, ApprovalRequired)
        elif event.type == "partial_output":
            assert_type(event, PartialOutput)
        elif event.type == "subagent":
            assert_type(event, SubAgentEvent)
        elif event.type == "guardrail":
            assert_type(event, GuardrailTripped)
        else:
            assert_type(event, Done)


def narrows_on_match_type(event: AgentEvent) -> str:
    match event.type:
        case "text":
            return assert_type(event, TextDelta).text
        case "done":
            return assert_type(event, Done).result.text
        case _:
            return ""


def narrows_on_isinstance(event: AgentEvent) -> None:
    if isinstance(event, ToolEnd):
        assert_type(event.result, ToolResult)
    elif isinstance(event, Done):
        assert_type(event.result, AgentResult)


def narrows_on_class_patterns(agent: Agent) -> None:
    for event in agent.stream("x"):
        match event:
            case TextDelta(text=text):
                assert_type(text, str)
            case ToolStart(tool_use=use):
                assert_type(use, ToolUse)
            case MessageComplete(message=message):
                assert_type(message, Message)
            case GuardrailTripped(name=name):
                assert_type(name, str)
            case Done(result=result):
                assert_type(result, AgentResult)
            case _:
                pass
