"""Issue 22, "found in the first hour": what a new user meets first, through the real parts
(the Anthropic SDK and ``requests`` against the local wire servers, real subprocesses)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from agent_sync import Agent, repair_history
from agent_sync.__main__ import run_demo
from agent_sync.errors import ModelError, ModelStreamError, UsageError
from agent_sync.events import Done, TextDelta
from agent_sync.models import AnthropicModel, OpenAIModel
from agent_sync.testing import ScriptedModel
from agent_sync.testing.anthropic_server import AnthropicServer
from agent_sync.testing.openai_server import OpenAIServer

API_KEY = "sk-ant-first-hour"
_ANTHROPIC_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "ANTHROPIC_FEDERATION_RULE_ID",
    "ANTHROPIC_ORGANIZATION_ID",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_CONFIG_DIR",
)


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


def _cancel_mid_answer(model: object) -> tuple[Done, list[str]]:
    """Stream an answer, cancel it (this stream's own handle) once text has arrived;
    return the ``Done`` event and the text deltas seen."""
    agent = Agent(model)  # type: ignore[arg-type]
    deltas: list[str] = []
    done: Done | None = None
    with agent.stream("Say hello") as stream:
        for event in stream:
            if isinstance(event, TextDelta):
                deltas.append(event.text)
                stream.cancel("user")
            elif isinstance(event, Done):
                done = event
    assert done is not None
    return done, deltas


# -- 19, 20: a cancelled run counts what the provider reported; its text is the model's --


def test_a_cancelled_anthropic_call_counts_the_input_tokens_and_the_first_token(
    anthropic_server: AnthropicServer,
) -> None:
    # message_start (usage: 37 input tokens), block start, ping, "Hello ", then silence
    anthropic_server.add_turns(
        {"text": "Hello there, this never ends", "chunk_size": 6, "stall_after": 4,
         "usage": {"inputTokens": 37, "outputTokens": 9}}
    )  # fmt: skip
    model = AnthropicModel(
        "claude-test", client_args={"base_url": anthropic_server.base_url, "api_key": API_KEY}
    )
    try:
        done, deltas = _cancel_mid_answer(model)
    finally:
        model.close()
    result = done.result
    assert deltas == ["Hello "]
    assert result.stop_reason == "cancelled"
    assert result.usage["inputTokens"] == 37  # reported by message_start before the cancel
    assert result.usage["totalTokens"] >= 37
    assert result.metrics.time_to_first_token_s is not None
    assert 0 < result.metrics.time_to_first_token_s <= result.metrics.duration_s


def test_a_cancelled_openai_call_times_its_first_token() -> None:
    """OpenAI reports usage only in its last chunk (nothing to count before a cancel), but
    the text that streamed still times the first token."""
    stalls = {"text": "Hello there, never ends", "chunk_size": 6, "stall_after": 2}
    with OpenAIServer([stalls]) as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="sk-first-hour")
        try:
            done, deltas = _cancel_mid_answer(model)
        finally:
            model.close()
    result = done.result
    assert (deltas, result.stop_reason, result.text) == (["Hello "], "cancelled", "Hello ")
    assert result.metrics.time_to_first_token_s is not None


def test_a_finished_anthropic_call_still_counts_the_final_usage_once(
    anthropic_server: AnthropicServer,
) -> None:
    anthropic_server.add_turns({"text": "Hi!", "usage": {"inputTokens": 37, "outputTokens": 9}})
    model = AnthropicModel(
        "claude-test", client_args={"base_url": anthropic_server.base_url, "api_key": API_KEY}
    )
    try:
        result = Agent(model).invoke("Say hello")
    finally:
        model.close()
    assert (result.usage["inputTokens"], result.usage["outputTokens"]) == (37, 9)
    assert result.usage["totalTokens"] == 46


def test_a_cancelled_result_text_is_the_model_text_without_the_marker() -> None:
    model = ScriptedModel([{"text": "Hello world, and more", "chunk_size": 6}])
    done, deltas = _cancel_mid_answer(model)
    result = done.result
    assert result.stop_reason == "cancelled"
    assert result.text == "".join(deltas) == "Hello "
    assert done.to_dict()["text"] == "Hello "  # the SSE done frame's text
    assert result.message["content"][-1] == {"text": "Cancelled by user"}  # history keeps it


def test_a_run_cancelled_before_any_text_has_empty_text() -> None:
    agent = Agent(ScriptedModel(["never sent"]))
    with agent.stream("hi") as stream:
        stream.cancel()
        events = list(stream)
    last = events[-1]
    assert isinstance(last, Done)
    result = last.result
    assert result.stop_reason == "cancelled"
    assert result.text == ""
    assert agent.messages[-1]["content"] == [{"text": "Cancelled by user"}]


# -- 21: a missing API key is named, and nothing is sent --


def test_a_missing_anthropic_key_is_named_before_anything_is_sent(
    anthropic_server: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _ANTHROPIC_ENV:
        monkeypatch.delenv(name, raising=False)
    anthropic_server.add_turns("never sent")
    model = AnthropicModel("claude-test", client_args={"base_url": anthropic_server.base_url})
    agent = Agent(model)
    try:
        with pytest.raises(ModelError, match="ANTHROPIC_API_KEY") as caught:
            agent.invoke("hi")
    finally:
        model.close()
    assert not isinstance(caught.value, ModelStreamError)
    assert caught.value.retryable is False
    assert anthropic_server.requests == []
    assert agent.messages == [{"role": "user", "content": [{"text": "hi"}]}]


def test_an_openai_model_on_the_default_url_without_a_key_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIModel("gpt-4o-mini")
    try:
        with pytest.raises(ModelError, match="OPENAI_API_KEY") as caught:
            Agent(model).invoke("hi")  # the test network guard would refuse any connect
    finally:
        model.close()
    assert caught.value.retryable is False
    assert "nothing was sent" in str(caught.value)


def test_a_local_openai_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIServer(["local answer"]) as server:
        model = OpenAIModel("llama", base_url=server.url)
        try:
            assert Agent(model).invoke("hi").text == "local answer"
        finally:
            model.close()


# -- 22: repair_history never "repairs" a history of another shape into nothing --


def test_repair_history_refuses_an_openai_style_history_naming_the_shape() -> None:
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    with pytest.raises(UsageError, match="message 0: a 'system' message") as caught:
        repair_history(history)
    assert '"content": [{"text": "..."}' in str(caught.value)
    assert "system_prompt" in str(caught.value)


@pytest.mark.parametrize(
    ("message", "named"),
    [
        ({"role": "tool", "tool_call_id": "c1", "content": "42"}, "'tool' message"),
        (
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
            "'tool_calls'",
        ),
        ({"role": "user", "content": [{"type": "text", "text": "hi"}]}, 'a "type"'),
    ],
)
def test_repair_history_refuses_other_message_shapes(
    message: dict[str, object], named: str
) -> None:
    with pytest.raises(UsageError, match=named):
        repair_history([{"role": "user", "content": [{"text": "q"}]}, message])


def test_repair_history_takes_plain_string_text_as_a_text_block() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert repair_history(history) == [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"text": "hello"}]},
    ]


# -- 23: clear errors instead of silence --


def test_a_bad_cancel_mode_is_refused_even_when_idle() -> None:
    agent = Agent(ScriptedModel(["x"]))
    with pytest.raises(UsageError, match="mode"):
        agent.cancel(mode="later")  # type: ignore[arg-type]


def test_a_bad_cancel_mode_is_refused_on_a_running_stream() -> None:
    agent = Agent(ScriptedModel([{"text": "a long answer", "chunk_size": 2}]))
    with agent.stream("hi") as stream:
        next(stream)
        with pytest.raises(UsageError, match="mode"):
            agent.cancel(mode="later")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="mode"):
            stream.cancel(mode="later")  # type: ignore[arg-type]
        assert not any(isinstance(e, Done) and e.result.stop_reason == "cancelled" for e in stream)


@pytest.mark.parametrize("prompt", [["a"], b"bytes", 5, {"text": "a"}])
def test_system_prompt_must_be_text(prompt: object) -> None:
    with pytest.raises(UsageError, match="system_prompt must be a str or None"):
        Agent(ScriptedModel(["x"]), system_prompt=prompt)  # type: ignore[arg-type]


@pytest.mark.parametrize(("module", "extra"), [("flask", "flask"), ("django", "django")])
def test_web_glue_without_its_extra_names_the_extra(module: str, extra: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None  # as if not installed\n"
        "try:\n"
        f"    import agent_sync.web.{module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    assert f"agent_sync[{extra}]" in done.stdout
    assert f"{module} is not installed" in done.stdout


# -- 24: the demo refuses a non-positive --cancel-after, and says why a run was not cancelled --


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_demo_refuses_a_non_positive_cancel_after(value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent_sync", "demo", f"--cancel-after={value}"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 2
    assert "--cancel-after: must be a positive number of seconds" in done.stderr
    assert done.stdout == ""  # refused before any demo ran


def test_run_demo_refuses_a_non_positive_cancel_after() -> None:
    with pytest.raises(ValueError, match="positive"):
        run_demo(sys.stdout, cancel_after=0)
