"""Without the ``mcp`` extra, ``import agent_sync.mcp`` says which extra to install; a
server connected before a fork is usable in the child, which connects anew (the parent's
connection is neither used nor closed there)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

BLOCK_MCP = """
import sys
import warnings
class NoMcp:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ImportError("No module named 'mcp'", name="mcp")
sys.meta_path.insert(0, NoMcp())
try:
    import agent_sync.mcp
except ImportError as exc:
    print(exc)
"""


def test_without_the_extra_the_import_error_names_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_MCP],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert "pip install 'agent_sync[mcp]'" in done.stdout


def _child(server: Any, out: Any) -> None:
    echo = server.tools(include=["echo"])[0]
    out.put((echo(message="hi")["content"], server._connection.pid == os.getpid()))
    server.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_server_connected_before_a_fork_connects_anew_in_the_child(
    everything_cmd: list[str],
) -> None:
    from tests.mcp.conftest import stdio_no_grace

    # server-everything: each of the two starts is ~0.25 s, our own SDK server's ~0.5 s
    with stdio_no_grace(everything_cmd) as server:
        parent_connection = server._connection
        context = multiprocessing.get_context("fork")
        out = context.Queue()
        child = context.Process(target=_child, args=(server, out))
        with warnings.catch_warnings():  # 3.12+: forking with threads (ours: the loop's)
            warnings.simplefilter("ignore", DeprecationWarning)
            child.start()
        content, own = out.get(timeout=60)
        child.join(60)
        assert child.exitcode == 0
        assert content == [{"text": "Echo: hi"}] and own
        assert server._connection is parent_connection  # the parent's, untouched
        assert server.tools(include=["echo"])[0](message="hi")["status"] == "success"
