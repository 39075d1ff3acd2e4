"""The public surface: pinned exports, lazy optional imports, the demo, py.typed."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest

import agent_sync
from agent_sync import __main__ as cli


def test_exported_names_are_pinned() -> None:
    assert agent_sync.__all__ == [
        "Agent",
        "AgentEvent",
        "AgentMetrics",
        "AgentResult",
        "AgentStream",
        "AgentSyncError",
        "ApprovalRequest",
        "Approve",
        "CancelScope",
        "CancelToken",
        "CancelledError",
        "ConcurrentInvocationError",
        "ContextWindowOverflowError",
        "Deny",
        "HookError",
        "Message",
        "ModelError",
        "ModelThrottledError",
        "Prompt",
        "RetryPolicy",
        "Run",
        "RunSnapshot",
        "RunState",
        "Step",
        "Tool",
        "ToolContext",
        "ToolError",
        "UsageError",
        "UsageLimits",
        "repair_history",
        "tool",
        "validate_history",
    ]
    for name in agent_sync.__all__:
        assert hasattr(agent_sync, name), name


def test_design_contract_imports_work() -> None:
    from agent_sync import Agent, AgentResult, ToolContext, tool  # noqa: F401
    from agent_sync.errors import (  # noqa: F401
        AgentSyncError,
        ConcurrentInvocationError,
        ModelError,
        ModelThrottledError,
    )
    from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel  # noqa: F401
    from agent_sync.testing import ScriptedModel  # noqa: F401


def test_runs_contract_imports_work() -> None:
    """DESIGN.md section 5 names."""
    from agent_sync import CancelToken, Run, RunSnapshot, RunState  # noqa: F401
    from agent_sync.events import InputInjected  # noqa: F401
    from agent_sync.hooks import (  # noqa: F401
        AfterModelCall,
        AfterToolCall,
        BeforeModelCall,
        BeforeToolCall,
    )


def test_core_internals_are_private() -> None:
    """The loop's machinery is not importable under public-looking names."""
    import importlib.util

    for name in ("agent_sync.loop", "agent_sync.stream"):
        assert importlib.util.find_spec(name) is None, name
    # The history rules are shared by the run and the stores (agent_sync._history, below
    # both): private, and absent from every public namespace.
    import agent_sync
    from agent_sync import run

    for public in (agent_sync, run):
        assert not {"close_turn", "add_user_blocks"} & set(public.__all__)


def test_the_tool_executor_module_exports_only_the_executor_kind() -> None:
    # ToolBatch and ToolCall are the run's machinery (agent_sync.tools._batch), not API.
    from agent_sync.tools import executor

    assert executor.__all__ == ["ExecutorKind"]
    assert not hasattr(executor, "ToolBatch") and not hasattr(executor, "ToolCall")


def test_importing_the_package_loads_no_provider_sdk_or_web_framework() -> None:
    code = (
        "import sys, agent_sync, agent_sync.models, agent_sync.testing;"
        "heavy = ('anthropic', 'boto3', 'botocore', 'flask', 'django');"
        "heavy = [m for m in heavy if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_package_is_typed() -> None:
    assert (Path(agent_sync.__file__).parent / "py.typed").exists()


@pytest.mark.timeout(60)
def test_offline_demo_streams_then_cancels_with_a_valid_history() -> None:
    out = io.StringIO()
    assert cli.run_demo(out, cancel_after=0.2) == 0
    text = out.getvalue()
    assert "[tool] get_weather" in text
    assert "stop_reason='cancelled' cancel_reason='timer'" in text
    assert "validate_history: OK" in text


@pytest.mark.timeout(120)
def test_demo_command_runs_outside_the_checkout(tmp_path: Path) -> None:
    # From an empty directory, as after `pip install agent_sync`: the demo must not need
    # examples/ (not installed) nor the checkout on sys.path.
    out = subprocess.run(
        [sys.executable, "-m", "agent_sync", "demo", "--cancel-after", "0.2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr
    assert "validate_history: OK" in out.stdout


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["nonsense"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_no_demo_code_ships_in_the_package() -> None:
    # The web chat demo lives in examples/chat_demo/; the CLI demo is agent_sync/__main__.py.
    for name in ("agent_sync._demo", "agent_sync.web.demo"):
        assert importlib.util.find_spec(name) is None, name


def test_license_is_apache_2_declared_as_an_spdx_expression() -> None:
    # setuptools >= 77 takes an SPDX string plus license-files (PEP 639) and warns about
    # the old `{text = ...}` table and License classifiers; older ones reject the string.
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parent.parent
    text = (root / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    config = tomllib.loads((root / "pyproject.toml").read_text())
    project = config["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    floors = [r for r in config["build-system"]["requires"] if r.startswith("setuptools")]
    assert floors == ["setuptools>=77"]
