"""Running ``chat_client.mjs`` (the AI SDK's real chat engine, under node) from a test.

The script and the ``ai`` package it imports live in this folder; ``npm ci --prefix
tests/aisdk`` installs the pinned package (``.ci/run`` does). Missing locally (no node, or
no ``node_modules``), the tests that need it skip with the reason; on CI (``CI`` set) they
fail instead, as the Redis tests do.

    def test_chat(aisdk_client: ChatClient) -> None:
        lines = aisdk_client.run({"chat_id": "c1", "api": url, "actions": [...]})
        lines[-1]["messages"]  # the UI messages at the end
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["FOLDER", "ChatClient", "ChatClientError", "aisdk_client", "find_chat_client"]

FOLDER = Path(__file__).resolve().parent
"""``tests/aisdk``: the package.json, its lockfile and the script."""

_SCRIPT = FOLDER / "chat_client.mjs"
_EXIT_MEANINGS = {
    1: "the chat ended in an unexpected error",
    2: "bad script or crash",
    3: "a wait timed out",
}


class ChatClientError(AssertionError):
    """The script failed: its exit code, output lines and stderr are attached."""

    def __init__(self, returncode: int, lines: list[dict[str, Any]], stderr: str) -> None:
        meaning = _EXIT_MEANINGS.get(returncode, "failed")
        shown = "\n".join(json.dumps(line)[:4000] for line in lines[-3:])
        super().__init__(
            f"chat_client.mjs exited {returncode} ({meaning})\n{shown}\nstderr:\n{stderr[-4000:]}"
        )
        self.returncode = returncode
        self.lines = lines
        self.stderr = stderr


@dataclass(frozen=True)
class ChatClient:
    """The node program and the script, ready to run."""

    node: str
    """The ``node`` executable."""

    def run(
        self, script: Mapping[str, Any], *, timeout: float = 45.0, check: bool = True
    ) -> list[dict[str, Any]]:
        """Run one script (see the header of ``chat_client.mjs``); its checkpoint lines.

        Args:
            script: The script (``chat_id``, ``api`` or ``canned``, ``actions``...).
            timeout: Seconds before the process is killed (``subprocess.TimeoutExpired``);
                the script bounds each of its own waits by ``timeout_ms`` first.
            check: Raise :class:`ChatClientError` on a non-zero exit.
        """
        completed = subprocess.run(
            [self.node, str(_SCRIPT)],
            input=json.dumps(script),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=FOLDER,
            check=False,
        )
        lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
        if check and completed.returncode != 0:
            raise ChatClientError(completed.returncode, lines, completed.stderr)
        return lines


def find_chat_client() -> ChatClient | str:
    """The client, or why it cannot run here."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (apt-get install nodejs npm)"
    if not (FOLDER / "node_modules" / "ai" / "package.json").is_file():
        return "the ai package is not installed (npm ci --prefix tests/aisdk)"
    return ChatClient(node)


@pytest.fixture(scope="session")
def aisdk_client() -> ChatClient:
    """The AI SDK chat client; skips locally without node or the package, fails on CI."""
    found = find_chat_client()
    if isinstance(found, str):
        if os.environ.get("CI"):
            pytest.fail(f"CI must install it: {found}")
        pytest.skip(found)
    return found
