"""The cache flag reaches the model per agent and per call, and usage sums cache figures."""

from __future__ import annotations

import pytest

from agent_sync import Agent
from agent_sync.errors import UsageError
from agent_sync.testing import ScriptedModel


def test_agent_cache_reaches_the_model_and_invoke_overrides_it() -> None:
    model = ScriptedModel(["one", "two", "three"])
    agent = Agent(model, cache="short")
    agent.invoke("a")
    agent.invoke("b", cache="long")
    agent.invoke("c", cache=None)
    assert [call.cache for call in model.calls] == ["short", "long", None]


def test_stream_takes_the_cache_flag_too() -> None:
    model = ScriptedModel(["one"])
    with Agent(model).stream("a", cache="long") as events:
        for _ in events:
            pass
    assert model.calls[0].cache == "long"


@pytest.mark.parametrize("bad", ["forever", "", 1, True])
def test_an_unknown_cache_mode_is_a_usage_error(bad: object) -> None:
    with pytest.raises(UsageError, match="cache"):
        Agent(ScriptedModel(["x"]), cache=bad)  # type: ignore[arg-type]
    agent = Agent(ScriptedModel(["x"]))
    with pytest.raises(UsageError, match="cache"):
        agent.invoke("a", cache=bad)  # type: ignore[arg-type]
    assert agent.messages == [] and not agent.is_running


def test_usage_sums_cache_figures_over_model_calls() -> None:
    model = ScriptedModel(
        [
            {
                "tool_calls": [{"name": "noop", "input": {}}],
                "usage": {"inputTokens": 10, "outputTokens": 1, "cacheWriteInputTokens": 100},
            },
            {
                "text": "done",
                "usage": {"inputTokens": 2, "outputTokens": 3, "cacheReadInputTokens": 100},
            },
        ]
    )

    def noop() -> str:
        """Does nothing."""
        return "ok"

    result = Agent(model, tools=[noop]).invoke("go")
    assert result.usage == {
        "inputTokens": 12,
        "outputTokens": 4,
        "totalTokens": 16,
        "cacheReadInputTokens": 100,
        "cacheWriteInputTokens": 100,
    }


def test_usage_has_no_cache_keys_when_none_were_reported() -> None:
    result = Agent(ScriptedModel(["plain"])).invoke("a")
    assert set(result.usage) == {"inputTokens", "outputTokens", "totalTokens"}
