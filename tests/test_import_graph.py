"""The package's parts import each other without a cycle (``python bench/import_graph.py``),
counting every import, and none climbs above its layer (``--every-import``).

A cycle between parts (the run imports the stores, the stores import the run's data) makes
the import order decide what works and forces every part of it to be read at once; an import
inside a function or under ``TYPE_CHECKING`` is a dependency too (a reader must know what it
names, and it decides what must be loaded). The layering is: shared data (``_run_state``,
``_history``) below the stores, the stores below the run, the run below the run log and the
agent, the agent below the web, Celery and MCP's ``serve``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import import_graph

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def graph() -> import_graph.Graph:
    """The package's graph at import time, read once for the tests that only look at it
    (each read parses every module: a fifth of a second)."""
    return import_graph.build()


@pytest.fixture(scope="module")
def every_graph() -> import_graph.Graph:
    """The same, counting every import."""
    return import_graph.build(every=True)


def test_the_package_has_no_import_cycle_between_its_parts(graph: import_graph.Graph) -> None:
    assert graph.find_cycle() is None, "\n".join(import_graph.describe(graph))


def test_the_stores_sit_below_the_run_and_the_run_below_the_agent(
    graph: import_graph.Graph,
) -> None:
    layer = {node: number for number, nodes in enumerate(graph.layers()) for node in nodes}
    assert (
        layer["agent_sync._run_state"]
        < layer["agent_sync.stores"]
        < layer["agent_sync.run"]
        < layer["agent_sync.agent"]
    )
    assert layer["agent_sync.stores"] < layer["agent_sync.web"]
    assert layer["agent_sync.run"] < layer["agent_sync._run_log"] < layer["agent_sync.web"]


def test_counting_every_import_no_part_is_in_a_cycle_nor_climbs_a_layer(
    every_graph: import_graph.Graph,
) -> None:
    # Lazy and type-only imports count: the stores' recover() reaches the agent through a
    # Protocol verb, the run log sits below the web, MCP's serve above the agent. A part
    # missing from LAYERS counts as a climb, so the table lists every part.
    report = import_graph.describe_every(every_graph)
    assert report == ["0 cycles, 0 climbing imports"], "\n".join(report)


def test_the_layer_table_names_only_parts_that_exist(every_graph: import_graph.Graph) -> None:
    parts = set(every_graph.edges)
    stale = {
        name
        for name in import_graph.LAYERS
        if import_graph.PACKAGE + ("." + name if name else "") not in parts
    }
    assert stale == set()


def test_the_command_prints_the_graph_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "import_graph.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("no cycle")
    assert any(line.split("] ")[-1].startswith("agent_sync.stores -> ") for line in lines)


def test_a_cycle_is_found_named_and_fails_the_command(tmp_path: Path) -> None:
    package = tmp_path / "agent_sync"
    (package / "run").mkdir(parents=True)
    (package / "stores").mkdir()
    files = {
        "__init__.py": "from .run import x\nfrom .stores import y\n",  # the facade: no node
        "run/__init__.py": "from ._driver import x\n",
        "run/_driver.py": "from ..stores._protocol import y\nx = 1\n",
        "stores/__init__.py": "from ._protocol import y\n",
        "stores/_protocol.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from ..run import x  # not at import time: no edge
            try:
                from ..run._state import State  # at import time: an edge
            except ImportError:
                pass
            def later():
                from ..run import x  # inside a function: no edge
            y = 2
        """,
        "run/_state.py": "State = object\n",
    }
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text))

    graph = import_graph.build(package)
    assert graph.find_cycle() == ["agent_sync.run", "agent_sync.stores", "agent_sync.run"]
    lines = import_graph.describe(graph)
    assert lines[0] == "CYCLE: agent_sync.run -> agent_sync.stores -> agent_sync.run"
    assert "  agent_sync.stores._protocol:6 imports agent_sync.run._state" in lines
    assert not any("_protocol:4 " in line or "_protocol:10 " in line for line in lines)
    assert import_graph.main(["--package", str(package)]) == 1

    (package / "stores" / "_protocol.py").write_text("y = 2\n")
    assert import_graph.build(package).find_cycle() is None
    assert import_graph.main(["--package", str(package), "--modules"]) == 0


def test_every_import_mode_counts_lazy_and_type_only_imports_and_checks_the_layers(
    tmp_path: Path,
) -> None:
    # A lazy import that climbs a layer is still a dependency: the stores' function-level
    # import of the run, and the cancel module's type-only import of the root, both count.
    package = tmp_path / "agent_sync"
    (package / "run").mkdir(parents=True)
    (package / "stores").mkdir()
    files = {
        "__init__.py": "from .run import x\n__version__ = '1'\n",
        "run/__init__.py": "from ..stores import y\nx = 1\n",
        "stores/__init__.py": "def later():\n    from ..run import x\ny = 2\n",
        "cancel.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import x\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)

    assert import_graph.build(package).find_cycle() is None  # import time: no cycle
    graph = import_graph.build(package, every=True)
    assert import_graph.cycles(graph) == [["agent_sync.run", "agent_sync.stores"]]
    climbing = {(w.source, w.target) for w in import_graph.climbs(graph)}
    assert climbing == {
        ("agent_sync.stores", "agent_sync.run"),  # layer 6 -> 7
        ("agent_sync.cancel", "agent_sync"),  # layer 2 -> the facade
    }
    report = import_graph.describe_every(graph)
    assert report[0] == "CYCLE of 2 parts: agent_sync.run agent_sync.stores"
    assert "  agent_sync.stores:2 imports agent_sync.run" in report
    assert report[-1] == "1 cycles, 2 climbing imports"
    assert import_graph.main(["--package", str(package), "--every-import"]) == 1

    (package / "stores" / "__init__.py").write_text("y = 2\n")
    (package / "cancel.py").write_text("")
    assert import_graph.main(["--package", str(package), "--every-import"]) == 0
