"""The public surface: pinned exports, lazy optional imports, the demo, py.typed."""

from __future__ import annotations

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
        "CancelScope",
        "CancelledError",
        "ConcurrentInvocationError",
        "ContextWindowOverflowError",
        "Message",
        "ModelError",
        "ModelThrottledError",
        "Prompt",
        "RetryPolicy",
        "Tool",
        "ToolContext",
        "ToolError",
        "UsageError",
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


def test_offline_demo_streams_then_cancels_with_a_valid_history() -> None:
    out = io.StringIO()
    assert cli.main.__doc__
    from agent_sync._demo import run

    assert run(out, cancel_after=0.2) == 0
    text = out.getvalue()
    assert "[tool] get_weather" in text
    assert "stop_reason='cancelled' cancel_reason='timer'" in text
    assert "validate_history: OK" in text


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
