"""Fixtures of the MCP tests: real servers nobody here wrote, with their traffic recorded.

* ``@modelcontextprotocol/server-everything`` (npm, pinned by ``tests/mcp_servers``'s
  lockfile; ``npm ci --prefix tests/mcp_servers`` installs it) over stdio and over
  streamable HTTP;
* ``mcp-server-time`` (PyPI, pinned in ``.ci/run``) over stdio.

Missing locally (no node, no ``npm ci``, no ``mcp`` extra), these tests skip with the
reason; on CI (``CI`` set) they fail instead, as the Redis tests do.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp._recording import RecordingProxy, TeeRecorder

if importlib.util.find_spec("mcp") is None and not os.environ.get("CI"):
    # without the extra the test modules cannot import agent_sync.mcp: not collected here
    # (on CI they are, and fail); test_extra.py checks the ImportError users get instead
    collect_ignore_glob = ["test_[!e]*.py"]
else:
    from agent_sync.mcp import MCPServer

OWN_SERVER = str(Path(__file__).with_name("_own_server.py"))
"""Our own SDK servers (``_own_server.py MODE``), for faults the real servers cannot show."""
SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
EVERYTHING_JS = (
    SERVERS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)


def need(missing: str | None) -> None:
    """Skip (fail on CI) when something a test needs is missing."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must install it: {missing}")
    pytest.skip(missing)


def _missing_mcp() -> str | None:
    if importlib.util.find_spec("mcp") is None:
        return "the mcp extra is not installed (pip install -e '.[mcp]')"
    return None


@pytest.fixture(autouse=True)
def _mcp_sdk() -> None:
    need(_missing_mcp())


@pytest.fixture(scope="session")
def node() -> str:
    found = shutil.which("node")
    need(None if found else "node is not installed (apt-get install nodejs npm)")
    need(None if EVERYTHING_JS.is_file() else "npm ci --prefix tests/mcp_servers was not run")
    assert found is not None
    return found


@pytest.fixture
def everything_cmd(node: str) -> list[str]:
    """The command of server-everything over stdio."""
    return [node, str(EVERYTHING_JS), "stdio"]


@pytest.fixture
def time_cmd() -> list[str]:
    """The command of mcp-server-time (stdio)."""
    need(
        None
        if importlib.util.find_spec("mcp_server_time")
        else "mcp-server-time is not installed (pip install -e '.[test]' pins it)"
    )
    return [sys.executable, "-m", "mcp_server_time", "--local-timezone=UTC"]


@pytest.fixture
def recorder() -> Iterator[TeeRecorder]:
    """Records what a stdio server run under ``recorder.wrap(command)`` receives."""
    found = TeeRecorder()
    yield found
    found.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class HttpEverything:
    """server-everything's streamable HTTP server, as a child process on a free port."""

    def __init__(self, node: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process = subprocess.Popen(
            [node, str(EVERYTHING_JS), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        line = self.process.stderr.readline()  # written once it listens
        assert f"listening on port {self.port}" in line, line

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)
        if self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture(scope="module")
def http_everything(node: str) -> Iterator[HttpEverything]:
    """One HTTP server-everything per test module: each test's client opens an MCP session
    of its own on it (node starting per test cost seconds each on two busy cores). A test
    that stops or restarts a server starts its own ``HttpEverything``."""
    server = HttpEverything(node)
    yield server
    server.kill()


@pytest.fixture
def proxy(http_everything: HttpEverything) -> Iterator[RecordingProxy]:
    """A recording proxy in front of ``http_everything``."""
    found = RecordingProxy(http_everything.port)
    yield found
    found.close()


def stdio_no_grace(command: list[str], **options: Any) -> MCPServer:
    """A stdio server with no grace at close, for the tests that are not about its shutdown
    (test_faults.py's are): it is terminated at once, as it would be after the grace.
    server-everything exits ~0.35 s after its stdin closes at the end of a session (not at
    all while a cancelled long operation runs), our own SDK server ~0.12 s: each close
    waited for that."""
    return MCPServer.stdio(command, shutdown_timeout=0, **options)


def own_stdio(mode: str, **options: Any) -> MCPServer:
    """Our own server in ``mode`` (see ``_own_server.py``), as :func:`stdio_no_grace`."""
    return stdio_no_grace([sys.executable, OWN_SERVER, mode], **options)


@pytest.fixture(params=["stdio", "http"])
def everything(
    request: pytest.FixtureRequest, everything_cmd: list[str], recorder: TeeRecorder
) -> Iterator[tuple[MCPServer, TeeRecorder | RecordingProxy]]:
    """server-everything on each transport, with what it received recorded."""
    if request.param == "stdio":
        server = stdio_no_grace(recorder.wrap(everything_cmd), name="everything")
        seen: TeeRecorder | RecordingProxy = recorder
    else:
        seen = request.getfixturevalue("proxy")
        server = MCPServer.http(seen.url, name="everything")  # type: ignore[union-attr]
    yield server, seen
    server.close()
